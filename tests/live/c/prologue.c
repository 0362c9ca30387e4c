/* Functions whose arguments exist only after the prologue has stored them (-O0): tests/live/test_uprobes.py
 * reads them at function entry, as perf does, and compares with what the program prints. */
#include <stdio.h>

__attribute__((noinline)) int café(int n) { return n; }
__attribute__((noinline)) int twice(int n) { return n * 2; }

__attribute__((noinline)) void work(const char *name, int n)
{
    printf("work name=%s n=%d\n", name, n);
}

__attribute__((noinline)) long spread(long a, long b,
                                      long c)
{
    return a + b + c;
}

int main(void)
{
    static const char *names[] = {"alpha", "beta-gamma", "delta"};
    long sum = 0;
    for (int i = 0; i < 3; i++) {
        printf("call n=%d\n", i);
        sum += café(i) + twice(i) + spread(i, 10 * i, 100 * i);
        work(names[i], i);
    }
    return sum == 0;
}
