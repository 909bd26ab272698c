"""The Python workload of `cargo xtask bench --only python` (xtask/src/bench/python.rs).

- `pyspin.py spin ITERATIONS`: CPU-bound pure Python across three functions (outer -> inner ->
  step), timed with time.perf_counter_ns (CLOCK_MONOTONIC) around the work only; prints
  `elapsed_ns N`, as spin.c does.
- `pyspin.py calls LIB N DEPTH`: loads LIB (pycall.c) with ctypes, waits for a line on stdin, then
  calls its pyb_call N times from `loop`, run DEPTH Python frames deep (<module>, main, `deep`
  repeated, `loop`; at least 4); prints `ns_per_call`, `calls` and `elapsed_ns`, as the bench's `hits` does.
- `pyspin.py recurse SECONDS DEPTH PROCESSES`: PROCESSES processes (this one and forked
  children), each DEPTH frames of `recurse` deep under <module> and main, spinning in the
  innermost one for SECONDS (python_symbolize.rs); prints `elapsed_ns`.
"""
import ctypes
import os
import sys
import time

MASK = 0xFFFFFFFFFFFFFFFF


def step(x):
    return (x * 6364136223846793005 + 1442695040888963407) & MASK


def inner(x, n):
    for _ in range(n):
        x = step(x) ^ (x >> 17)
    return x


def outer(iterations):
    x = 1
    for _ in range(iterations // 1000):
        x = inner(x, 1000)
    return x


def loop(call, n):
    started = time.perf_counter_ns()
    for i in range(n):
        call(i)
    return time.perf_counter_ns() - started


def deep(call, n, frames):
    if frames > 0:
        return deep(call, n, frames - 1)
    return loop(call, n)


def recurse(depth, until):
    if depth > 1:
        return recurse(depth - 1, until)
    x = 1
    while time.monotonic_ns() < until:
        for _ in range(1000):
            x = (x * 6364136223846793005 + 1442695040888963407) & MASK
    return x


def recursions(seconds, depth, processes):
    started = time.monotonic_ns()
    until = started + int(seconds * 1e9)
    children = []
    for _ in range(processes - 1):
        pid = os.fork()
        if pid == 0:
            recurse(depth, until)
            os._exit(0)
        children.append(pid)
    recurse(depth, until)
    for pid in children:
        os.waitpid(pid, 0)
    print("elapsed_ns", time.monotonic_ns() - started)


def main():
    if sys.argv[1] == "recurse":
        recursions(float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        return
    if sys.argv[1] == "spin":
        started = time.perf_counter_ns()
        outer(int(sys.argv[2]))
        print("elapsed_ns", time.perf_counter_ns() - started)
        return
    call = ctypes.CDLL(sys.argv[2]).pyb_call
    call.argtypes, call.restype = [ctypes.c_long], ctypes.c_long
    n, depth = int(sys.argv[3]), int(sys.argv[4])
    sys.stdin.readline()
    # <module>, main and loop are three of the DEPTH frames, deep's calls the rest.
    elapsed = deep(call, n, max(depth - 4, 0))
    print(f"ns_per_call {elapsed / n}\ncalls {n}\nelapsed_ns {elapsed}", flush=True)


main()
