#!/usr/bin/env python3
"""The timing check for compute-bound and multi-launch kernels: events, CUDA-graph replay and CUPTI against
Nsight Compute, with the SM clock beside every figure.

bench/gpu_timing_check.py checks the engine on one memory-bound kernel. The kernels that fool a clock differently
are the compute-bound ones (a persistent GEMM runs as long as its slowest SM, and its clock is what the power
cap leaves it) and those that launch more than one kernel a call (a split-K GEMM and its reduction): events see
the whole call, launch gaps included, while Nsight Compute times each kernel alone. Each case is built by the
harness itself, from its spec, as the benchmark builds it:

- the persistent TMA GEMM (matmul ``triton_tma``) and cuBLAS (``torch``) at 4096^3, bf16;
- flash_attention (``triton``) and SDPA's own choice (``sdpa_auto``) at the causal headline, bf16;
- int4_matmul (``triton``) and its ``torch`` peer at M = 1, 4096 x 4096: split K, two launches a call in the
  committed run (reports/h200/timing-compute/); one since the split is summed in the same launch (the decode
  GEMV, kernels/int4_gemv.py);
- decode shapes, where graph replay and events may part: rmsnorm at 64 x 4096 (and torch.compile's), matmul at
  M = 16 (the TMA backend's launcher and cuBLAS), flash_attention's decode (and SDPA's).

Per case: the engine's median with ``events``, ``graph`` and ``cupti`` (L2 flushed, the median SM clock of the
kept samples from NVML); then ``ncu --clock-control none --cache-control all`` on the same calls (this script
re-runs itself as the profiled program, the timed calls inside an NVTX range), the kernels of each call summed,
and ncu's own SM clock (``sm__cycles_elapsed.avg.per_second``) for the same kernels.

Usage: python3 bench/gpu_timing_compute.py --out DIR [--only LABEL,...] [--skip-ncu]
Writes DIR/gpu_timing_compute.json and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gpu_timing_check import _clean, _fmt, find_ncu, parse_ncu_csv  # noqa: E402

NCU_WARMUP, NCU_CALLS = 3, 8
NVTX_RANGE = "kh_timed"
CLOCK_METRIC = "sm__cycles_elapsed.avg.per_second"
TIME_METRIC = "gpu__time_duration.sum"
METHODS = ("events", "graph", "cupti")
BUDGET_S = 520.0


@dataclass(frozen=True)
class CheckCase:
    label: str
    spec: str
    provider: str
    case_id: str
    dtype: str = "bf16"


CASES = (
    CheckCase("matmul_tma-4096^3", "specs/matmul.toml", "triton_tma", "M=4096,N=4096,K=4096,epilogue=0"),
    CheckCase("cublas-4096^3", "specs/matmul.toml", "torch", "M=4096,N=4096,K=4096,epilogue=0"),
    CheckCase("flash_attention-causal", "specs/flash_attention.toml", "triton",
              "batch=4,heads=32,seq_q=4096,head_dim=128,causal=true"),
    CheckCase("sdpa_auto-causal", "specs/flash_attention.toml", "sdpa_auto",
              "batch=4,heads=32,seq_q=4096,head_dim=128,causal=true"),
    CheckCase("int4_splitk-M1", "specs/int4_matmul.toml", "triton", "M=1,N=4096,K=4096"),
    CheckCase("int4_torch-M1", "specs/int4_matmul.toml", "torch", "M=1,N=4096,K=4096"),
    # decode shapes, where a graph replay (vLLM's decode path) and events may part: launch-bound calls
    CheckCase("rmsnorm-decode", "specs/rmsnorm.toml", "triton", "tokens=64,hidden=4096"),
    CheckCase("rmsnorm_torch.compile-decode", "specs/rmsnorm.toml", "torch.compile", "tokens=64,hidden=4096"),
    CheckCase("matmul_tma-M16", "specs/matmul.toml", "triton_tma", "M=16,N=4096,K=4096,epilogue=0"),
    CheckCase("cublas-M16", "specs/matmul.toml", "torch", "M=16,N=4096,K=4096,epilogue=0"),
    CheckCase("flash_attention-decode", "specs/flash_attention.toml", "triton",
              "batch=64,heads=32,kv_heads=8,seq_q=1,seq_kv=8192,head_dim=128"),
    CheckCase("sdpa_auto-decode", "specs/flash_attention.toml", "sdpa_auto",
              "batch=64,heads=32,kv_heads=8,seq_q=1,seq_kv=8192,head_dim=128"),
)


def build(c: CheckCase):
    """The zero-argument call the benchmark would time for this case, on freshly drawn inputs."""
    import functools

    from harness.correctness.args import make_args
    from harness.correctness.tasks import _find
    from harness.spec.load import load
    from harness.target.device import detect
    from harness.target.providers import providers_for
    from harness.target.resolve import resolve

    spec, device = load(ROOT / c.spec), detect()
    provider = _find(providers_for(spec, device, resolve(spec, device)), c.provider, "provider", "name")
    if not provider.runnable:
        raise RuntimeError(f"{c.provider} cannot run here: {provider.reason}")
    case = _find(spec.cases["bench"], c.case_id, "bench case")
    args = make_args(spec, case, c.dtype, device.torch_device, seed=1234)
    return functools.partial(provider.load(spec), **args.kwargs())


def ncu_driver(label: str) -> None:
    import torch

    fn = build(next(c for c in CASES if c.label == label))
    for _ in range(NCU_WARMUP):  # autotuning and compiles happen here, outside the profiled range
        fn()
    torch.cuda.synchronize()
    for _ in range(NCU_CALLS):
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


def run_ncu(c: CheckCase, timeout_s: float) -> dict:
    ncu = find_ncu()
    if ncu is None:
        return {"error": "ncu not found"}
    cmd = [ncu, "--clock-control", "none", "--cache-control", "all", "--metrics", f"{TIME_METRIC},{CLOCK_METRIC}",
           "--csv", "--print-units", "base", "--page", "raw", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
           sys.executable, str(Path(__file__).resolve()), "--ncu-driver", c.label]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"ncu timed out after {timeout_s:.0f} s"}
    times = parse_ncu_csv(proc.stdout, TIME_METRIC)
    clocks = _clock_values(proc.stdout)
    out = {"returncode": proc.returncode, "kernel_us": times, "clock_mhz": clocks}
    if not times or len(times) % NCU_CALLS:
        out["error"] = f"{len(times)} kernels profiled, not a multiple of {NCU_CALLS} calls"
        out["stdout_tail"], out["stderr_tail"] = proc.stdout[-2500:], proc.stderr[-2500:]
        return out
    per_call = len(times) // NCU_CALLS
    calls = [sum(times[i * per_call:(i + 1) * per_call]) for i in range(NCU_CALLS)]
    out.update(kernels_per_call=per_call, call_us=calls, median_us=statistics.median(calls),
               median_clock_mhz=statistics.median(clocks) if clocks else None)
    return out


def _clock_values(text: str) -> list[float]:
    """ncu's SM clock per kernel in MHz (the raw page gives cycles per second)."""
    import csv
    import io

    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    if not rows or CLOCK_METRIC not in rows[0]:
        return []
    scale = {"hz": 1e-6, "cycle/second": 1e-6, "cycle/nsecond": 1e3, "ghz": 1e3, "mhz": 1.0}
    unit = (rows[0][CLOCK_METRIC] or "cycle/second").strip().lower()
    return [float(r[CLOCK_METRIC].replace(",", "")) * scale.get(unit, 1e-6) for r in rows[1:] if r[CLOCK_METRIC]]


