#!/bin/bash
# The GPU check of the CUDA tracing (not run by CI, which has no GPU): real PyTorch under xtrace,
# launched (--cuda --nvtx), untraced and traced for timing, then by pid with no flags.
#   tests/gpu/check.sh XTRACE OUTDIR
# XTRACE is a release build of xtrace (libxtrace_tool.so beside it for --nvtx); needs root, an
# NVIDIA GPU and a python3 with torch. Prints what each run saw; outputs stay in OUTDIR.
set -u
X=${1:?usage: check.sh XTRACE OUTDIR}; W=${2:?usage: check.sh XTRACE OUTDIR}
LOOP=$(dirname "$0")/torch_loop.py
mkdir -p "$W"; export PYTHONUNBUFFERED=1
uname -r; nvidia-smi -L
python3 -c 'import torch,sys;print(sys.version.split()[0],torch.__version__,torch.version.cuda)'
echo "== launched, --cuda --nvtx, 200 steps"
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
exit 0
