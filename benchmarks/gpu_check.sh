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
# 3. every example run with --gpu-backend cupy, as a user would (its GPUs folded
#    onto the machine's as virtual GPUs where it has fewer: benchmarks/fold_gpus.py);
# 4. B4 (towers on 1 and 2 real GPUs) and B6 (polyfit, 200 steps) on cupy, in both process layouts.
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
# a python without ensurepip (a distribution's, under a framework's venv) makes
# its venv without pip; the machine's own pip then installs into it
PIP=("$VENV/bin/python" -m pip)
if ! "$PY" -m venv --system-site-packages "$VENV" 2>/dev/null; then
    rm -rf "$VENV"; "$PY" -m venv --system-site-packages --without-pip "$VENV" || exit 2
    PIP=("$PY" -m pip --python "$VENV/bin/python")
fi
# The machine's python3 may itself be a venv (a framework image's): then
# --system-site-packages reaches the base interpreter's packages, not the ones
# beside that python's CuPy. A .pth adds that python's own site dirs, after
# the venv's, with their .pth files processed.
"$PY" -c 'import site; print("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in site.getsitepackages()))' \
    > "$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gpu-host.pth" || exit 2
"$VENV/bin/python" -c 'import cupy' || { echo "gpu-check: the venv does not see $PY's CuPy"; exit 2; }
"$VENV/bin/python" - "$WHEELHOUSE" build/gpu-check/requirements.txt <<'PYEOF'
import re, sys
from pathlib import Path
# keep the pins whose wheels the wheelhouse holds: it leaves out NumPy (the
# machine's CuPy comes with the NumPy it was built against) and the linters
house = Path(sys.argv[1])
held = {re.sub(r"[-_.]+", "-", w.name.split("-")[0]).lower() for w in house.glob("*.whl")}
blocks = re.split(r"\n(?=\S)", (house / "requirements.txt").read_text())
def name(block: str) -> str:
    return re.sub(r"[-_.]+", "-", block.split("==")[0]).lower()
kept = [b for b in blocks if b.startswith("#") or name(b) in held]
Path(sys.argv[2]).write_text("\n".join(kept) + "\n")
print(f"{sum(not b.startswith('#') for b in kept)} pinned wheels to install")
PYEOF
"${PIP[@]}" install --quiet --no-index --find-links "$WHEELHOUSE" --require-hashes \
    -r build/gpu-check/requirements.txt || exit 2
"${PIP[@]}" install --quiet --no-index --no-deps --no-build-isolation -e . || exit 2
BIN="$VENV/bin"

step "gpu-marked tests"
check "$BIN/python" -m pytest -m gpu -v -p no:cacheprovider --timeout 90 tests/test_gpu.py

step "every example on the cupy backend"
# examples asking for more GPUs than this machine has run folded onto its GPUs as virtual GPUs
VISIBLE=$("$BIN/python" -c 'from orchestrator.runtime.backends import cuda_device_count; print(cuda_device_count())')
[ "${VISIBLE:-0}" -ge 1 ] 2>/dev/null || VISIBLE=1  # none: the runs below say so, one by one
rm -rf build/gpu-check/examples
"$BIN/python" benchmarks/fold_gpus.py examples build/gpu-check/examples "$VISIBLE"
for example in build/gpu-check/examples/*.yaml; do
    name=$(basename "$example" .yaml)
    echo "--- $example"
    # a run that hangs is a failure with its one line (Ctrl-C's), not the end of the check
    timeout -s INT 90 "$BIN/orchestrate" run "$example" --gpu-backend cupy --output-dir "$PWD/build/gpu-check/$name" \
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

step "B6: polyfit on real GPUs, one process for them all (as written: processes: host) and a process per GPU"
check "$BIN/python" benchmarks/bench_polyfit.py --quick --sides orchestrate,orchestrate-device,numpy \
    --orchestrate-args="--gpu-backend cupy" \
    --spec build/gpu-check/examples/polyfit.yaml

step "done: $failed step(s) failed; log in $LOG"
exit "$failed"
