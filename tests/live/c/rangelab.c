/* Variables whose locations change inside a function, for perf probe -V --range (tests/live/test_perf_dropin.py):
 * location lists (a value in a register for part of the function only), locals valid only later in the
 * function, a block-scoped local, a static local, an inlined helper, globals for --externs. */
#include <stdio.h>
#include <stdlib.h>

int range_total;
static int range_calls;
const char *range_label = "lab";

static inline __attribute__((always_inline)) long range_mix(long a, long b)
{
	long m = a * 31 + b;
	if (m & 1)
		m ^= range_total;
	return m;
}

__attribute__((noinline)) long range_walk(const int *v, int n, long seed)
{
	static int depth;
	long sum = seed;
	int i;

	depth++;
	for (i = 0; i < n; i++) {
		long sq = (long)v[i] * v[i];
		sum += range_mix(sq, i);
		if (sum > 1000) {
			int over = (int)(sum % 97);
			printf("over %d\n", over);
			sum -= over;
		}
	}
	long tail = sum * 3 + n;
	range_calls++;
	range_total += (int)tail;
	depth--;
	return tail + depth;
}

int main(int argc, char **argv)
{
	int v[8];
	for (int i = 0; i < 8; i++)
		v[i] = argc > 1 ? atoi(argv[1]) + i : i * 7;
	printf("%ld %s %d\n", range_walk(v, 8, argc), range_label, range_calls);
	return 0;
}
