/* Raw uprobe targets: each function's arguments and result are printed, so a test can compare
 * what the probe captured with what the program saw. */
#include <stdio.h>
#include <stdlib.h>

long counter = 4242;

__attribute__((noinline)) long add3(long a, long b, long c)
{
	return a * 100 + b * 10 + c;
}

__attribute__((noinline)) int negate(int x)
{
	return -x;
}

int main(int argc, char **argv)
{
	long a = argc > 1 ? atol(argv[1]) : 7;
	long r = add3(a, 2, 3);
	int n = negate((int)a);
	printf("add3 %ld %ld %ld -> %ld\n", a, 2L, 3L, r);
	printf("negate %ld -> %d\n", a, n);
	printf("counter %ld\n", counter);
	return 0;
}
