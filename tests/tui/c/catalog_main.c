/* Symbols of every kind the binary catalog classifies: DWARF functions, a static name defined in two
 * files (ambiguous), an ifunc, a size-0 assembler label, a .cold clone (at -O2), imports (printf). */
#include <stdio.h>

int twin_caller(int x);

__attribute__((noinline)) static int twin(int x)
{
	return x + 1;
}

static int pick_double(int x)
{
	return x * 2;
}

static int (*resolve_pick(void))(int)
{
	return pick_double;
}

int pick(int x) __attribute__((ifunc("resolve_pick")));

__asm__(".text\n.globl marker\n.type marker, @function\nmarker:\n\tret\n");

__attribute__((cold, noinline)) void oops(const char *what, int x)
{
	fprintf(stderr, "%s %d\n", what, x);
}

/* At -O2 the unlikely branch is split out as may_fail.cold. */
__attribute__((noinline)) int may_fail(int x)
{
	int sum = 0;

	for (int i = 0; i < x; i++) {
		if (i > 1000) {
			oops("big", i);
			sum -= i * 7;
			oops("bigger", sum);
		}
		sum += i;
	}
	return sum;
}

int main(int argc, char **argv)
{
	printf("%d\n", twin(argc) + twin_caller(argc) + pick(argc) + may_fail(argc));
	return 0;
}
