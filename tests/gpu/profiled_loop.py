# torch.profiler over the loop of torch_loop.py: ITERS steps with CUDA activities, then each
# kernel's count and device time (from the Chrome trace it exports: events of category "kernel")
# written to OUT as JSON {"name": [count, total_ns]}, for compare_device.py; the steps' time is
# printed as torch_loop.py prints it.
#   python3 profiled_loop.py ITERS OUT
import json, os, sys, tempfile, time
import torch
from torch.profiler import ProfilerActivity, profile
import torch_loop

iters, out = int(sys.argv[1]), sys.argv[2]
torch_loop.step()
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    t0 = time.time()
    for _ in range(iters):
        torch_loop.step()
    torch.cuda.synchronize()
    # As torch_loop.py prints it: the steps' time, here under torch.profiler.
    print("done", iters, round(time.time() - t0, 3), flush=True)
trace = os.path.join(tempfile.mkdtemp(), "trace.json")
prof.export_chrome_trace(trace)
kernels = {}
for event in json.load(open(trace))["traceEvents"]:
    if event.get("cat") == "kernel":
        count, total = kernels.get(event["name"], (0, 0))
        kernels[event["name"]] = (count + 1, total + round(float(event["dur"]) * 1000))
json.dump(kernels, open(out, "w"), indent=1)
print("torch.profiler:", sum(c for c, _ in kernels.values()), "kernels of", len(kernels), "names")
