/* The traced function of the bench's `--stacks` rows (xtask/src/bench/python.rs), built as a shared
 * library and called through ctypes by pyspin.py's `calls` mode. It starts with `nop`, which x86
 * uprobes emulate, so a hit is not single-stepped. */
__attribute__((noinline)) long pyb_call(long x) {
    __asm__ volatile("nop");
    return x * 3 + 1;
}
