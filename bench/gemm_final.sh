#!/usr/bin/env bash
# Issue 13's last device call: the GEMM family's generated tests at the full tier, then its benchmark report
# (fresh ceilings, the FP8 probe included), each with its own time limit. Usage: bash bench/gemm_final.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
KERNELS=${KERNELS:-matmul,matmul_fp8,int4_matmul}
mkdir -p "$OUT"
python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > "$OUT/nvidia-smi.txt"
start=$SECONDS
timeout "${TEST_TIMEOUT:-160}" python3 -m pytest specs --tier full -q -rfEs -p no:cacheprovider --kernel "$KERNELS" \
  > "$OUT/pytest-full-tier-gemm.log" 2>&1
echo "full tier: exit $? in $((SECONDS - start)) s" | tee -a "$OUT/pytest-full-tier-gemm.log"
grep -E "passed|failed|FAILED|ERROR" "$OUT/pytest-full-tier-gemm.log" | tail -25
start=$SECONDS
timeout "${BENCH_TIMEOUT:-200}" python3 -m harness bench --kernel "$KERNELS" --provider "${PROVIDERS:-triton,cuda,torch}" \
  --refresh-ceilings --min-time 0.1 --timeout 4 --out "$OUT/h200-gemm" > "$OUT/bench.log" 2>&1
echo "bench: exit $? in $((SECONDS - start)) s" | tee -a "$OUT/bench.log"
tail -25 "$OUT/bench.log"
