# Sets xtrace's GPU device timeline of the check's loop beside torch.profiler's of the same loop:
# for each kernel torch.profiler saw, its count and device time in both, and whether they agree
# (the same count, device time within 5%). Names are compared demangled (c++filt, where present).
#   python3 compare_device.py XTRACE_SUMMARY_JSON TORCH_KERNELS_JSON
import json, shutil, subprocess, sys

summary = json.load(open(sys.argv[1]))
torch_kernels = json.load(open(sys.argv[2]))
device = summary.get("gpu_device")
if not device:
    sys.exit("compare: no gpu_device section in " + sys.argv[1])


def demangle(names):
    mangled = [n for n in names if n.startswith("_Z")]
    if not mangled or not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True, text=True).stdout
    plain = dict(zip(mangled, out.splitlines()))
    return {n: plain.get(n, n) for n in names}


ours = {}
names = demangle([k["name"] for k in device["top_kernels"]])
for k in device["top_kernels"]:
    ours[names[k["name"]]] = (k["count"], k["total_ns"])
theirs = demangle(list(torch_kernels))
failed = 0
print(f"{'kernel':60} {'xtrace':>16} {'torch.profiler':>16}  time ratio")
for name, (count, total) in sorted(torch_kernels.items(), key=lambda kv: -kv[1][1]):
    plain = theirs[name]
    mine = ours.get(plain)
    if mine is None:
        print(f"{plain[:60]:60} {'(not seen)':>16} {count:>7} {total / 1e6:7.2f}ms  FAIL")
        failed += 1
        continue
    ratio = mine[1] / total if total else float("nan")
    ok = mine[0] == count and abs(ratio - 1) <= 0.05
    failed += not ok
    print(f"{plain[:60]:60} {mine[0]:>7} {mine[1] / 1e6:7.2f}ms {count:>7} {total / 1e6:7.2f}ms"
          f"  {ratio:.3f} {'ok' if ok else 'FAIL'}")
extra = sorted(set(ours) - set(theirs.values()))
if extra:
    print("xtrace only (outside torch.profiler's window):", ", ".join(n[:60] for n in extra))
clock = device.get("clock", {})
print("clock:", clock.get("used"), "moved", clock.get("moved"), clock.get("why") or "")
print("subscribed with:", device.get("subscribed_with"), "dropped:", device.get("records_dropped"))
for notice in device.get("notices", []):
    print("notice:", notice)
print("compare:", "every kernel agrees" if not failed else f"{failed} kernel(s) disagree")
