/* Bench workload for `cargo xtask bench` (xtask/src/bench/).
 *
 * Two functions with the same body, differing only in their first instruction:
 *   emulated_site  starts with `nop`, which x86 uprobes emulate (cheap hit);
 *   stepped_site   starts with `lea`, which the kernel must single-step (expensive hit);
 *   cet_site       starts with `endbr64`, as every function of code built with -fcf-protection
 *                  does (Ubuntu's default), then `nop`: the kernel single-steps `endbr64`;
 *   moved_site     stepped_site's `lea`, then a `nop`: xtrace moves its entry probe onto the
 *                  `nop` (--entry auto), as it does for about a third of libc's functions.
 *   string_site    takes a pointer to a 150-byte string (the `strings` measurement reads it as
 *                  `str` and `str:4096`); `hits call string_site N` calls it through a wrapper.
 * The bench checks both first instructions with objdump before trusting any number.
 *
 * Every mode waits for one line on stdin first, so a tracer can attach before the first call.
 *   hits call SYMBOL N [THREADS]          each thread calls SYMBOL N times in a tight loop;
 *                                         prints `ns_per_call X` (per thread), `calls C`, `elapsed_ns E`
 *   hits rate SYMBOL RATE SECS [THREADS]  RATE calls/s in all for SECS seconds: each thread makes
 *                                         the calls due by the end of each 1 ms tick back to back,
 *                                         then sleeps to the tick (so the CPU stays free for the
 *                                         tracer below saturation); prints the same three lines
 * Build: cc -O2 -g -fno-inline -pthread -o hits hits.c
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__attribute__((noinline)) long emulated_site(long x) {
    __asm__ volatile("nop");
    return x * 3 + 1;
}

__attribute__((noinline)) long stepped_site(long x) {
    return x * 3 + 1;
}

__attribute__((noinline)) long cet_site(long x) {
    __asm__ volatile("endbr64\n\tnop");
    return x * 3 + 1;
}

__attribute__((naked, noinline)) long moved_site(long x) {
    __asm__("lea 0x1(%rdi,%rdi,2), %rax\n\t"
            "nop\n\t"
            "ret");
}

/* The `string_site` workload's argument: "0123456789" 15 times. */
static char text150[151];

__attribute__((noinline)) long string_site(const char *s) {
    __asm__ volatile("nop");
    return (long)s[0] + 1;
}

__attribute__((noinline)) static long string_call(long x) {
    return string_site(text150) + x;
}

static long (*site)(long);
static long calls_per_thread;
static double rate_per_thread; /* calls per second per thread; 0 in `call` mode */
static volatile long sink;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct result {
    long long elapsed_ns;
    long calls;
};

static void *worker(void *arg) {
    struct result *res = arg;
    long acc = 0;
    long long start = now_ns();
    if (rate_per_thread <= 0) {
        for (long i = 0; i < calls_per_thread; i++)
            acc += site(i);
    } else {
        long i = 0;
        for (long tick = 1; i < calls_per_thread; tick++) {
            long due = (long)(rate_per_thread * (double)tick / 1000.0);
            if (due > calls_per_thread)
                due = calls_per_thread;
            for (; i < due; i++)
                acc += site(i);
            if (i >= calls_per_thread)
                break;
            long long wake = start + tick * 1000000LL;
            struct timespec ts = {wake / 1000000000LL, wake % 1000000000LL};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        }
    }
    res->elapsed_ns = now_ns() - start;
    res->calls = calls_per_thread;
    sink += acc;
    return NULL;
}

static void usage(void) {
    fprintf(stderr, "usage: hits call SYMBOL N [THREADS] | hits rate SYMBOL RATE SECS [THREADS]\n");
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 4)
        usage();
    if (strcmp(argv[2], "emulated_site") == 0)
        site = emulated_site;
    else if (strcmp(argv[2], "stepped_site") == 0)
        site = stepped_site;
    else if (strcmp(argv[2], "cet_site") == 0)
        site = cet_site;
    else if (strcmp(argv[2], "moved_site") == 0)
        site = moved_site;
    else if (strcmp(argv[2], "string_site") == 0)
        site = string_call;
    else
        usage();
    int threads = 1;
    if (strcmp(argv[1], "call") == 0) {
        calls_per_thread = atol(argv[3]);
        if (argc > 4)
            threads = atoi(argv[4]);
    } else if (strcmp(argv[1], "rate") == 0 && argc >= 5) {
        double rate = atof(argv[3]), secs = atof(argv[4]);
        if (argc > 5)
            threads = atoi(argv[5]);
        if (threads < 1 || rate <= 0 || secs <= 0)
            usage();
        rate_per_thread = rate / threads;
        calls_per_thread = (long)(rate_per_thread * secs);
    } else {
        usage();
    }
    if (threads < 1 || threads > 64 || calls_per_thread < 1)
        usage();

    for (int i = 0; i < 150; i++)
        text150[i] = (char)('0' + i % 10);

    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 1;

    pthread_t tids[64];
    struct result res[64];
    long long start = now_ns();
    for (int t = 0; t < threads; t++)
        pthread_create(&tids[t], NULL, worker, &res[t]);
    long long sum_thread_ns = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tids[t], NULL);
        sum_thread_ns += res[t].elapsed_ns;
    }
    long long elapsed = now_ns() - start;
    long total = calls_per_thread * threads;
    printf("ns_per_call %.3f\n", (double)sum_thread_ns / (double)total);
    printf("calls %ld\n", total);
    printf("elapsed_ns %lld\n", elapsed);
    return 0;
}
