#!/usr/bin/env bash
# One call on the H200 test host: GPU-tier tests, then the real tuning run of configs/gemm.yaml.
# Usage (device tool, carry .whl): bash benchmarks/gpu_session.sh
# Writes logs, the tuned/ file and the study journal under $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
  python3 -c "import cupy, optuna; from cupy.cuda import nvrtc; print('cupy', cupy.__version__, 'nvrtc', nvrtc.getVersion(), 'optuna', optuna.__version__)"
  date -u; } 2>&1 | tee "$OUT/env.txt"
if [[ ${SKIP_TESTS:-0} != 1 ]]; then
  python3 -m pytest -m gpu -q -x -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -n 15
fi
if [[ ${SKIP_RUN:-0} != 1 ]]; then
  python3 -m autotune run configs/gemm.yaml ${RUN_ARGS:-} 2>&1 | tee "$OUT/run.log" | grep -v '^\[' 
  cp -r tuned "$OUT/" 2>/dev/null; cp runs/gemm/*.journal "$OUT/" 2>/dev/null
fi
if [[ ${SKIP_RETIME:-0} != 1 ]]; then
  python3 benchmarks/tuned_vs_vendor.py 2>&1 | tee "$OUT/retime.log"
  cp benchmarks/results/* "$OUT/" 2>/dev/null
fi
if [[ -n ${EXTRA:-} ]]; then bash -c "$EXTRA" 2>&1 | tee "$OUT/extra.log"; fi
true
