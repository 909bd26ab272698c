/* Context-switch workload for the off-CPU bench: two threads hand a token back and forth over two
 * pipes, both pinned to CPU 0, so that every hand-off is one thread blocking in read() and the
 * other running: two off-CPU waits per round trip. Usage: switches ROUNDS [WORK_NS]: WORK_NS of
 * arithmetic before each hand-off (0: a bare ping-pong). The rounds run in 20 batches, each timed
 * with CLOCK_MONOTONIC. Prints `waits N` (off-CPU waits made, 2 per round trip) and `elapsed_ns`
 * (all rounds), then `batch_waits` and `fastest_batch_ns`: the fastest batch's waits and time.
 * Other processes on a shared machine only ever add time to a batch, so the fastest is the one
 * they disturbed least. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define BATCHES 20

static int ping[2], pong[2];
static long rounds, work_ns;

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* Arithmetic for about `ns` nanoseconds. */
static void work(long ns) {
    if (ns <= 0)
        return;
    long long until = now_ns() + ns;
    volatile unsigned long long x = 1;
    while (now_ns() < until)
        for (int i = 0; i < 64; i++)
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
}

static void pin(void) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) {
        perror("sched_setaffinity");
        exit(1);
    }
}

static void *partner(void *unused) {
    (void)unused;
    pin();
    char c;
    for (long i = 0; i < rounds; i++) {
        if (read(ping[0], &c, 1) != 1)
            exit(1);
        work(work_ns);
        if (write(pong[1], &c, 1) != 1)
            exit(1);
    }
    return NULL;
}

int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 100000;
    work_ns = argc > 2 ? atol(argv[2]) : 0;
    if (pipe(ping) != 0 || pipe(pong) != 0) {
        perror("pipe");
        return 1;
    }
    pin();
    pthread_t other;
    pthread_create(&other, NULL, partner, NULL);
    char c = 'x';
    long per_batch = rounds / BATCHES > 0 ? rounds / BATCHES : 1;
    long long start = now_ns(), fastest = -1;
    for (long done = 0; done < rounds;) {
        long n = rounds - done < per_batch ? rounds - done : per_batch;
        long long batch_start = now_ns();
        for (long i = 0; i < n; i++) {
            work(work_ns);
            if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
                return 1;
        }
        long long took = now_ns() - batch_start;
        if (n == per_batch && (fastest < 0 || took < fastest))
            fastest = took;
        done += n;
    }
    long long elapsed = now_ns() - start;
    pthread_join(other, NULL);
    printf("waits %ld\nelapsed_ns %lld\n", 2 * rounds, elapsed);
    printf("batch_waits %ld\nfastest_batch_ns %lld\n", 2 * per_batch, fastest);
    return 0;
}
