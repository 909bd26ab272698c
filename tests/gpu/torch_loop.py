# The loop of tests/gpu/check.sh: ITERS steps of matmul + relu + add + a 1 MiB DtoH copy, each in an NVTX range.
# With SECS > 0 it first prints "ready" and loops for SECS seconds instead (for --pid).
# profiled_loop.py imports it for step().
import os, sys, time, torch
dev = torch.device("cuda")
a = torch.randn(1024, 1024, device=dev); b = torch.randn(1024, 1024, device=dev)
torch.cuda.synchronize()
def step():
    torch.cuda.nvtx.range_push("step")
    c = a @ b
    d = torch.relu(c) + 1.0
    h = d[0:256].cpu()
    torch.cuda.nvtx.range_pop()
    return h
def main():
    iters = int(sys.argv[1]); secs = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    if secs > 0:
        step(); print("ready", os.getpid(), flush=True)
        end = time.time() + secs; n = 0
        while time.time() < end:
            step(); n += 1
        print("steps", n, flush=True)
    else:
        t0 = time.time()
        for _ in range(iters): step()
        torch.cuda.synchronize()
        print("done", iters, round(time.time() - t0, 3), flush=True)
if __name__ == "__main__":
    main()
