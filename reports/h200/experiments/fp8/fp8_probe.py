"""FP8 GEMM probe (run on a GPU from the repository root):
``python3 reports/h200/experiments/fp8/fp8_probe.py --out DIR``.

For kernels.matmul_fp8 with promoted (default) and fast accumulation, and torch._scaled_mm with and without
use_fast_accum: the largest error against the fp32 dequantised reference, in units of the spec's absolute bound
(1e-5 + 1e-6 K) and relative to the output's norm, at growing K; then median times (the harness's engine:
L2 flushed, CUDA events) at the spec's bench shapes. Writes DIR/fp8_probe.json; every number printed is measured.

``--promote 128,256`` adds the kernel with that many products per promotion into fp32 (``promote_every``; the
shipped interval is 64) to both: what a less frequent promotion costs in error and wins in time.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from harness.timing.engine import TimingConfig, measure  # noqa: E402
from harness.timing.stats import summarize  # noqa: E402
from kernels.matmul_fp8 import matmul_fp8, matmul_fp8_ref  # noqa: E402

CFG = TimingConfig(min_samples=10, max_samples=200, min_time_s=0.1, timeout_s=5.0)


def inputs(m, n, k, per_row, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sa = torch.rand(m if per_row else 1, 1, device="cuda", generator=g) * 0.75 + 0.25
    sb = torch.rand(n if per_row else 1, 1, device="cuda", generator=g) * 0.75 + 0.25
    return a, b, sa, sb


def scaled_mm(a, b, sa, sb, fast):
    per_row = sa.shape[0] > 1 or sb.shape[0] > 1
    sa_ = sa.expand(a.shape[0], 1).contiguous() if per_row else sa.reshape(())
    sb_ = sb.expand(b.shape[0], 1).reshape(1, -1).contiguous() if per_row else sb.reshape(())
    return torch._scaled_mm(a, b.t(), scale_a=sa_, scale_b=sb_, out_dtype=torch.bfloat16, use_fast_accum=fast)


PROMOTE: tuple[int, ...] = ()  # --promote


def providers(a, b, sa, sb):
    c = torch.empty(a.shape[0], b.shape[0], device="cuda", dtype=torch.bfloat16)
    promoted = {f"triton_promote{n}": (lambda n=n: matmul_fp8(a=a, b=b, scale_a=sa, scale_b=sb, c=c,
                                                              promote_every=n) or c) for n in PROMOTE}
    return {**promoted,
        "triton": lambda: matmul_fp8(a=a, b=b, scale_a=sa, scale_b=sb, c=c) or c,
        "triton_fast_accum": lambda: matmul_fp8(a=a, b=b, scale_a=sa, scale_b=sb, c=c, fast_accum=True) or c,
        "scaled_mm": lambda: scaled_mm(a, b, sa, sb, False),
        "scaled_mm_fast_accum": lambda: scaled_mm(a, b, sa, sb, True),
    }


def accuracy(out: dict) -> None:
    print("== accuracy against the fp32 dequantised reference (err / (1e-5 + 1e-6 K): the spec's atol)")
    for (m, n, k) in [(256, 256, 1024), (256, 256, 4096), (256, 256, 14336), (64, 4096, 14336), (4096, 4096, 4096)]:
        a, b, sa, sb = inputs(m, n, k, per_row=True, seed=k)
        ref = torch.empty(m, n, device="cuda")
        matmul_fp8_ref(a=a, b=b, scale_a=sa, scale_b=sb, c=ref)
        atol = 1e-5 + 1e-6 * k
        for name, fn in providers(a, b, sa, sb).items():
            key = f"{name} M={m} N={n} K={k}"
            try:
                got = fn().float()
                err = (got - ref).abs()
                bound = atol + 1.6e-2 * ref.abs()  # the spec's elementwise bound (bf16 rtol)
                rel = ((got - ref).norm(dim=1) / ref.norm(dim=1).clamp_min(1e-30)).max().item()
                excess = (err / bound).max().item()
                out["accuracy"][key] = {"max_abs_err": err.max().item(), "max_err_over_bound": excess,
                                        "max_row_rel_err": rel, "bound_atol": atol}
                print(f"{key:48s} max|err| {err.max().item():.3e}  worst err/bound {excess:.3f}  "
                      f"row rel {rel:.3e}")
            except Exception as exc:  # noqa: BLE001 - recorded, the probe goes on
                out["accuracy"][key] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
                print(f"{key}: ERROR {type(exc).__name__}: {str(exc)[:200]}")


SHAPES = [(4096, 4096, 4096, 0), (8192, 8192, 8192, 0), (4096, 4096, 4096, 1), (4096, 14336, 4096, 1),
          (4096, 4096, 14336, 1), (1, 14336, 4096, 1), (16, 14336, 4096, 1), (64, 14336, 4096, 1),
          (128, 14336, 4096, 1), (128, 4096, 14336, 0), (16, 4096, 14336, 0)]


def timing(out: dict) -> None:
    print("== timing (median us, TFLOP/s, ratio to torch._scaled_mm default accumulation)")
    for (m, n, k, per_row) in SHAPES:
        a, b, sa, sb = inputs(m, n, k, per_row)
        row = {}
        for name, fn in providers(a, b, sa, sb).items():
            try:
                fn()
                torch.cuda.synchronize()
                st = summarize(measure(fn, device="cuda", config=CFG).samples_us)
                row[name] = {"median_us": st.median, "tflops": 2 * m * n * k / st.median / 1e6}
            except Exception as exc:  # noqa: BLE001
                row[name] = {"error": f"{type(exc).__name__}: {exc}"[:400]}
        base = row.get("scaled_mm", {}).get("median_us")
        key = f"M={m} N={n} K={k} per_row={per_row}"
        out["timing"][key] = row
        cells = []
        for name, r in row.items():
            if "median_us" in r:
                ratio = f" x{base / r['median_us']:.3f}" if base else ""
                cells.append(f"{name} {r['median_us']:.1f}us {r['tflops']:.0f}TF{ratio}")
            else:
                cells.append(f"{name} ERROR")
        print(f"{key:34s} " + " | ".join(cells))


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--promote", default="", help="promotion intervals to add, e.g. 128,256")
    args = p.parse_args()
    global PROMOTE
    PROMOTE = tuple(int(x) for x in args.promote.split(",") if x)
    args.out.mkdir(parents=True, exist_ok=True)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "accuracy": {}, "timing": {}}
    t0 = time.monotonic()
    for step in (accuracy, timing):
        try:
            step(out)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    out["wall_s"] = time.monotonic() - t0
    (args.out / "fp8_probe.json").write_text(json.dumps(out, indent=2, default=lambda x: None if
                                                        isinstance(x, float) and not math.isfinite(x) else x))
    print(f"fp8 probe: {out['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
