#!/usr/bin/env bash
# One device call: install, validate, run the generated tests (all tiers) and the timing check.
# Usage (on the GPU machine, repo root): bash bench/gpu_session.sh tests|final|sanitize|timing|bench [extra args]
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
    # Generated tests, all tiers (isolated workers on a GPU), the planted faults and the sanitizer tests.
    timeout 420 python3 -m pytest specs tests/test_isolation.py tests/test_planted.py tests/test_sanitize.py \
      --tier full -q -rfEs -p no:cacheprovider "$@" 2>&1 \
      | tee "$OUT/pytest.log" | grep -vE '^\.+|^s+' | tail -25
    ;;
  sanitize)
    # The planted overread / race must be found (and the good kernel not), then every kernel under memcheck
    # and racecheck; full sanitizer output per kernel and tool in sanitizer-logs.tar.gz.
    timeout 200 python3 -m pytest tests/test_sanitize.py -q -rs -s -p no:cacheprovider 2>&1 | tee "$OUT/test_sanitize.log" | tail -30
    timeout 330 python3 -m harness sanitize --tool memcheck,racecheck --timeout 120 --log-dir "$OUT/sanitizer-logs" \
      "$@" 2>&1 | tee "$OUT/sanitize.log"
    tar -C "$OUT" -czf "$OUT/sanitizer-logs.tar.gz" sanitizer-logs && rm -rf "$OUT/sanitizer-logs"
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
