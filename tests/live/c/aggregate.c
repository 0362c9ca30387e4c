/* Known behaviour for the aggregation tests (tests/live/test_aggregate.py, tests/kernel/test_aggregate_guest.py).
 *
 *   aggregate values N   work(len, port) N times: len = (i % 10) * 100 - 200 (-200..700, N/10 each),
 *                        port 0x3500 (53 in network byte order) for even i, 0x5000 (80) for odd i;
 *                        the first half of the calls as comm "kpt-alpha", the rest as "kpt beta-2"
 *   aggregate sleep N MS nap() N times, each sleeping MS milliseconds
 *   aggregate recurse N  rec(3) N times: nested calls, the innermost sleeps 2 ms, the others 1 ms
 *   aggregate flood N    work() N times, nothing else (benchmarks)
 *   aggregate read N SIZE  as comm "kpt-reader", N reads of SIZE bytes from /dev/zero (vfs_read's count)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) long work(long len, unsigned short port)
{
    asm volatile("" ::: "memory");
    return len + port;
}

static void sleep_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t))
        ;
}

__attribute__((noinline)) long nap(long ms)
{
    sleep_ms(ms);
    asm volatile("" ::: "memory");
    return ms;
}

__attribute__((noinline)) long rec(long depth)
{
    asm volatile("" ::: "memory");
    if (depth > 0) {
        sleep_ms(1);
        return rec(depth - 1) + 1;
    }
    sleep_ms(2);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "values";
    long n = argc > 2 ? atol(argv[2]) : 100;
    long sum = 0;
    if (!strcmp(mode, "values")) {
        prctl(PR_SET_NAME, "kpt-alpha");
        for (long i = 0; i < n; i++) {
            if (i == n / 2)
                prctl(PR_SET_NAME, "kpt beta-2");
            sum += work((i % 10) * 100 - 200, i % 2 ? 0x5000 : 0x3500);
        }
    } else if (!strcmp(mode, "sleep")) {
        long ms = argc > 3 ? atol(argv[3]) : 10;
        for (long i = 0; i < n; i++)
            sum += nap(ms);
    } else if (!strcmp(mode, "recurse")) {
        for (long i = 0; i < n; i++)
            sum += rec(3);
    } else if (!strcmp(mode, "read")) {
        long size = argc > 3 ? atol(argv[3]) : 3000;
        char *buffer = malloc(size);
        int fd = open("/dev/zero", O_RDONLY);
        if (!buffer || fd < 0)
            return 1;
        prctl(PR_SET_NAME, "kpt-reader");
        for (long i = 0; i < n; i++)
            sum += read(fd, buffer, size);
    } else if (!strcmp(mode, "flood")) {
        for (long i = 0; i < n; i++)
            sum += work(i & 1023, 0x3500);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    printf("%ld\n", sum);
    return 0;
}
