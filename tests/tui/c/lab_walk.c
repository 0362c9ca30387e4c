/* The lab's program for the tmux walk: work()'s loop line (work:3) has several addresses (its start, test
 * and step), as perf probe also finds them. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) int work(int n)
{
	int total = 0;
	for (int i = 0; i < n; i++)
		total += i;
	return total;
}

int main(int argc, char **argv)
{
	int passes = argc > 1 ? atoi(argv[1]) : 1;
	int sum = 0;

	for (int p = 0; p < passes; p++)
		sum += work(3);
	printf("%d\n", sum);
	return 0;
}
