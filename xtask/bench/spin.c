/* CPU-bound workload for the sampling bench: a fixed amount of arithmetic across a few frames,
 * timed with CLOCK_MONOTONIC around the work only. Usage: spin ITERATIONS. Prints elapsed_ns. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static unsigned long long step(unsigned long long x) { return x * 6364136223846793005ULL + 1442695040888963407ULL; }

static unsigned long long inner(unsigned long long x, long n) {
    for (long i = 0; i < n; i++)
        x = step(x) ^ (x >> 17);
    return x;
}

static unsigned long long outer(long iterations) {
    unsigned long long x = 1;
    for (long i = 0; i < iterations / 1000; i++)
        x = inner(x, 1000);
    return x;
}

int main(int argc, char **argv) {
    long iterations = argc > 1 ? atol(argv[1]) : 100000000;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    volatile unsigned long long sink = outer(iterations);
    clock_gettime(CLOCK_MONOTONIC, &b);
    (void)sink;
    printf("elapsed_ns %lld\n", (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
    return 0;
}
