#!/usr/bin/env bash
# Nsight Compute profile of every kernel's candidate at its headline bench case, on the GPU machine.
# Usage (repo root): bash bench/profile_gpu.sh [harness profile args, e.g. --kernel rope]
# Writes under $OUT: profile/profile.json, profile/profile.md (the report section), profile/<kernel>.ncu-rep,
# profile/ncu-<kernel>.log, and profile.log; on a failure every ncu log is printed whole.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
if ! command -v ncu > /dev/null; then  # NVIDIA's standalone installer does not put ncu on PATH
  newest=$(ls -d /opt/nvidia/nsight-compute/*/ 2>/dev/null | sort -V | tail -1)
  [ -n "$newest" ] && export PATH="$newest:$PATH"
fi
{ command -v ncu && ncu --version; } 2>&1 | tee "$OUT/ncu-version.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,utilization.gpu --format=csv \
  | tee "$OUT/nvidia-smi.txt"
start=$SECONDS
timeout "${PROFILE_TIMEOUT:-560}" python3 -m harness profile --out "$OUT/profile" --timeout 150 "$@" 2>&1 | tee "$OUT/profile.log"
rc=${PIPESTATUS[0]}
echo "profile exit $rc, wall $((SECONDS - start)) s" | tee -a "$OUT/profile.log"
if [ "$rc" -ne 0 ]; then
  for log in "$OUT"/profile/ncu-*.log; do
    [ -f "$log" ] && { echo "=== $log (ncu's raw output)"; cat "$log"; }
  done
fi
# The clocks were left alone: they should read as before the run.
nvidia-smi --query-gpu=clocks.sm,clocks.max.sm --format=csv | tee -a "$OUT/nvidia-smi.txt"
exit "$rc"
