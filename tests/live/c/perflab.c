/* A program for perf probe's lab commands run through kprobe-tui probe (tests/live/test_perf_dropin.py):
 * a string argument, a flags argument, a struct reached through a pointer, a return value. */
#include <stdio.h>
#include <string.h>

struct conn {
	int fd;
	unsigned int flags;
	const char *peer;
};

__attribute__((noinline)) int lab_open(const char *path, int flags)
{
	return (int)strlen(path) + flags;
}

__attribute__((noinline)) long lab_recv(struct conn *c, long len, unsigned int flags)
{
	if (flags & 2)
		return -1;
	return len + c->fd;
}

int main(int argc, char **argv)
{
	struct conn c = { 3, 0x40, "peer" };
	int r = lab_open(argc > 1 ? argv[1] : "/etc/hostname", 0x241);
	long n = lab_recv(&c, 100 + r, 0x40);
	printf("%d %ld\n", r, n);
	return 0;
}
