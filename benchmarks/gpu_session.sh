#!/usr/bin/env bash
# One call on the H200 test host (device tool, carry .whl): every GPU number of the project, in order
#   1. the GPU test tier                      -> gpu_tests.log
#   2. autotune run configs/gemm.yaml         -> run.log, tuned/<gpu-key>/gemm.json (fresh: the old file is moved away)
#   3. benchmarks/tuned_vs_vendor.py          -> results/gemm_<gpu-key>.{json,csv}
#   4. autotune ladder 4096x4096x4096         -> results/ladder_float32_4096x4096x4096.{csv,md}
#   5. benchmarks/runtime_overhead.py         -> results/runtime_overhead.json
#   6. benchmarks/throughput_vs_kernel_tuner.py (KT_SECONDS, default 45) -> results/throughput_vs_kernel_tuner.*
# Everything lands in $OUT/session.tar.gz (the device tool brings back few files); SKIP_<STEP>=1 skips one.
set -uo pipefail
OUT=${OUT:-out}
LOGS=$(mktemp -d)
mkdir -p "$OUT" "$LOGS/results"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
  python3 -c "import cupy, optuna; from cupy.cuda import nvrtc; print('cupy', cupy.__version__, 'nvrtc', nvrtc.getVersion(), 'optuna', optuna.__version__)"
  date -u; } 2>&1 | tee "$LOGS/env.txt"
step() { echo "=== $1 $(date -u +%T)"; }
if [[ ${SKIP_TESTS:-0} != 1 ]]; then
  step tests; python3 -m pytest -m gpu -q -p no:cacheprovider 2>&1 | tee "$LOGS/gpu_tests.log" | tail -n 6
fi
if [[ ${SKIP_RUN:-0} != 1 ]]; then
  step run
  key=$(python3 -c "from autotune.device import current_gpu; print(current_gpu().key)")
  [[ -f tuned/$key/gemm.json ]] && mv "tuned/$key/gemm.json" "$LOGS/previous_gemm.json"
  python3 -m autotune run configs/gemm.yaml 2>&1 | tee "$LOGS/run.log" | grep -v '^\[.*trials .*s  [^;]*$'
  mkdir -p "$LOGS/tuned/$key"; cp "tuned/$key/gemm.json" "$LOGS/tuned/$key/" 2>/dev/null
  cp runs/gemm/*.journal "$LOGS/" 2>/dev/null
fi
if [[ ${SKIP_RETIME:-0} != 1 ]]; then
  step retime; python3 benchmarks/tuned_vs_vendor.py --out "$LOGS/results" 2>&1 | tee "$LOGS/retime.log"
fi
if [[ ${SKIP_LADDER:-0} != 1 ]]; then
  step ladder; python3 -m autotune ladder 4096x4096x4096 --out "$LOGS/results" 2>&1 | tee "$LOGS/ladder.log"
fi
if [[ ${SKIP_RUNTIME:-0} != 1 ]]; then
  step runtime; python3 benchmarks/runtime_overhead.py --out "$LOGS/results" 2>&1 | tee "$LOGS/runtime.log"
fi
if [[ ${SKIP_KT:-0} != 1 ]]; then
  step kernel-tuner
  left=$(( ${BUDGET_S:-585} - SECONDS ))  # finish inside the device call's limit so the logs come back
  timeout "$left" python3 benchmarks/throughput_vs_kernel_tuner.py --seconds "${KT_SECONDS:-45}" --out "$LOGS/results" \
    2>&1 | tee "$LOGS/kt.log" | grep -v '^\[' | tail -n 8
fi
step done
tar -czf "$OUT/session.tar.gz" -C "$LOGS" .
