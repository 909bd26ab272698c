#!/bin/bash
# The GPU check (not run by CI, which has no GPU): real PyTorch under xtrace, each part printing
# what it saw; outputs stay in OUTDIR. About 6.5 minutes on an H100.
#   tests/gpu/check.sh XTRACE OUTDIR
# XTRACE is a release build of xtrace with libxtrace_tool.so beside it; needs root, an NVIDIA GPU,
# a python3 with torch, and a kernel that loads BPF (`uname -r` and `xtrace check` come first).
#  1. launched --cuda --nvtx; 2000 steps untraced and traced (the device timeline on: a launched
#     command gets the variable); --pid with no flags (host side);
#  2. that device timeline beside torch.profiler's of the same 2000 steps (kernel counts and
#     device times, within 5%; the steps' time under each), the clock path taken, whether torch
#     maps libcupti by itself;
#  3. the untraced cost of CUDA_INJECTION64_PATH (5 interleaved pairs);
#  4. --pid --cuda --stacks on a process started with the variable: how soon after the attach
#     device records came, how long the stop waited for the last ones (real CUPTI's flush), the
#     Python lines behind its kernels and synchronizations, and how many kernels, copies and
#     memsets are linked to their calls (a flow arrow);
#  5. --pid --cuda --inject on a process started without it: the load (which thread, how long it
#     was stopped), its device timeline, and the loop running on to its own end.
set -u
X=${1:?usage: check.sh XTRACE OUTDIR}; W=${2:?usage: check.sh XTRACE OUTDIR}
D=$(dirname "$0"); LOOP=$D/torch_loop.py; LIB=$(dirname "$X")/libxtrace_tool.so
mkdir -p "$W"; export PYTHONUNBUFFERED=1
uname -r; nvidia-smi -L; "$X" check 2>&1 | tail -n 25
python3 -c 'import torch,sys;print(sys.version.split()[0],torch.__version__,torch.version.cuda)'
echo "== 1. launched, --cuda --nvtx, 200 steps"
timeout -k 5 150 "$X" --cuda --nvtx -o "$W/launch" -- python3 "$LOOP" 200; echo "rc=$?"
echo "== 2000 steps untraced, then under --cuda"
python3 "$LOOP" 2000
timeout -k 5 150 "$X" --cuda -q -o "$W/launch2000" -- python3 "$LOOP" 2000; echo "rc=$?"
grep -A6 "^CUDA:" "$W/launch2000/summary.txt" | cut -c1-200
echo "== --pid with no flags, 4 s"
python3 "$LOOP" 0 40 > "$W/loop.txt" 2>&1 & PY=$!
for _ in $(seq 1 60); do grep -q ready "$W/loop.txt" && break; sleep 0.5; done
RUST_LOG=xtrace::cuda::stub_handles=debug timeout -k 5 60 "$X" --pid $PY -d 4 -o "$W/pid" 2>&1 |
    grep -v " 0 host stub handles"
echo "rc=${PIPESTATUS[0]}"
kill $PY; wait $PY 2>/dev/null

echo "== 2. the device timeline of those 2000 steps, beside torch.profiler's (its time too)"
python3 -c 'import torch; torch.zeros(1, device="cuda")
print("torch maps libcupti by itself:", any("libcupti" in l for l in open("/proc/self/maps")))'
sed -n '/^GPU device:/,/^$/p' "$W/launch2000/summary.txt" | cut -c1-200
timeout -k 5 150 python3 "$D/profiled_loop.py" 2000 "$W/torch_kernels.json"
python3 "$D/compare_device.py" "$W/launch2000/summary.json" "$W/torch_kernels.json"

echo "== 3. untraced cost of CUDA_INJECTION64_PATH: 5 interleaved pairs of 2000 steps"
for _ in 1 2 3 4 5; do
    python3 "$LOOP" 2000 | sed 's/^/bare /'
    CUDA_INJECTION64_PATH=$LIB python3 "$LOOP" 2000 | sed 's/^/variable /'
done | tee "$W/variable.txt"
python3 - "$W/variable.txt" <<'PY'
import statistics, sys
runs = {"bare": [], "variable": []}
for line in open(sys.argv[1]):
    kind, _, _, secs = line.split()
    runs[kind].append(float(secs))
