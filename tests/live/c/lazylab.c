/* Lazy patterns (;PTN) in perf probe and kprobe-tui probe (tests/live/test_perf_dropin.py): a function whose
 * only line shares its entry address, an inlined helper called twice, several returns, one file for SRC;PTN. */
#include <stdio.h>
#include <string.h>

static inline __attribute__((always_inline)) int lazy_clamp(int v, int hi)
{
	if (v > hi)
		v = hi;
	return v;
}

__attribute__((noinline)) int lazy_len(const char *s)
{
	return (int)strlen(s);
}

__attribute__((noinline)) int lazy_pick(int a, int b, int hi)
{
	int x = lazy_clamp(a, hi);
	int y = lazy_clamp(b, hi);
	if (x > y)
		return x - y;
	return y - x + lazy_len("pick");
}

int main(int argc, char **argv)
{
	int n = lazy_len(argc > 1 ? argv[1] : "lazy");
	printf("%d\n", lazy_pick(n, argc, 3));
	return 0;
}