def engine(fn, method: str) -> dict:
    from harness.timing.engine import TimingConfig, measure
    from harness.timing.stats import summarize

    m = measure(fn, device="cuda", config=TimingConfig(method=method, timeout_s=8.0))
    st = summarize(m.samples_us)
    return {"method": m.method, "median_us": st.median, "ci": [st.median_ci_lo, st.median_ci_hi], "n": st.n,
            "cv": st.cv, "stop": m.stop_reason, "dropped": len(m.dropped_us),
            "clock_mhz": statistics.median(m.sm_clock_mhz) if m.sm_clock_mhz else None,
            "host_median_us": m.launch.host_median_us if m.launch else None,
            "wall_median_us": m.launch.wall_median_us if m.launch else None,
            "samples_us": list(m.samples_us)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="the folder for gpu_timing_compute.json (required)")
    ap.add_argument("--only", default="", help="comma-separated case labels (default: all)")
    ap.add_argument("--skip-ncu", action="store_true")
    ap.add_argument("--ncu-driver", metavar="LABEL", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ncu_driver:
        ncu_driver(a.ncu_driver)
        return 0
    if not a.out:
        ap.error("--out is required")
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: this check needs a GPU", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    wanted = {s for s in a.only.split(",") if s}
    cases = [c for c in CASES if not wanted or c.label in wanted]
    results = {"cases": [], "errors": [], "ncu_calls": NCU_CALLS}
    for c in cases:
        row = {"label": c.label, "spec": c.spec, "provider": c.provider, "case": c.case_id, "dtype": c.dtype}
        try:
            fn = build(c)
            fn()
            torch.cuda.synchronize()
            for method in METHODS:
                try:
                    row[method] = engine(fn, method)
                except Exception as exc:  # a call that cannot be captured has no graph figure; the rest stand
                    row[method] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
            del fn
            torch.cuda.empty_cache()
            left = BUDGET_S - (time.perf_counter() - t0)
            if not a.skip_ncu and left > 40:
                row["ncu"] = run_ncu(c, min(150.0, left - 20))
        except Exception as exc:
            results["errors"].append({"case": c.label, "error": f"{type(exc).__name__}: {exc}",
                                      "traceback": traceback.format_exc()[-3000:]})
        results["cases"].append(row)
        print(f"[{time.perf_counter() - t0:6.1f}s] {c.label}: " + ", ".join(
            f"{m} {_fmt((row.get(m) or {}).get('median_us'))} us" for m in (*METHODS, "ncu")), flush=True)
    results["wall_s"] = time.perf_counter() - t0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_timing_compute.json").write_text(json.dumps(_clean(results), indent=1))
    print_table(results)
    return 1 if results["errors"] else 0


def print_table(results: dict) -> None:
    head = ("case", "kernels", "events_us", "MHz", "graph_us", "MHz", "cupti_us", "ncu_us", "ncu_MHz",
            "events_vs_ncu")
    rows = []
    for r in results["cases"]:
        ev, gr, cu, nc = (r.get(k) or {} for k in ("events", "graph", "cupti", "ncu"))
        diff = (100 * (ev["median_us"] - nc["median_us"]) / nc["median_us"]
                if ev.get("median_us") and nc.get("median_us") else None)
        rows.append((r["label"], str(nc.get("kernels_per_call", "-")), _fmt(ev.get("median_us")),
                     _fmt(ev.get("clock_mhz"), 0), _fmt(gr.get("median_us")), _fmt(gr.get("clock_mhz"), 0),
                     _fmt(cu.get("median_us")), _fmt(nc.get("median_us")), _fmt(nc.get("median_clock_mhz"), 0),
                     "-" if diff is None else f"{diff:+.1f}%"))
    widths = [max(len(h), *(len(x[i]) for x in rows)) if rows else len(h) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for x in rows:
        print("  ".join(v.ljust(w) for v, w in zip(x, widths, strict=True)))
    for e in results["errors"]:
        print(f"ERROR {e['case']}: {e['error']}")
    for r in results["cases"]:
        for k in (*METHODS, "ncu"):
            if (r.get(k) or {}).get("error"):
                print(f"ERROR {r['label']} {k}: {r[k]['error']}")


if __name__ == "__main__":
    sys.exit(main())
