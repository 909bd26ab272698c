/* Bench workload for the GPU launch rows of `cargo xtask bench` (xtask/src/bench/gpu_launch.rs),
 * on the stand-in CUDA driver and CUPTI of tests/fixtures (cudadrv.c, cupti.c).
 *
 * `launches LIBCUPTI N WAIT` dlopen()s LIBCUPTI (as PyTorch maps its libcupti), calls cuInit(0)
 * (the driver loads CUDA_INJECTION64_PATH when it is set), waits for one line on stdin (so a
 * tracer can attach first), then, when WAIT is 1, waits (at most 10 s) until the stand-in CUPTI
 * has activity records enabled (xtrace switched the device timeline on), and makes N launches of
 * a one-thread kernel through cuLaunchKernel; prints `ns_per_call X` (per launch), `calls N` and
 * `elapsed_ns E`. Exits 1 when a call fails or the activation does not come.
 * Build: cc -O2 -g -o launches launches.c DIR/libcuda.so.1 -Wl,-rpath,DIR -ldl
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef void *CUfunction;
CUresult cuInit(unsigned);
CUresult cuModuleGetFunction(CUfunction *, void *, const char *);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        void *, void **, void **);

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Whether the stand-in CUPTI has had an activity kind enabled (and not disabled since). */
static int active(void) {
    void (*counts)(char *, size_t) = (void (*)(char *, size_t))dlsym(RTLD_DEFAULT, "xtfake_cupti_counts");
    if (!counts)
        return 0;
    char text[1024];
    counts(text, sizeof text);
    const char *on = strstr(text, "cuptiActivityEnable="), *off = strstr(text, "cuptiActivityDisable=");
    return on && off && atol(on + 20) > atol(off + 21);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: launches LIBCUPTI N WAIT\n");
        return 2;
    }
    if (!dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "launches: %s\n", dlerror());
        return 1;
    }
    long n = atol(argv[2]);
    CUfunction kernel;
    if (cuInit(0) || cuModuleGetFunction(&kernel, NULL, "step"))
        return 1;
    char line[16];
    if (!fgets(line, sizeof line, stdin))
        return 1;
    if (strcmp(argv[3], "1") == 0) {
        for (int i = 0; i < 1000 && !active(); i++)
            usleep(10000);
        if (!active()) {
            fprintf(stderr, "launches: the device timeline did not switch on within 10 s\n");
            return 1;
        }
    }
    long long start = now_ns();
    for (long i = 0; i < n; i++)
        if (cuLaunchKernel(kernel, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL))
            return 1;
    long long elapsed = now_ns() - start;
    printf("ns_per_call %.3f\ncalls %ld\nelapsed_ns %lld\n", (double)elapsed / (double)n, n, elapsed);
    return 0;
}
