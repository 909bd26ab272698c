/* Bench workload for the range rows of `cargo xtask bench` (xtask/src/bench/ranges.rs).
 *
 * `ranges N` waits for one line on stdin (so a tracer can attach first), then makes N pairs of
 * xtrace_range_push("step") / xtrace_range_pop() through xtrace's tool library, and prints
 * `ns_per_call X` (per pair), `calls N` and `elapsed_ns E`.
 * Build: cc -O2 -g -I xtrace/tool/include -o ranges ranges.c -L DIR -lxtrace_tool -Wl,-rpath,DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "xtrace_range.h"

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: ranges N\n");
        return 2;
    }
    long n = atol(argv[1]);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 1;
    long long start = now_ns();
    for (long i = 0; i < n; i++) {
        xtrace_range_push("step");
        xtrace_range_pop();
    }
    long long elapsed = now_ns() - start;
    printf("ns_per_call %.3f\ncalls %ld\nelapsed_ns %lld\n", (double)elapsed / (double)n, n, elapsed);
    return 0;
}
