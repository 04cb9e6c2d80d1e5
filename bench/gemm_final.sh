#!/usr/bin/env bash
# Issue 13 on the GPU, one device call: the GEMM family's generated tests at the full tier, then its benchmark
# (fresh ceilings, the FP8 probe included) into $OUT/h200 with a cases journal, so a later call can finish or
# extend the run with `harness bench --resume` (RESUME=1 restores the ceilings this call measured from
# $CEILINGS). Each step has its own time limit. Usage: bash bench/gemm_final.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
KERNELS=${KERNELS:-matmul,matmul_fp8,int4_matmul}
mkdir -p "$OUT"
python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/nvidia-smi.txt"
cache=$HOME/.cache/kernel-harness
if [ "${TEST_TIMEOUT:-300}" -gt 0 ]; then
  start=$SECONDS
  timeout "${TEST_TIMEOUT:-300}" python3 -m pytest specs --tier full -q -rfEs -p no:cacheprovider --kernel "$KERNELS" \
    > "$OUT/pytest-full-tier-gemm.log" 2>&1
  echo "full tier: exit $? in $((SECONDS - start)) s" | tee -a "$OUT/pytest-full-tier-gemm.log"
  grep -E "passed|failed|FAILED|ERROR|runs " "$OUT/pytest-full-tier-gemm.log" | tail -25
fi
resume=()
if [ -n "${RESUME:-}" ]; then
  mkdir -p "$cache" && cp "${CEILINGS:?RESUME needs CEILINGS=dir of the first call\'s ceilings}"/ceilings-*.json "$cache/"
  cp -r "${RESUME}" "$OUT/h200" && resume=(--resume)
else
  resume=(--refresh-ceilings)
fi
start=$SECONDS
timeout "${BENCH_TIMEOUT:-250}" python3 -m harness bench --kernel "$KERNELS" "${resume[@]}" --min-time 0.1 --timeout 4 \
  --out "$OUT/h200" > "$OUT/bench.log" 2>&1
echo "bench: exit $? in $((SECONDS - start)) s" | tee -a "$OUT/bench.log"
mkdir -p "$OUT/ceilings" && cp "$cache"/ceilings-*.json "$OUT/ceilings/" 2>/dev/null
wc -l < "$OUT/h200/cases.jsonl" 2>/dev/null | sed 's/^/cases done: /'
tail -30 "$OUT/bench.log"
