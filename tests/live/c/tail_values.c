/* Calls hit() with known values and prints them; tests/live/test_tail.py compares the events.
 * argv[1]: calls (default 5); argv[2]: if present, flood silently (no printing). */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long hit(long n, const char *s, const int *arr)
{
    asm volatile("" ::: "memory");
    return n + s[0] + arr[0];
}

int main(int argc, char **argv)
{
    static const char *words[] = {"alpha", "beta gamma", "delta \"q\"", "b-side"};
    long calls = argc > 1 ? atol(argv[1]) : 5;
    int quiet = argc > 2;
    long sum = 0;
    for (long i = 0; i < calls; i++) {
        int arr[4] = {(int)i, (int)-i, (int)(i * 3), 42};
        const char *s = words[i % 4];
        sum += hit(100 + i, s, arr);
        if (!quiet)
            printf("n=%ld s=%s arr=%d,%d,%d,%d\n", 100 + i, s, arr[0], arr[1], arr[2], arr[3]);
    }
    return sum == 0;
}
