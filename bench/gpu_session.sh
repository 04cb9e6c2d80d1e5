#!/usr/bin/env bash
# One device call: install, then one stage. Logs and results go under $OUT (what the device tool brings back).
# Usage (on the GPU machine, repo root): bash bench/gpu_session.sh STAGE [extra args]
#   tests     generated tests of every kernel, full tier (isolated workers), then the harness's own GPU tests
#   tests-new issue 14's kernels at the full tier, the op items of the kernels named, the planted checks
#   report    bench then profile of the kernels named, into one folder (tarred)
#   sanitize  the planted sanitizer tests, then every kernel under memcheck and racecheck
#   timing    bench/gpu_timing_check.py: the engine against Nsight Compute
#   timing-compute  bench/gpu_timing_compute.py: events, graph replay and CUPTI against Nsight Compute for the
#             persistent GEMM, flash attention and int4's split K (two launches a call), SM clock beside each
#   bench     the benchmark report of every kernel (reports/<device>/ layout, tarred)
#   gate      bench/gate_quality.py (A/A, planted slowdowns, calibration), then one real `bench --against HEAD`
#   targets   `harness bench --targets`: only what the specs' [[targets]] compare, into the reports/<device>/ layout
#             (TARGETS_S bounds it, default 300; tarred as targets.tgz)
#   host-int4 one call after a bench: the engine's and the gate's event-pair re-checks and the tripwire on the GPU
#             (tests/test_event_overhead.py, tests/test_gate_ab.py), then gate-host (GATE_HOST_S, default 150), then
#             int4-configs (INT4_PROBE_S, default 300; INT4_CONFIGS default: the launcher's and the preload's);
#             each step's results tarred as it ends
#   gate-host bench/gate_host_quality.py: the gate's verdict on host time per call (A/A, launchers with planted host
#             work, the host_in_process calibration); into gate-host.tgz
#   profile   bench/profile_gpu.sh: Nsight Compute on every kernel's candidate, profile.json and profile.md
#   checks    the generated ci-tier tests of every kernel (stale, stream and graph checks included), then the
#             harness's own tests that need a GPU (the planted clock-fooling launchers among them)
#   clock     a bench of three kernels (the timed calls re-checked), then bench/clock_prs.sh: the gate's A/A run
#             and the two pull requests that fooled the clock (result replay, a side stream)
#   backward  issue 25: the backward items of BWD_KERNELS at the full tier, then BENCH_KERNELS in fwd, bwd and
#             full mode beside Liger and torch.compile (liger-kernel from .whl/, carried)
#   liger     examples/liger on the GPU (liger-kernel from .whl/, carried: ../shared/device/fetch-wheels.sh
#             liger-kernel==0.8.5): its generated tests at the full tier, its benchmark, its sm_90 matrix;
#             commit what comes back under reports/h200-liger/ (LIGER_STEPS, LIGER_K, LIGER_MODES: below)
#   int4      reports/h200/experiments/int4/decode/int4_decode_sweep.py: the decode GEMV (kernels/int4_gemv.py)
#             swept at M = 1 and 4 against bf16, the tile kernel and the floors; then bench/gpu_host_profile.py
#             on int4's launchers
#   launch    tests/test_fastlaunch.py, the plans' tests, matmul_tma's planned calls against its autotuned one
#             (bitwise) and the ci-tier tests of LAUNCH_SPECS, then bench/gpu_launch_paths.py: each
#             launcher's host time with and without kernels/fastlaunch.py, against Triton's JITFunction.run alone
#             and a direct replay of its recorded launches; then bench/gpu_host_profile.py on the planned FA and
#             GELU launchers beside torch's, and bench/gpu_autograd_host.py
#   int4-cuda reports/h200/experiments/int4/cuda/int4_cuda_probe.py: the CUDA decode kernel checked, then swept
#             against bf16 and the Triton launcher, then under Nsight Compute at M = 1 (NCU_SHAPES; the launcher's
#             configuration, or NCU_CONFIG=W,RT,S,D,ST's); then int4_matmul's generated tests at the full tier
#   int4-check  int4_matmul's generated tests at the full tier, then its benchmark (tarred)
#   fa-tma    reports/h200/experiments/flash_attention/fa_config_sweep.py --family tma: flash_attention's TMA route
#             (warp-specialised or not) against the pointer route's sm_90 tile and SDPA's own choice; then the
#             flash_attention benchmark (tarred) and its generated tests at the full tier
#   pending   one call of under ten minutes, in order of worth: the FP8 wgmma kernel's probe (its promoted modes
#             timed, clusters of 2 and 4 CTAs: 10 variants, no Triton), the int4 CUDA kernel's floors at M = 1,
#             LayerNorm's autograd host split (the backward's launcher from a second thread too), then the
#             planned launchers' tests on the GPU; all tarred into pending.tgz
#   followup  after pending: the FP8 kernel (NCU_FP8, probe variants: overlap_s6) and the int4 M = 1
#             kernel under Nsight Compute with the stall sampling per instruction; into followup.tgz
#   int4-bulk int4_cuda_probe.py --quick --with-floors: the bulk ring's configurations checked at every shape, then
#             timed beside the launcher's register path and bf16 at M = 1 and 4, the floors of both; then the ring at
#             1 x 4096 x 4096 under Nsight Compute (BULK_CONFIG=W,RT,S,D,ST, default 8,1,1,1,4); into int4-bulk.tgz
#   read-floor reports/h200/experiments/int4/read_floor.py (the plain read of the decode shapes' weight bytes, an
#             empty launch, bf16 F.linear, the int4 launcher), then the FP8 kernel at 4096^3 and int4 at 1 x 4096 x 4096
#             under Nsight Compute, exported per SASS instruction (--page source --print-source sass --csv)
#   fp8-store the FP8 wgmma kernel's probe (overlap, stream and fast modes: accuracy, then time against _scaled_mm),
#             its full-tier cuda items, then matmul_fp8's bench; INT4_CONFIGS (W,RT,S,D,ST;...), if given, are
#             then checked and timed by int4_cuda_probe.py --configs
#   fp8-bench the planted backward kernels on the GPU (directly, and through the generated items of
#             tests/specs/planted_backward.toml), then matmul_fp8's bench (the cuda backend beside the triton
#             backend and _scaled_mm); into fp8-bench.tgz
#   verify    the norm backwards' plans and trimmed Functions on the GPU: tests/test_backward_kernels.py and
#             tests/test_plans.py, the norms' generated tests, then bench/gpu_autograd_host.py; then matmul_fp8's
#             generated tests at the full tier, its cuda backend among them (into verify.tgz)
#   autograd  bench/gpu_autograd_host.py alone (LayerNorm's host time split inside and outside autograd)
#   norms-fp8 the norms' planned Functions (kernels/norm_autograd.py) on the GPU: their tests, the planted backward
#             items, then bench/gpu_autograd_host.py; the FP8 wgmma kernel's probe (FP8_VARIANTS, default overlap_s6
#             and the multicast pairs and squares); gpu_host_profile.py on the delegating launchers (HOST_CASES);
#             into norms-fp8.tgz
#   int4-configs int4_cuda_probe.py --configs INT4_CONFIGS (W,RT,S,D,ST[,PRE];...): each checked, then timed at INT4_MS
#             (M,...; default 1,4,16) beside the launcher's own, the shipped Triton launcher and bf16; into
#             int4-configs.tgz
#   fp8-pairs matmul_fp8's bench (the pairs of CTAs at 8192^3), bench/gpu_autograd_host.py and LayerNorm's bench
#             in full mode (LN_PROVIDERS) for the planned Function's host time, then matmul_fp8's full-tier cuda
#             cases; each step's results tarred as it ends (FP8_PAIRS_TAIL=0: the first two steps alone)
#   read-pattern reports/h200/experiments/int4/read_pattern.py: a loads-only kernel over int4's packed weight, its
#             segment a row, depth, split of K and occupancy varied, beside the plain read and the decode kernel's
#             loads alone; into read-pattern.tgz
#   gemm      issue 13's probes (reports/h200/experiments/*/*_probe.py: accuracy and speed against cuBLAS),
#             then the GEMM family's generated tests at the full tier
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-build-isolation --no-deps -e . > "$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,utilization.gpu --format=csv \
  | tee "$OUT/nvidia-smi.txt"
