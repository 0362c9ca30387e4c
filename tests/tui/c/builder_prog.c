/* A small program for the probe builder tests: work() is called a known number of times. */
#include <stdio.h>
#include <stdlib.h>

struct rec {
	int id;
	unsigned int flags;
	const char *name;
};

static int total;

__attribute__((noinline)) int work(struct rec *rec, int n)
{
	int sum = rec->id * n;

	total += sum;
	return sum + (int)rec->flags;
}

__attribute__((noinline)) static void helper(void)
{
	total++;
}

int main(int argc, char **argv)
{
	int calls = argc > 1 ? atoi(argv[1]) : 1;
	struct rec rec = { 7, 0x10, "seven" };

	for (int i = 0; i < calls; i++) {
		rec.id = 7 + i;
		work(&rec, i + 1);
	}
	helper();
	printf("%d\n", total);
	return 0;
}
