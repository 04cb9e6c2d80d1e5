#!/usr/bin/env python3
"""Where a launcher's host time goes: cProfile over back-to-back calls with the GPU kept busy, per case.

The benchmark's host time per call (harness/timing/launch.py) says how long a launcher takes; this says why. Each
case is built by the harness from its spec, exactly as the benchmark builds it (bench/gpu_timing_compute.py's
``build``); a spin kernel keeps the GPU busy so no launch waits for the queue. Per case it prints the host time
per call without the profiler, then the functions with the most own time under it.

Usage: python3 bench/gpu_host_profile.py --out DIR [--calls N] [--only LABEL,...]
Writes DIR/host_profile.json and DIR/<label>.txt (the pstats listing).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gpu_timing_compute import CheckCase, build  # noqa: E402

CASES = (
    CheckCase("layernorm-16384x4096", "specs/layernorm.toml", "triton", "tokens=16384,hidden=4096"),
    CheckCase("layer_norm_torch-16384x4096", "specs/layernorm.toml", "torch_layer_norm", "tokens=16384,hidden=4096"),
    CheckCase("layernorm-64x4096", "specs/layernorm.toml", "triton", "tokens=64,hidden=4096"),
    CheckCase("rmsnorm-64x4096", "specs/rmsnorm.toml", "triton", "tokens=64,hidden=4096"),
    CheckCase("rmsnorm_cuda-64x4096", "specs/rmsnorm.toml", "cuda", "tokens=64,hidden=4096"),
    CheckCase("int4-M1", "specs/int4_matmul.toml", "triton", "M=1,N=4096,K=4096"),
    CheckCase("int4-M16", "specs/int4_matmul.toml", "triton", "M=16,N=4096,K=4096"),
    CheckCase("int4_torch-M1", "specs/int4_matmul.toml", "torch", "M=1,N=4096,K=4096"),
    CheckCase("matmul_tma-M16", "specs/matmul.toml", "triton_tma", "M=16,N=4096,K=4096,epilogue=0"),
    CheckCase("cublas-M16", "specs/matmul.toml", "torch", "M=16,N=4096,K=4096,epilogue=0"),
    # the TMA path proper (M >= 1024): descriptors built per call, the picked config's box set by its pre_hook
    CheckCase("matmul_tma-M4096", "specs/matmul.toml", "triton_tma", "M=4096,N=4096,K=4096,epilogue=0"),
    CheckCase("cublas-M4096", "specs/matmul.toml", "torch", "M=4096,N=4096,K=4096,epilogue=0"),
    CheckCase("flash_attention-decode", "specs/flash_attention.toml", "triton",
              "batch=64,heads=32,kv_heads=8,seq_q=1,seq_kv=8192,head_dim=128"),
    CheckCase("gelu_tanh-64x16384", "specs/gelu_tanh.toml", "triton", "tokens=64,hidden=16384"),
    CheckCase("torch_gelu-64x16384", "specs/gelu_tanh.toml", "torch_gelu", "tokens=64,hidden=16384"),
    CheckCase("flash_attention_hopper-causal", "specs/flash_attention.toml", "triton_hopper",
              "batch=4,heads=32,seq_q=4096,head_dim=128,causal=true"),
    CheckCase("sdpa_auto-causal", "specs/flash_attention.toml", "sdpa_auto",
              "batch=4,heads=32,seq_q=4096,head_dim=128,causal=true"),
    CheckCase("matmul_fp8-M4096", "specs/matmul_fp8.toml", "triton", "M=4096,N=4096,K=4096,per_row=0"),
    CheckCase("scaled_mm-M4096", "specs/matmul_fp8.toml", "torch", "M=4096,N=4096,K=4096,per_row=0"),
    # a call the CUDA backend routes to the Triton one (M not a multiple of 128): Plans.delegate keeps the
    # Triton launcher's plan as the routing launcher's own, so one plan lookup, not two
    CheckCase("matmul_fp8_cuda-M1", "specs/matmul_fp8.toml", "cuda", "M=1,N=4096,K=4096,per_row=0"),
    CheckCase("matmul_fp8-M1", "specs/matmul_fp8.toml", "triton", "M=1,N=4096,K=4096,per_row=0"),
    CheckCase("scaled_mm-M1", "specs/matmul_fp8.toml", "torch", "M=1,N=4096,K=4096,per_row=0"),
    CheckCase("int4_cuda-M32", "specs/int4_matmul.toml", "cuda", "M=32,N=4096,K=4096"),
    CheckCase("int4-M32", "specs/int4_matmul.toml", "triton", "M=32,N=4096,K=4096"),
)


def host_us(fn, calls: int, profiler: cProfile.Profile | None = None) -> float:
    import torch

    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e9))  # about a second of spin at working clocks: every launch below queues behind it
    t = time.perf_counter_ns()
    if profiler is not None:
        profiler.enable()
    for _ in range(calls):
        fn()
    if profiler is not None:
        profiler.disable()
    us = (time.perf_counter_ns() - t) / 1e3 / calls
    torch.cuda.synchronize()
    return us


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="the folder for host_profile.json and the listings")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = {s for s in a.only.split(",") if s}
    rows = []
    for c in CASES:
        if wanted and c.label not in wanted:
            continue
        try:
            fn = build(c)
            for _ in range(5):
                fn()
            plain = [host_us(fn, a.calls) for _ in range(3)]
            prof = cProfile.Profile()
            profiled = host_us(fn, a.calls, prof)
        except Exception as exc:  # one case's failure is reported, the others still run
            rows.append({"label": c.label, "error": f"{type(exc).__name__}: {exc}"[:400]})
            print(f"{c.label}: ERROR {rows[-1]['error']}", flush=True)
            continue
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        (out / f"{c.label}.txt").write_text(text.getvalue())
        rows.append({"label": c.label, "provider": c.provider, "case": c.case_id, "calls": a.calls,
                     "host_us_per_call": sorted(plain), "profiled_us_per_call": profiled})
        print(f"{c.label}: host {sorted(plain)[1]:.1f} us/call (profiled {profiled:.1f})", flush=True)
        lines = text.getvalue().splitlines()
        start = next((i for i, line in enumerate(lines) if "tottime" in line), 0)
        print("\n".join(lines[start:start + 14]), flush=True)
    (out / "host_profile.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