# liger-kernel from the carried wheel (../shared/device/fetch-wheels.sh liger-kernel==0.8.5), on PYTHONPATH
liger_site() {
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/liger_kernel-*.whl \
    || { echo "liger: no .whl/liger_kernel-*.whl carried"; exit 1; }
  # pytest-xdist where carried (fetch-wheels.sh pytest-xdist==3.8.0 execnet): LIGER_WORKERS spreads the tests
  ls .whl/pytest_xdist-*.whl .whl/execnet-*.whl > /dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps \
    --no-compile --target /tmp/site .whl/pytest_xdist-*.whl .whl/execnet-*.whl
  export PYTHONPATH=/tmp/site
  python3 -c "import liger_kernel, importlib.metadata as m; print('liger-kernel', m.version('liger-kernel'))" \
    | tee "$OUT/liger-version.txt"
}
# matmul_fp8's harness bench into DIR, its log beside it as DIR.log; FP8_BENCH_S bounds it (default SECONDS: a
# killed bench still writes the cases it finished), FP8_PROVIDERS picks the providers. Usage: fp8_bench DIR SECONDS
fp8_bench() {
  timeout "${FP8_BENCH_S:-$2}" python3 -m harness bench --kernel matmul_fp8 --out "$1" \
    ${FP8_PROVIDERS:+--provider "$FP8_PROVIDERS"} > "$1.log" 2>&1
  echo "matmul_fp8 bench: exit $?"; grep -E "^\| M=" "$1/report.md" | grep cuda | head -9 | cut -c1-200
}
# bench/gate_host_quality.py into $OUT/gate-host, tarred; GATE_HOST_S bounds it (default SECONDS). Usage: gate_host S
gate_host() {
  timeout "${GATE_HOST_S:-$1}" python3 bench/gate_host_quality.py --out "$OUT/gate-host" "${@:2}" 2>&1 \
    | tee "$OUT/gate_host_quality.log" | tail -40
  tar -C "$OUT" -czf "$OUT/gate-host.tgz" gate-host && rm -rf "$OUT/gate-host"
}
# int4_cuda_probe.py --configs CONFIGS timed at INT4_MS, into $OUT/int4-configs, tarred; INT4_PROBE_S bounds it
# (default SECONDS). Usage: int4_configs CONFIGS SECONDS
int4_configs() {
  local R="$OUT/int4-configs"; mkdir -p "$R"
  timeout "${INT4_PROBE_S:-$2}" python3 reports/h200/experiments/int4/cuda/int4_cuda_probe.py \
    --configs "$1" --ms "${INT4_MS:-1,4,16}" --out "$R" > "$R/probe.log" 2>&1
  echo "int4 configs: exit $?"; grep -vE "^ *File |^Traceback|^    " "$R/probe.log" | tail -40 | cut -c1-230
  tar -czf "$OUT/int4-configs.tgz" -C "$OUT" int4-configs && rm -rf "$R"
}
what=$1; shift
case "$what" in
  checks)
    python3 -m harness validate 2>&1 | tail -3 | tee "$OUT/validate.log"
    start=$SECONDS
    timeout 420 python3 -m pytest specs -q -rfEs -p no:cacheprovider "$@" 2>&1 \
      | tee "$OUT/pytest-ci-tier.log" | grep -vE '^[.sF]+( |$)' | tail -30
    echo "ci tier wall: $((SECONDS - start)) s" | tee -a "$OUT/pytest-ci-tier.log"
    timeout 120 python3 -m pytest tests/test_clock_checks.py tests/test_engine.py tests/test_checks.py -q -rfEs \
      -p no:cacheprovider 2>&1 | tee "$OUT/pytest-harness-gpu.log" | tail -8
    ;;
  clock)
    timeout 300 python3 -m harness bench --kernel rmsnorm,softmax,silu_and_mul --out "$OUT/bench" 2>&1 \
      | tee "$OUT/bench.log" | tail -6
    tar -czf "$OUT/bench.tgz" -C "$OUT" bench && rm -rf "$OUT/bench"
    timeout 280 bash bench/clock_prs.sh "$OUT/prs" 2>&1 | tee "$OUT/clock_prs.log"
    tar -czf "$OUT/prs.tgz" -C "$OUT" prs && rm -rf "$OUT/prs"
    ;;
  tests)
    python3 -m harness validate 2>&1 | tee "$OUT/validate.log"
    start=$SECONDS
    timeout 400 python3 -m pytest specs --tier full -q -rfEs -p no:cacheprovider "$@" 2>&1 \
      | tee "$OUT/pytest-full-tier.log" | grep -vE '^[.sF]+( |$)' | tail -30
    echo "full tier wall: $((SECONDS - start)) s" | tee -a "$OUT/pytest-full-tier.log"
    timeout 150 python3 -m pytest tests/test_checks.py tests/test_planted.py tests/test_isolation.py -q -rfEs \
      -p no:cacheprovider 2>&1 | tee "$OUT/pytest-harness-gpu.log" | tail -8
    ;;
  tests-new)
    # Issue 14's kernels at the full tier; every other kernel's opcheck and compile items; the planted checks.
    python3 -m harness validate 2>&1 | tee "$OUT/validate.log"
    start=$SECONDS
    timeout 300 python3 -m pytest specs --tier full -q -rfEs -p no:cacheprovider \
      --kernel layernorm,gelu_tanh,gelu_tanh_and_mul,flash_attention 2>&1 \
      | tee "$OUT/pytest-full-tier-new-kernels.log" | grep -vE '^[.sF]+( |$)' | tail -25
    echo "full tier wall: $((SECONDS - start)) s" | tee -a "$OUT/pytest-full-tier-new-kernels.log"
    timeout 150 python3 -m pytest specs -q -rfEs -p no:cacheprovider -k "opcheck or compile" "$@" 2>&1 \
      | tee "$OUT/pytest-op-items.log" | grep -vE '^[.sF]+( |$)' | tail -15
    timeout 100 python3 -m pytest tests/test_checks_planted.py tests/test_ops.py -q -rfEs -p no:cacheprovider 2>&1 \
      | tee "$OUT/pytest-harness-gpu.log" | tail -8
    ;;
  report)
    # The bench report of every kernel named, then Nsight Compute on each, into one folder (profile.json beside
    # results.json, so report.md carries the profile section), tarred.
    start=$SECONDS
    timeout "${BENCH_S:-300}" python3 -m harness bench --refresh-ceilings --out "$OUT/h200" "$@" 2>&1 | tee "$OUT/bench.log" | tail -20
    echo "bench wall: $((SECONDS - start)) s" | tee -a "$OUT/bench.log"
    OUT="$OUT/prof" PROFILE_TIMEOUT=200 bash bench/profile_gpu.sh --out "$OUT/h200" --timeout 60 "$@" 2>&1 | tail -40
    tar -C "$OUT" -czf "$OUT/h200.tar.gz" h200 && rm -rf "$OUT/h200"
    ;;
  sanitize)
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
    timeout "${BENCH_S:-300}" python3 -m harness bench --refresh-ceilings --out "$OUT/h200" "$@" 2>&1 | tee "$OUT/bench.log"
    echo "bench wall: $((SECONDS - start)) s" | tee -a "$OUT/bench.log"
    tar -C "$OUT" -czf "$OUT/h200.tar.gz" h200 && rm -rf "$OUT/h200"
    ;;
  gate)
    timeout 330 python3 bench/gate_quality.py --out "$OUT/gq" "$@" 2>&1 | tee "$OUT/gate_quality.log" | tail -40
    # A real gate run, as a pull request's CI job would make it: the base is HEAD of a throwaway git
    # repository holding this tree, so this is an A/A run across the worktree boundary.
    if [ ! -d .git ]; then git init -q && git add -A && git -c user.name=kh -c user.email=kh@localhost commit -qm snapshot; fi
    start=$SECONDS
    timeout 240 python3 -m harness bench --against HEAD --out "$OUT/gate-aa" 2>&1 | tee "$OUT/gate-aa.log" | tail -15
    echo "gate run (bench --against HEAD) exit ${PIPESTATUS[0]}, wall: $((SECONDS - start)) s" | tee -a "$OUT/gate-aa.log"
    tar -C "$OUT" -czf "$OUT/gate.tar.gz" gq gate-aa && rm -rf "$OUT/gq" "$OUT/gate-aa"
    ;;
  targets)
    start=$SECONDS
    timeout "${TARGETS_S:-300}" python3 -m harness bench --targets --out "$OUT/targets" "$@" 2>&1 \
      | tee "$OUT/targets.log" | grep -E "^target |^FAILED|^wrote" | cut -c1-220
    echo "targets bench wall: $((SECONDS - start)) s" | tee -a "$OUT/targets.log"
    tar -C "$OUT" -czf "$OUT/targets.tgz" targets && rm -rf "$OUT/targets"
    ;;
  host-int4)
    timeout 90 python3 -m pytest tests/test_event_overhead.py tests/test_gate_ab.py -q -rfEs -p no:cacheprovider \
      > "$OUT/pytest-event-overhead.log" 2>&1
    echo "event-pair and gate tests: exit $?"; tail -3 "$OUT/pytest-event-overhead.log"
    gate_host 150
    int4_configs "${INT4_CONFIGS:-8,1,1,1,0,1;8,1,1,2,0,1;4,1,1,2,0,1;8,1,2,1,0,1;8,1,2,2,0,1;8,2,1,1,0,1}" 300
    ;;
  gate-host)
    gate_host 300 "$@"
    ;;
  profile)
    bash bench/profile_gpu.sh "$@"
    ;;
  backward)
    # Issue 25: the backward items of the kernels with [backward] at the full tier, then their benchmark in every
    # mode (fwd, bwd, full; peak memory), beside Liger's backward and torch.compile's (liger-kernel from .whl/)
    liger_site
    start=$SECONDS
    bwd_kernels=${BWD_KERNELS-rmsnorm,layernorm,silu_and_mul,softmax}  # set and empty: no tests
    if [ -n "$bwd_kernels" ]; then
      timeout "${TEST_TIMEOUT:-240}" python3 -m pytest specs --tier full -q -rfEs -p no:cacheprovider -k bwd \
        --kernel "$bwd_kernels" --junitxml "$OUT/pytest-full-bwd.xml" 2>&1 \
        | tee "$OUT/pytest-full-bwd.log" | grep -vE '^[.sF]+( |$)' | tail -25
      echo "full tier (backward items) wall: $((SECONDS - start)) s" | tee -a "$OUT/pytest-full-bwd.log"
    fi
    start=$SECONDS
    timeout "${BENCH_TIMEOUT:-300}" python3 -m harness bench --kernel "${BENCH_KERNELS:-rmsnorm,layernorm}" \
      --mode fwd,bwd,full --timeout 8 --out "$OUT/bench-bwd" "$@" 2>&1 | tee "$OUT/bench-bwd.log" | tail -12
    echo "bench wall: $((SECONDS - start)) s" | tee -a "$OUT/bench-bwd.log"
    tar -czf "$OUT/bench-bwd.tgz" -C "$OUT" bench-bwd && rm -rf "$OUT/bench-bwd"
    ;;
  liger)
    liger_site
    cd examples/liger || exit 1
    # LIGER_STEPS picks the steps, so that one device call's time limit can hold them: tests bench matrix
    for step in ${LIGER_STEPS:-tests bench matrix}; do
      start=$SECONDS
      case "$step" in
        tests)
          # LIGER_K: a -k expression (bwd: the backward items alone), and the files are named after it
          log="pytest-full${LIGER_K:+-$LIGER_K}"
          timeout "${TEST_TIMEOUT:-300}" python3 -m pytest -q -rxfE -p no:cacheprovider --tier full \
            ${LIGER_K:+-k "$LIGER_K"} ${LIGER_WORKERS:+-n "$LIGER_WORKERS"} --junitxml "$OUT/$log.xml" 2>&1 | tee "$OUT/$log.log" \
            | grep -vE '^[.sxXF]+( |$)' | tail -40
          echo "full tier wall: $((SECONDS - start)) s" | tee -a "$OUT/$log.log" ;;
        bench)
          # LIGER_MODES: the modes to time (bwd,full), the files named after them (bench-bwd-full: the device tool
          # brings back no file whose name has a comma); LIGER_BENCH: more arguments
          bench="bench${LIGER_MODES:+-${LIGER_MODES//,/-}}"
          timeout "${BENCH_TIMEOUT:-240}" python3 -m harness bench ${LIGER_MODES:+--mode "$LIGER_MODES"} \
            ${LIGER_BENCH:-} --out "$OUT/$bench" 2>&1 | tee "$OUT/$bench.log" | tail -30
          echo "bench wall: $((SECONDS - start)) s" | tee -a "$OUT/$bench.log"
          # one archive: the device tool brings back a limited count of files, and the plots come first
          tar -czf "$OUT/$bench.tgz" -C "$OUT" "$bench" && rm -rf "$OUT/${bench:?}" ;;
        matrix)
          timeout 120 python3 -m harness matrix --arch sm_90 --out "$OUT/matrix.json" > "$OUT/matrix.log" 2>&1
          echo "matrix: exit $?, $((SECONDS - start)) s"; tail -3 "$OUT/matrix.log" ;;
        *) echo "liger: no step $step (known: tests bench matrix)" ;;
      esac
    done
    ;;
  fa-tma)
    timeout "${PROBE_TIMEOUT:-300}" python3 reports/h200/experiments/flash_attention/fa_config_sweep.py --family tma \
      --out "$OUT" 2>&1 | tee "$OUT/sweep.log" | grep -v Warning | tail -40
    if [ -n "${FA_BENCH:-}" ]; then
      start=$SECONDS
      timeout 240 python3 -m harness bench --kernel flash_attention --out "$OUT/bench" 2>&1 | tee "$OUT/bench.log" \
        | tail -25
      echo "bench wall: $((SECONDS - start)) s" | tee -a "$OUT/bench.log"
      tar -C "$OUT" -czf "$OUT/bench.tar.gz" bench && rm -rf "$OUT/bench"
      timeout 200 python3 -m pytest specs --kernel flash_attention -q -rfEs -p no:cacheprovider --tier full 2>&1 \
        | tee "$OUT/full-tier.log" | grep -vE '^[.sF]+( |$)' | tail -12
    fi
    ;;
  timing-compute)
    timeout "${PROBE_TIMEOUT:-560}" python3 bench/gpu_timing_compute.py --out "$OUT" "$@" 2>&1 \
      | tee "$OUT/gpu_timing_compute.log" | grep -v Warning | tail -30
    ;;
  int4)
    timeout "${PROBE_TIMEOUT:-560}" python3 reports/h200/experiments/int4/decode/int4_decode_sweep.py --out "$OUT" \
      > "$OUT/int4_decode_sweep.log" 2>&1
    echo "sweep: exit $?"; grep -v '^  top' "$OUT/int4_decode_sweep.log" | cut -c1-900 | tail -25
    grep '^  top' "$OUT/int4_decode_sweep.log" | head -60
    # where the launchers' host time goes (the benchmark's host time says how much)
    timeout 90 python3 bench/gpu_host_profile.py --out "$OUT/host" --calls 200 --only int4-M1,int4-M16,int4_torch-M1 \
      2>&1 | tee "$OUT/host_profile.log" | head -60
    ;;
  launch)
    # kernels/fastlaunch.py on compiled kernels first: its bitwise test, then the ci-tier generated tests of
    # LAUNCH_SPECS (each case's launcher called again and again, so its replays are checked too)
    timeout 120 python3 -m pytest tests/test_fastlaunch.py tests/test_plans.py tests/test_flash_attention_tma.py \
      tests/test_matmul_tma.py::test_a_planned_call_is_bitwise_the_autotuned_one_and_a_new_signature_is_planned_anew \
      -q -rfEs -p no:cacheprovider 2>&1 \
      | tee "$OUT/pytest-fastlaunch.log" | tail -5
    specs=()
    for k in ${LAUNCH_SPECS:-gelu_tanh gelu_tanh_and_mul flash_attention int4_matmul matmul}; do specs+=("specs/$k.toml"); done
    timeout "${TEST_TIMEOUT:-240}" python3 -m pytest "${specs[@]}" -q -rfEs -p no:cacheprovider 2>&1 \
      | tee "$OUT/pytest-launch-specs.log" | grep -vE '^[.sF]+( |$)' | tail -15
    timeout "${LAUNCH_TIMEOUT:-240}" python3 bench/gpu_launch_paths.py --out "$OUT" 2>&1 | tee "$OUT/launch_paths.log"
    # the planned launchers' host time beside torch's equivalent, then LayerNorm's autograd host time split
    timeout 120 python3 bench/gpu_host_profile.py --out "$OUT/host" --calls 200 --only \
      gelu_tanh-64x16384,torch_gelu-64x16384,flash_attention_hopper-causal,sdpa_auto-causal 2>&1 \
      | tee "$OUT/host_profile.log" | head -60
    timeout 90 python3 bench/gpu_autograd_host.py --out "$OUT/autograd" 2>&1 | tee "$OUT/autograd_host.log" | head -40
    ;;
  int4-cuda)
    start=$SECONDS
    timeout "${PROBE_TIMEOUT:-300}" python3 reports/h200/experiments/int4/cuda/int4_cuda_probe.py --out "$OUT" \
      > "$OUT/int4_cuda_probe.log" 2>&1
    echo "probe: exit $?, $((SECONDS - start)) s"; grep -v Warning "$OUT/int4_cuda_probe.log" | cut -c1-600 | tail -45
    # where the M = 1 kernel's time goes: the third call at each decode shape under Nsight Compute, clocks untouched
    for shape in ${NCU_SHAPES:-1,4096,4096 1,4096,14336 1,14336,4096}; do
      timeout 120 ncu --clock-control none --cache-control all --kernel-name regex:int4_gemv_mma --launch-skip 2 \
        --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats --section MemoryWorkloadAnalysis python3 \
        reports/h200/experiments/int4/cuda/int4_cuda_probe.py --call "$shape" ${NCU_CONFIG:+--config "$NCU_CONFIG"} \
        > "$OUT/ncu-int4-cuda-$shape.txt" 2>&1
      echo "ncu $shape: exit $?"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|No Eligible" \
        "$OUT/ncu-int4-cuda-$shape.txt" | head -12
    done
    start=$SECONDS
    timeout "${TEST_TIMEOUT:-150}" python3 -m pytest specs --tier full -q -rfEs -p no:cacheprovider \
      --kernel int4_matmul 2>&1 | tee "$OUT/pytest-full-tier-int4.log" | grep -vE '^[.sF]+( |$)' | tail -20
    echo "full tier wall: $((SECONDS - start)) s" | tee -a "$OUT/pytest-full-tier-int4.log"
    ;;
  int4-check)
    start=$SECONDS
    timeout "${TEST_TIMEOUT:-240}" python3 -m pytest specs --tier full -q -rfEs -p no:cacheprovider \
      --kernel int4_matmul 2>&1 | tee "$OUT/pytest-full-tier-int4.log" | grep -vE '^[.sF]+( |$)' | tail -20
    echo "full tier wall: $((SECONDS - start)) s" | tee -a "$OUT/pytest-full-tier-int4.log"
    start=$SECONDS
    timeout "${BENCH_TIMEOUT:-200}" python3 -m harness bench --kernel int4_matmul --out "$OUT/bench-int4" 2>&1 \
      | tee "$OUT/bench-int4.log" | tail -40
    echo "bench wall: $((SECONDS - start)) s" | tee -a "$OUT/bench-int4.log"
    tar -czf "$OUT/bench-int4.tgz" -C "$OUT" bench-int4 && rm -rf "$OUT/bench-int4"
    ;;
  pending)
    # in order of worth, each step within its own limit (together under ten minutes), all tarred into pending.tgz
    R="$OUT/pending"; mkdir -p "$R"
    start=$SECONDS
    # the FP8 wgmma kernel's promoted modes timed (its first run, on an H100, timed only the fast mode), and for
    # the first time b multicast to a pair of CTAs, then a and b to pairs of a 2 x 2 square (half of b's reads from
    # L2, then half of both: a 128 x 128 tile's fp8 rate asks L2 for 32 KiB a 128-deep block)
    variants=overlap_s6,stream_s6,serial_s6,fast_s6,fast_s6_c2,overlap_s6_c2,stream_s6_c2
    variants+=,fast_s6_c4,overlap_s6_c4,stream_s6_c4
    timeout 200 python3 reports/h200/experiments/fp8/wgmma/wgmma_probe.py --out "$R/fp8" --samples 30 \
      --variants "$variants" --variant-timeout 40 --skip-triton > "$R/fp8_probe.log" 2>&1
    echo "fp8 wgmma probe: exit $?, $((SECONDS - start)) s"; grep -v Warning "$R/fp8_probe.log" | cut -c1-300 | tail -30
    # What bounds the int4 M = 1 kernel: the launcher's configurations checked, timed, and timed with their work
    # per group replaced (the loads alone; the loads and the dequantisation): three builds of the source, most of
    # its time
    start=$SECONDS
    timeout 240 python3 reports/h200/experiments/int4/cuda/int4_cuda_probe.py --floors --out "$R/int4" \
      > "$R/int4_probe.log" 2>&1
    echo "int4 floors probe: exit $?, $((SECONDS - start)) s"; grep -v Warning "$R/int4_probe.log" | cut -c1-300 \
      | tail -20
    # LayerNorm's backward launcher on a second thread, as autograd's device thread runs it
    timeout 50 python3 bench/gpu_autograd_host.py --out "$R/autograd" > "$R/autograd.log" 2>&1
    echo "autograd host: exit $?"; head -16 "$R/autograd.log" | cut -c1-250
    # the planned launchers' tests with their tensors on the GPU (on the H100 they made them on the CPU)
    timeout 80 python3 -m pytest tests/test_plans.py tests/test_flash_attention_tma.py -q -rfEs -p no:cacheprovider \
      > "$R/pytest-plans.log" 2>&1; echo "plans' tests: exit $?"; tail -5 "$R/pytest-plans.log" | cut -c1-250
    tar -czf "$OUT/pending.tgz" -C "$OUT" pending && rm -rf "$R"
    ;;
  verify)
    # the norm backwards' plans and trimmed Functions (ffe986b, 8fa43e3) on the GPU: their tests with tensors on the
    # GPU (tests/test_backward_kernels.py ran there only before it took on_device), the norms' generated tests,
    # then the autograd host split with LayerNorm's ratio to torch's from back-to-back pairs; into verify.tgz
    R="$OUT/verify"; mkdir -p "$R"
    timeout 170 python3 -m pytest tests/test_backward_kernels.py tests/test_plans.py -q -rfE -p no:cacheprovider \
      > "$R/pytest-backward-plans.log" 2>&1
    echo "backward and plans tests: exit $?"; tail -3 "$R/pytest-backward-plans.log"
    timeout 150 python3 -m pytest specs --kernel layernorm,rmsnorm -q -rfE -p no:cacheprovider \
      > "$R/pytest-specs-norms.log" 2>&1; echo "norms' generated tests: exit $?"; tail -3 "$R/pytest-specs-norms.log"
    timeout 150 python3 bench/gpu_autograd_host.py --out "$R/autograd" > "$R/autograd.log" 2>&1
    echo "autograd host: exit $?"; grep -E " (us|x) |pairs" "$R/autograd.log" | cut -c1-250
    # matmul_fp8's cuda backend (the wgmma kernel) through its generated tests, every tier, beside the triton one
    timeout 200 python3 -m pytest specs --kernel matmul_fp8 --tier full -q -rfEs -p no:cacheprovider \
      > "$R/pytest-specs-fp8.log" 2>&1; echo "matmul_fp8's generated tests: exit $?"; tail -4 "$R/pytest-specs-fp8.log"
    tar -czf "$OUT/verify.tgz" -C "$OUT" verify && rm -rf "$R"
    ;;
  autograd)
    # bench/gpu_autograd_host.py alone: where LayerNorm's forward-and-backward host time goes inside autograd
    R="$OUT/autograd"; mkdir -p "$R"
    timeout 150 python3 bench/gpu_autograd_host.py --out "$R" > "$R/autograd.log" 2>&1
    echo "autograd host: exit $?"; grep -E " (us|x) " "$R/autograd.log" | cut -c1-250
    ;;
  followup)
    # after pending: the FP8 kernel's ceiling and the int4 M = 1 kernel under Nsight Compute (clocks untouched);
    # tarred into followup.tgz
    R="$OUT/followup"; mkdir -p "$R"
    # each variant of NCU_FP8 (comma-separated) on its own, with the stall sampling per instruction (SourceCounters):
    # the promoting mode a backend would ship (fast_s6 and fast_s6_c2 ran on 2026-12-07: reports/h100/README.md)
    IFS=, read -ra fp8_variants <<< "${NCU_FP8:-overlap_s6}"
    for v in "${fp8_variants[@]}"; do
      timeout 90 ncu --clock-control none --kernel-name regex:fp8_gemm_kernel --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section LaunchStats --section SourceCounters python3 \
        reports/h200/experiments/fp8/wgmma/wgmma_probe.py --call 8192,8192,8192 --variants "$v" \
        > "$R/ncu-fp8-$v.txt" 2>&1
      echo "ncu fp8 $v: exit $?"
      grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|Registers Per|Stall|No Eligible" \
        "$R/ncu-fp8-$v.txt" | head -14
    done
    timeout 90 ncu --clock-control none --cache-control all --kernel-name regex:int4_gemv_mma --launch-skip 2 \
      --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis --section SourceCounters python3 \
      reports/h200/experiments/int4/cuda/int4_cuda_probe.py --call 1,4096,4096 > "$R/ncu-int4-1,4096,4096.txt" 2>&1
    echo "ncu int4: exit $?"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|No Eligible" \
      "$R/ncu-int4-1,4096,4096.txt" | head -12
    tar -czf "$OUT/followup.tgz" -C "$OUT" followup && rm -rf "$R"
    ;;
  int4-bulk)
    R="$OUT/int4-bulk"; mkdir -p "$R"
    timeout "${BULK_PROBE_S:-400}" python3 reports/h200/experiments/int4/cuda/int4_cuda_probe.py --quick --with-floors \
      --out "$R" > "$R/probe.log" 2>&1
    echo "int4 bulk probe: exit $?"; grep -vE "^ *File |^Traceback|^    " "$R/probe.log" | tail -40 | cut -c1-250
    timeout 90 ncu --clock-control none --cache-control all --kernel-name regex:int4_gemv_mma --launch-skip 2 \
      --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis python3 \
      reports/h200/experiments/int4/cuda/int4_cuda_probe.py --call 1,4096,4096 --config "${BULK_CONFIG:-8,1,1,1,4}" \
      > "$R/ncu-bulk-1,4096,4096.txt" 2>&1
    echo "ncu int4 bulk: exit $?"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|No Eligible|Warp Cycles Per Issued" \
      "$R/ncu-bulk-1,4096,4096.txt" | head -12
    tar -czf "$OUT/int4-bulk.tgz" -C "$OUT" int4-bulk && rm -rf "$R"
    ;;
  read-floor)
    R="$OUT/read-floor"; mkdir -p "$R/source"
    timeout 240 python3 reports/h200/experiments/int4/read_floor.py --out "$R" 2>&1 | tee "$R/read_floor.log" | cut -c1-420
    for k in fp8 int4; do
      if [ "$k" = fp8 ]; then re=fp8_gemm_kernel; cmd=(reports/h200/experiments/fp8/wgmma/wgmma_probe.py --call
        4096,4096,4096 --variants overlap_s6)
      else re=int4_gemv_mma; cmd=(reports/h200/experiments/int4/cuda/int4_cuda_probe.py --call 1,4096,4096); fi
      timeout 100 ncu --clock-control none --kernel-name "regex:$re" --launch-skip 2 --launch-count 1 \
        --section SourceCounters --section WarpStateStats -o "$R/source/$k" python3 "${cmd[@]}" \
        > "$R/source/ncu-$k.log" 2>&1; echo "ncu $k: exit $?"
      timeout 60 ncu --import "$R/source/$k.ncu-rep" --page source --print-source sass --csv \
        > "$R/source/$k-sass.csv" 2> "$R/source/$k-import.err"; echo "ncu $k, per instruction: exit $?"
    done
    ;;
  fp8-store)
    R="$OUT/fp8-store"; mkdir -p "$R"
    timeout 210 python3 reports/h200/experiments/fp8/wgmma/wgmma_probe.py --out "$R" --samples 20 \
      --variants overlap_s6,stream_s6,fast_s6 --skip-triton --variant-timeout 60 > "$R/probe.log" 2>&1
    echo "fp8 probe: exit $?"; tail -22 "$R/probe.log" | cut -c1-250
    timeout 150 python3 -m pytest specs --tier full -q -p no:cacheprovider --kernel matmul_fp8 -k cuda -rfE \
      > "$R/pytest-full-cuda.log" 2>&1; echo "fp8 full tier, cuda items: exit $?"; tail -2 "$R/pytest-full-cuda.log"
    fp8_bench "$R/bench" 140
    if [ -n "${INT4_CONFIGS:-}" ]; then
      timeout 150 python3 reports/h200/experiments/int4/cuda/int4_cuda_probe.py --configs "$INT4_CONFIGS" \
        --out "$R/int4" > "$R/int4-probe.log" 2>&1; echo "int4 configs: exit $?"
      grep -vE "^ *File |^Traceback|^    " "$R/int4-probe.log" | tail -26 | cut -c1-230
    fi
    ;;
  fp8-bench)
    # matmul_fp8's cuda backend in the harness's own bench beside the triton backend and _scaled_mm, after the
    # planted backward kernels on the GPU (test_planted_drops_last_partial now pins its chunks); into fp8-bench.tgz
    R="$OUT/fp8-bench"; mkdir -p "$R"
    timeout 90 python3 -m pytest tests/test_backward_kernels.py tests/test_backward_planted.py -k planted -q -rfE \
      -p no:cacheprovider \
      > "$R/pytest-planted.log" 2>&1; echo "planted backward kernels: exit $?"; tail -2 "$R/pytest-planted.log"
    fp8_bench "$R/bench" 220
    tar -czf "$OUT/fp8-bench.tgz" -C "$OUT" fp8-bench && rm -rf "$R"
    ;;
  norms-fp8)
    R="$OUT/norms-fp8"; mkdir -p "$R"
    timeout 150 python3 -m pytest tests/test_norm_autograd.py tests/test_backward_kernels.py tests/test_plans.py -q -rfE \
      -p no:cacheprovider > "$R/pytest-norms.log" 2>&1; echo "norm Functions, backward kernels, plans: exit $?"
    tail -2 "$R/pytest-norms.log"
    timeout 60 python3 -m pytest tests/test_backward_planted.py -q -rfE -p no:cacheprovider \
      > "$R/pytest-planted.log" 2>&1; echo "planted backward kernels: exit $?"; tail -2 "$R/pytest-planted.log"
    timeout 150 python3 bench/gpu_autograd_host.py --out "$R/autograd" > "$R/autograd.log" 2>&1
    echo "autograd host: exit $?"; grep -E " (us|x) |pairs" "$R/autograd.log" | cut -c1-200
    timeout 240 python3 reports/h200/experiments/fp8/wgmma/wgmma_probe.py --out "$R/fp8" --samples 20 \
      --variants "${FP8_VARIANTS:-overlap_s6,overlap_s6_c2,fast_s6_c2,overlap_s6_c4}" --skip-triton \
      --variant-timeout 60 > "$R/fp8-probe.log" 2>&1
    echo "fp8 probe: exit $?"; tail -24 "$R/fp8-probe.log" | cut -c1-250
    timeout 90 python3 bench/gpu_host_profile.py --out "$R/host" --calls 200 \
      --only "${HOST_CASES:-matmul_fp8_cuda-M1,matmul_fp8-M1,scaled_mm-M1,int4_cuda-M32,int4-M32}" \
      > "$R/host-profile.log" 2>&1; echo "host profile: exit $?"; grep -E "us/call|ERROR" "$R/host-profile.log" | head -12
    tar -czf "$OUT/norms-fp8.tgz" -C "$OUT" norms-fp8 && rm -rf "$R"
    ;;
  int4-configs)
    int4_configs "${INT4_CONFIGS:?INT4_CONFIGS=W,RT,S,D,ST[,PRE];...}" 300
    ;;
  fp8-pairs)
    # each step tarred as it ends, so a call stopped by its time limit still brings back what finished
    R="$OUT/fp8-pairs"; mkdir -p "$R"
    fp8_bench "$R/bench-fp8" 150
    tar -czf "$OUT/fp8-bench.tgz" -C "$R" bench-fp8 bench-fp8.log && rm -rf "$R/bench-fp8"
    timeout 100 python3 bench/gpu_autograd_host.py --out "$R/autograd" > "$R/autograd.log" 2>&1
    echo "autograd host: exit $?"; grep -E " x |pairs|ours-torch" "$R/autograd.log" | cut -c1-200
    tar -czf "$OUT/autograd.tgz" -C "$R" autograd autograd.log && rm -rf "$R/autograd"
    [ "${FP8_PAIRS_TAIL:-1}" = 1 ] || exit 0  # FP8_PAIRS_TAIL=0: the first two steps alone
    timeout "${LN_BENCH_S:-100}" python3 -m harness bench --kernel layernorm --mode full \
      --provider "${LN_PROVIDERS:-triton,torch_layer_norm}" --out "$R/bench-layernorm" > "$R/bench-layernorm.log" 2>&1
    echo "layernorm bench (full): exit $?"; tail -3 "$R/bench-layernorm.log" | cut -c1-200
    tar -czf "$OUT/ln-bench.tgz" -C "$R" bench-layernorm bench-layernorm.log && rm -rf "$R/bench-layernorm"
    timeout 150 python3 -m pytest specs --tier full -q -p no:cacheprovider --kernel matmul_fp8 -k "cuda and full" -rfE \
      > "$R/pytest-full-cuda.log" 2>&1; echo "fp8 full tier, cuda items: exit $?"; tail -2 "$R/pytest-full-cuda.log"
    ;;
  read-pattern)
    R="$OUT/read-pattern"; mkdir -p "$R"
    timeout "${READ_PATTERN_S:-240}" python3 reports/h200/experiments/int4/read_pattern.py --out "$R" > "$R/probe.log" 2>&1
    echo "read pattern: exit $?"; grep -vE "^ *File |^Traceback|^    " "$R/probe.log" | tail -40 | cut -c1-230
    tar -czf "$OUT/read-pattern.tgz" -C "$OUT" read-pattern && rm -rf "$R"
    ;;
  gemm)
    # GEMM_PROBES / GEMM_KERNELS choose what runs; each step has its own time limit so one cannot starve the rest.
    # Each probe lives beside the report of the run it produced, under reports/h200/experiments/.
    declare -A probes=([matmul_mma_probe]=reports/h200/experiments/matmul_cuda/matmul_mma_probe.py
                       [fp8_probe]=reports/h200/experiments/fp8/fp8_probe.py
                       [int4_probe]=reports/h200/experiments/int4/int4_probe.py)
    for probe in ${GEMM_PROBES:-matmul_mma_probe fp8_probe int4_probe}; do
      script=${probes[$probe]:-}
      if [ -z "$script" ]; then echo "== $probe: no such probe (known: ${!probes[*]})"; continue; fi
      start=$SECONDS
      # PROBE_ARGS: extra arguments for every probe run (fp8_probe's --promote 128,256, say)
      timeout "${PROBE_TIMEOUT:-120}" python3 "$script" --out "$OUT/probes" ${PROBE_ARGS:-} > "$OUT/$probe.log" 2>&1
      echo "== $probe: exit $?, $((SECONDS - start)) s"; tail -n "${PROBE_TAIL:-30}" "$OUT/$probe.log"
    done
    if [ -n "${GEMM_KERNELS:-}" ]; then
      start=$SECONDS
      timeout "${TEST_TIMEOUT:-240}" python3 -m pytest specs --tier full -q -rfEs -p no:cacheprovider \
        --kernel "$GEMM_KERNELS" "$@" 2>&1 | tee "$OUT/pytest-full-tier-gemm.log" | grep -vE '^[.sF]+( |$)' | tail -40
      echo "full tier wall: $((SECONDS - start)) s" | tee -a "$OUT/pytest-full-tier-gemm.log"
    fi
    ;;
esac
