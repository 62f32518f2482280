#!/usr/bin/env bash
# One device call, several named steps:  bash benchmarks/gpu_steps.sh "name:command" ["name:command" ...]
# Each step's output goes to <name>.log (its tail is printed); every step gets what is left of BUDGET_S
# (default 570 s, inside the device call's 600 s) and later steps are skipped when under 20 s remain.
# $RESULTS is a folder steps may write to; tuned/, runs/ and benchmarks/results/ are copied at the end, and
# everything lands in $OUT/session.tar.gz (the device tool brings back few files).
set -uo pipefail
OUT=${OUT:-out}
LOGS=$(mktemp -d)
export RESULTS=$LOGS/results
mkdir -p "$OUT" "$RESULTS"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv
  python3 -c "import cupy, optuna; from cupy.cuda import nvrtc; print('cupy', cupy.__version__, 'nvrtc', nvrtc.getVersion(), 'optuna', optuna.__version__)"
  date -u; } > "$LOGS/env.txt" 2>&1
deadline=${BUDGET_S:-570}
for step in "$@"; do
  name=${step%%:*}
  cmd=${step#*:}
  left=$((deadline - SECONDS))
  if ((left < 20)); then echo "=== $name skipped: ${left}s left"; continue; fi
  echo "=== $name $(date -u +%T) (${left}s left)"
  timeout "$left" bash -c "$cmd" > "$LOGS/$name.log" 2>&1
  echo "rc=$?" >> "$LOGS/$name.log"
  tail -n "${TAIL:-6}" "$LOGS/$name.log" | cut -c1-300
done
[[ -d tuned ]] && cp -r tuned "$LOGS/"
[[ -d runs ]] && cp -r runs "$LOGS/"
# Scripts that write into the tree (tuned_vs_vendor.py's default --out) would otherwise leave it on the device.
[[ -d benchmarks/results ]] && cp -r benchmarks/results "$LOGS/bench_results"
tar -czf "$OUT/session.tar.gz" -C "$LOGS" .
