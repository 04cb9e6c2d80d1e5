#!/usr/bin/env bash
# One device call: install, validate, run the generated tests (all tiers) and the timing check.
# Usage (on the GPU machine, repo root): bash bench/gpu_session.sh tests|timing|bench [extra args]
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$OUT/nvidia-smi.txt"
what=$1; shift
case "$what" in
  tests)
    python3 -m harness validate 2>&1 | tee "$OUT/validate.log"
    timeout 420 python3 -m pytest --tier full -q -rfE -p no:cacheprovider --junitxml="$OUT/junit.xml" "$@" 2>&1 \
      | tee "$OUT/pytest.log" | grep -vE '^\.+|^s+' | tail -60
    ;;
  final)
    # Generated tests, all tiers (isolated workers on a GPU), then every kernel under compute-sanitizer.
    timeout 200 python3 -m pytest specs tests/test_isolation.py tests/test_planted.py --tier full -q -rfE \
      -p no:cacheprovider "$@" 2>&1 \
      | tee "$OUT/pytest.log" | grep -vE '^\.+|^s+' | tail -25
    timeout 230 python3 -m harness sanitize --tool memcheck --timeout 44 2>&1 | tee "$OUT/sanitize.log"
    timeout 50 python3 -m harness sanitize --kernel softmax --tool racecheck --timeout 45 2>&1 | tee -a "$OUT/sanitize.log"
    ;;
  racecheck)
    # The kernels that use shared memory (reductions across warps; the CUDA backend's block reduction).
    timeout 400 python3 -m harness sanitize --tool racecheck --kernel rmsnorm,fused_add_rmsnorm,softmax \
      --timeout 120 2>&1 | tee "$OUT/racecheck.log"
    ;;
  timing)
    timeout 300 python3 bench/gpu_timing_check.py --out "$OUT/gpu_timing_check.json" "$@" 2>&1 | tee "$OUT/timing.log"
    ;;
  bench)
    start=$SECONDS
    timeout 540 python3 -m harness bench --out "$OUT/h200" "$@" 2>&1 | tee "$OUT/bench.log"
    echo "bench wall: $((SECONDS - start)) s" | tee -a "$OUT/bench.log"
    tar -C "$OUT" -czf "$OUT/h200.tar.gz" h200 && rm -rf "$OUT/h200"
    ;;
esac
