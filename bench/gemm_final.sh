#!/usr/bin/env bash
# Issue 13 on the GPU, one device call: the GEMM family's generated tests at the full tier, then its benchmark
# with fresh ceilings (the FP8 probe included) into $OUT/h200, tarred: the device tool brings back at most 8
# files, and a report folder holds more. Each step has its own time limit; pytest is stopped with SIGABRT so
# its faulthandler prints where it was. Usage: bash bench/gemm_final.sh   (KERNELS=..., TEST_TIMEOUT=0 skips tests)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
KERNELS=${KERNELS:-matmul,matmul_fp8,int4_matmul}
mkdir -p "$OUT"
python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/nvidia-smi.txt"
if [ "${TEST_TIMEOUT:-390}" -gt 0 ]; then
  start=$SECONDS
  timeout -s ABRT "${TEST_TIMEOUT:-390}" python3 -m pytest specs --tier full -q -rfEs -p no:cacheprovider \
    --kernel "$KERNELS" > "$OUT/pytest-full-tier-gemm.log" 2>&1
  echo "full tier: exit $? in $((SECONDS - start)) s" | tee -a "$OUT/pytest-full-tier-gemm.log"
  grep -E "passed|failed|FAILED|ERROR|runs " "$OUT/pytest-full-tier-gemm.log" | tail -25
fi
start=$SECONDS
timeout "${BENCH_TIMEOUT:-250}" python3 -m harness bench --kernel "$KERNELS" --refresh-ceilings --min-time 0.3 \
  --out "$OUT/h200" > "$OUT/bench.log" 2>&1
echo "bench: exit $? in $((SECONDS - start)) s" | tee -a "$OUT/bench.log"
grep -E "^ceilings: (matmul|done)" "$OUT/bench.log"
tail -5 "$OUT/bench.log"
tar -C "$OUT" -czf "$OUT/h200.tar.gz" h200 && rm -rf "$OUT/h200"
