"""Where gelu_tanh's flat launch loses its last points of bandwidth: a sweep of (elements per program, warps).

kernels/gelu_tanh.py launches a contiguous input as one row: ``GeluConfig.for_flat`` picks at most 4096 elements
a program at 8 warps (16 a thread). Nsight Compute had it at 78.9% of DRAM peak with long-scoreboard stalls 37%
of the total (too few loads in flight). Here every (block, warps) pair is timed at the spec's bench shapes, bf16,
with the harness's engine (events behind a spin kernel, L2 flushed before each sample), beside a plain copy of the
same bytes (``out.copy_(x)``: the same read and write traffic) and ``F.gelu(approximate="tanh")``; each variant's
output is checked against the fp32 reference first.

Run from the repository root on the GPU: python3 reports/h200/experiments/gelu_tanh/gelu_probe.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

import torch

sys.path.insert(0, os.getcwd())
from harness.timing.engine import TimingConfig, measure  # noqa: E402
from harness.timing.stats import summarize  # noqa: E402
from kernels import gelu_tanh as g  # noqa: E402

SHAPES = ((8192, 16384), (4096, 28672), (64, 16384))
BLOCKS = (1024, 2048, 4096, 8192, 16384)
WARPS = (4, 8, 16)
TIMING = TimingConfig(timeout_s=4.0)


def median_us(fn) -> float:
    return summarize(measure(fn, device="cuda", config=TIMING).samples_us).median


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = []
    for m, n in SHAPES:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(x)
        ref = torch.nn.functional.gelu(x.float(), approximate="tanh").to(torch.bfloat16)
        nbytes = 2 * x.numel() * x.element_size()
        base = {"M": m, "N": n, "bytes": nbytes}
        copy_us = median_us(lambda o=out, i=x: o.copy_(i))
        fgelu_us = median_us(lambda i=x: torch.nn.functional.gelu(i, approximate="tanh"))
        shipped = g.GeluConfig.for_flat(x.numel())
        rows.append({**base, "variant": "copy", "us": copy_us, "gbps": nbytes / copy_us / 1e3})
        rows.append({**base, "variant": "F.gelu", "us": fgelu_us, "gbps": nbytes / fgelu_us / 1e3})
        print(f"{m}x{n}: copy {copy_us:.2f} us ({nbytes / copy_us / 1e3:.0f} GB/s), F.gelu {fgelu_us:.2f} us; "
              f"shipped {shipped}", flush=True)
        for block in BLOCKS:
            for warps in WARPS:
                if block // (32 * warps) < 1:
                    continue
                cfg = g.GeluConfig(block_m=1, block_n=block, num_warps=warps)
                row = {**base, "variant": f"block={block},warps={warps}", "block": block, "warps": warps,
                       "shipped": cfg == shipped}
                try:
                    out.fill_(float("nan"))
                    launch = g.rows_plan(x.view(1, -1), out.view(1, -1), False, cfg)
                    launch(x, out)
                    torch.testing.assert_close(out, ref, rtol=1.6e-2, atol=1e-5)
                    us = median_us(lambda launch=launch, i=x, o=out: launch(i, o))
                    row.update(us=us, gbps=nbytes / us / 1e3, of_copy=copy_us / us)
                    print(f"  {row['variant']:<24} {us:8.2f} us  {row['gbps']:6.0f} GB/s  {100 * copy_us / us:5.1f}% "
                          f"of copy{'  (shipped)' if row['shipped'] else ''}", flush=True)
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                    traceback.print_exc()
                rows.append(row)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "gelu_probe.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
