#!/usr/bin/env bash
# make gpu-check: the checks that need a real CUDA GPU, on a machine with CuPy and
# no network, from the wheels of `make wheelhouse PY=<that machine's Python>`.
#
#   bash benchmarks/gpu_check.sh [PYTHON] [WHEELHOUSE] [LOG]
#
# 1. a venv that sees the machine's own CuPy (--system-site-packages), with
#    the locked wheels installed from the wheelhouse (hash-checked, no index)
#    and this checkout installed editable;
# 2. the gpu-marked tests (tests/test_gpu.py: every example on the cupy
#    backend against NumPy, memory caps, the backend chosen by auto);
# 3. every example run with --gpu-backend cupy, as a user would;
# 4. B4 (towers on 1 and 2 real GPUs) and B6 (polyfit, 200 steps) on cupy.
# Everything goes to one log; the exit code is the number of failed steps.
set -uo pipefail
PY=${1:-python3}
WHEELHOUSE=${2:-build/wheelhouse}
LOG=${3:-build/gpu-check.log}
VENV=build/gpu-venv
cd "$(dirname "$0")/.."
mkdir -p "$(dirname "$LOG")" build/gpu-check
exec > >(tee "$LOG") 2>&1
failed=0
step() { echo; echo "=== $* ==="; }
check() { "$@"; local rc=$?; [ $rc -eq 0 ] || { echo "--- FAILED ($rc): $*"; failed=$((failed + 1)); }; return 0; }

step "machine"
date -u
nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version --format=csv 2>&1 || echo "(no nvidia-smi)"
"$PY" -c 'import sys, cupy; print("python", sys.version.split()[0], "cupy", cupy.__version__, "GPUs", cupy.cuda.runtime.getDeviceCount())' \
    || { echo "gpu-check: CuPy with a CUDA GPU is needed here"; exit 2; }

step "install from $WHEELHOUSE (offline)"
[ -f "$WHEELHOUSE/requirements.txt" ] || { echo "gpu-check: no $WHEELHOUSE/requirements.txt: run 'make wheelhouse PY=<this Python>' where the network is"; exit 2; }
rm -rf "$VENV"
"$PY" -m venv --system-site-packages "$VENV" || exit 2
# the wheelhouse's numpy would shadow the one the machine's CuPy was built against: keep the machine's
"$VENV/bin/python" - "$WHEELHOUSE/requirements.txt" build/gpu-check/requirements.txt <<'PYEOF'
import re, sys
# drop numpy and its hash lines: the machine's CuPy comes with the NumPy it was built against
text = open(sys.argv[1]).read()
blocks = re.split(r"\n(?=\S)", text)
open(sys.argv[2], "w").write("\n".join(b for b in blocks if not b.lower().startswith("numpy==")) + "\n")
PYEOF
"$VENV/bin/python" -m pip install --quiet --no-index --find-links "$WHEELHOUSE" --require-hashes \
    -r build/gpu-check/requirements.txt || exit 2
"$VENV/bin/python" -m pip install --quiet --no-index --no-deps --no-build-isolation -e . || exit 2
BIN="$VENV/bin"

step "gpu-marked tests"
check "$BIN/python" -m pytest -m gpu -v -p no:cacheprovider tests/test_gpu.py

step "every example on the cupy backend"
for example in examples/*.yaml; do
    name=$(basename "$example" .yaml)
    echo "--- $example"
    "$BIN/orchestrate" run "$example" --gpu-backend cupy --output-dir "build/gpu-check/$name" \
        --report "build/gpu-check/$name-run.json" --no-cache > "build/gpu-check/$name.out" 2>&1
    rc=$?
    cat "build/gpu-check/$name.out"
    if [ $rc -ne 0 ] && grep -q "CUDA GPU(s); .* visible" "build/gpu-check/$name.out"; then
        echo "--- skipped: this machine has fewer GPUs than $example uses"
    elif [ $rc -ne 0 ]; then
        echo "--- FAILED ($rc): $example"; failed=$((failed + 1))
    fi
done

step "B4: towers on real GPUs"
check "$BIN/python" benchmarks/bench_scaling.py --quick --gpu-backend cupy

step "B6: polyfit on real GPUs"
check "$BIN/python" benchmarks/bench_polyfit.py --quick --sides orchestrate,numpy --orchestrate-args="--gpu-backend cupy"

step "done: $failed step(s) failed; log in $LOG"
exit "$failed"