bare, var = (statistics.median(runs[k]) for k in ("bare", "variable"))
print(f"median bare {bare:.3f} s, with the variable {var:.3f} s: {100 * (var / bare - 1):+.2f}%")
PY

echo "== 4. --pid --cuda --stacks, 5 s, on a process started with the variable"
CUDA_INJECTION64_PATH=$LIB python3 "$LOOP" 0 40 > "$W/loop2.txt" 2>&1 & PY=$!
for _ in $(seq 1 60); do grep -q ready "$W/loop2.txt" && break; sleep 0.5; done
grep -c libcupti /proc/$PY/maps | sed 's/^/libcupti mappings before the attach: /'
RUST_LOG=xtrace::session=info timeout -k 5 60 "$X" --pid $PY --cuda --stacks -d 5 -q --trace-format json \
    -o "$W/pid_device" 2>&1 |
    grep -E "last GPU device records|did not hand over|warning"
echo "rc=${PIPESTATUS[0]}"
kill $PY; wait $PY 2>/dev/null
python3 - "$W/pid_device/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
dev = s.get("gpu_device") or {}
for gpu in dev.get("gpus", []):
    late = (s["duration_ns"] - gpu["span_ns"]) / 1e6
    print(f"GPU {gpu['device']}: device records from about {late:.0f} ms after the attach"
          f" (capture {s['duration_ns'] / 1e6:.0f} ms, device span {gpu['span_ns'] / 1e6:.0f} ms)")
print("clock:", (dev.get("clock") or {}).get("used"), "subscribed with:", dev.get("subscribed_with"))
for k in dev.get("top_kernels", [])[:5]:
    print(f"  {k['count']:6} {k['total_ns'] / 1e6:9.2f} ms  {k['name'][:100]}")
for launch in (s.get("cuda") or {}).get("launches", [])[:4]:
    print(f"{launch['kernel'][:80]}: {launch['count']} launches, from:")
    for site in launch.get("call_sites", [])[:3]:
        print(f"    {site['share'] * 100:5.1f}%  {site['count']:6}  {site['site']}")
for probe in s.get("probes", []):
    if probe.get("count") and any(w in probe["name"] for w in ("ynchronize", "Memcpy")):
        print(f"{probe['name']}: {probe['count']} calls, from:")
        for site in probe.get("call_sites", [])[:3]:
            print(f"    {site['share'] * 100:5.1f}%  {site['count']:6}  {site['site']}")
PY
python3 - "$W/pid_device/trace.json" <<'PY'
import collections, json, sys
events = json.load(open(sys.argv[1]))
events = events.get("traceEvents", events) if isinstance(events, dict) else events
linked = collections.Counter()
for e in events:
    if e.get("cat") == "gpu" and e.get("ph") == "X":
        kind = "memset" if e["name"] == "memset" else "copy" if e["name"].startswith("memcpy") else "kernel"
        linked[kind, "launch_tid" in e.get("args", {})] += 1
for kind, plural in (("kernel", "kernels"), ("copy", "copies"), ("memset", "memsets")):
    print(f"{plural} linked to their call: {linked[kind, True]} of {linked[kind, True] + linked[kind, False]}")
PY

echo "== 5. --pid --cuda --inject, 4 s, on a process started without the variable"
python3 "$LOOP" 0 15 > "$W/loop3.txt" 2>&1 & PY=$!
for _ in $(seq 1 60); do grep -q ready "$W/loop3.txt" && break; sleep 0.5; done
timeout -k 5 60 "$X" --pid $PY --cuda --inject -d 4 -o "$W/inject" 2>&1 | grep -E "inject|error|warning"
echo "rc=${PIPESTATUS[0]}"
grep "^GPU device:" "$W/inject/summary.txt" | cut -c1-200
grep -c "memfd:libxtrace_tool" /proc/$PY/maps | sed 's/^/library mappings after the capture: /'
wait $PY; echo "the loop's own end: rc=$? $(tail -n 1 "$W/loop3.txt")"
exit 0
