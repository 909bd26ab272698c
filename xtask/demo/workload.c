/* Demo workload for `cargo xtask demo`: a fake training loop on 2 threads.
 * Each step calls load_batch() (sleeps ~2 ms), forward() (CPU ~3 ms), backward() (CPU ~5 ms,
 * calling matmul() twice) and optimizer_step() (CPU ~1 ms). All are non-static and noinline so
 * their symbols exist for uprobes. Prints its pid, then loops until killed. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Burns CPU for about `us` microseconds; the volatile sink keeps the loop. */
static void spin_us(long us) {
    static volatile unsigned long sink;
    long long end = now_ns() + us * 1000LL;
    while (now_ns() < end) {
        for (int i = 0; i < 1000; i++) sink += (unsigned long)i * 2654435761u;
    }
}

NOINLINE void load_batch(void) {
    struct timespec ts = {0, 2 * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

NOINLINE void matmul(void) { spin_us(2000); }

NOINLINE void forward(void) { spin_us(3000); }

NOINLINE void backward(void) {
    matmul();
    matmul();
    spin_us(1000);
}

NOINLINE void optimizer_step(void) { spin_us(1000); }

NOINLINE void train_step(void) {
    load_batch();
    forward();
    backward();
    optimizer_step();
}

static void *train_loop(void *arg) {
    (void)arg;
    for (;;) train_step();
    return NULL;
}

int main(void) {
    printf("workload: pid %d\n", (int)getpid());
    fflush(stdout);
    pthread_t threads[2];
    for (int i = 0; i < 2; i++) {
        if (pthread_create(&threads[i], NULL, train_loop, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    for (int i = 0; i < 2; i++) pthread_join(threads[i], NULL);
    return 0;
}
