/* System-call workload for the off-CPU bench: one thread makes getppid(2) calls, none of which
 * blocks, so that what a tracer adds to each is the cost of its programs on the system-call path
 * (the off-CPU programs' sys_exit raw tracepoint) and not a context switch. Usage: syscalls N:
 * N calls in 20 batches, each timed with CLOCK_MONOTONIC; prints the fastest batch, `calls` (its
 * calls) and `elapsed_ns` (its time). Other processes on a shared machine only ever add time to a
 * batch, so the fastest is the one they disturbed least. Called through syscall(2), so that no C
 * library caches the answer. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BATCHES 20

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: syscalls N\n");
        return 2;
    }
    long batch = atol(argv[1]) / BATCHES;
    if (batch < 1)
        batch = 1;
    long sum = 0;
    long long fastest = -1;
    for (int b = 0; b < BATCHES; b++) {
        long long start = now_ns();
        for (long i = 0; i < batch; i++)
            sum += syscall(SYS_getppid);
        long long elapsed = now_ns() - start;
        if (fastest < 0 || elapsed < fastest)
            fastest = elapsed;
    }
    if (sum == 0)
        return 1;
    printf("calls %ld\nelapsed_ns %lld\n", batch, fastest);
    return 0;
}
