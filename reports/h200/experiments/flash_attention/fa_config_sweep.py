#!/usr/bin/env python3
"""flash_attention's launch configurations on one GPU, against SDPA's own backend choice (cuDNN on sm_90).

The shipped kernel (kernels/flash_attention.py) takes 128 x 32 tiles at head_dim 128 because 128 x 64 spilled on
sm_80; this sweeps the tile, warps and pipeline depth on the machine it runs on, the tutorial's pruning applied
(8 warps only for tiles of at least 128 x 128). Every configuration's output is checked against SDPA's before it is
timed. Timing: triton.testing.do_bench (L2 cleared before each call, median of its samples), SDPA timed the same
way in the same process. The headline shape is swept in full; the fastest few then run at the other bench shapes.

--family tma sweeps the TMA route instead (k and v through descriptors, Triton's warp specialisation of the key
loop on or off), from the shipped sm_90 tile: 128-row blocks of 64 or 128 keys, two to four stages.

Usage: python3 fa_config_sweep.py --out DIR [--family tiles|tma]   (writes DIR/sweep.json, prints a table)
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

SHAPES = {  # (batch, heads, kv_heads, seq, head_dim, causal)
    "headline-causal-d128": (4, 32, 32, 4096, 128, True),
    "noncausal-d128": (4, 32, 32, 4096, 128, False),
    "causal-d64": (4, 32, 32, 4096, 64, True),
    "gqa8-causal-d128": (4, 32, 8, 4096, 128, True),
}
TOP = 6


def configs(family="tiles"):
    from kernels.flash_attention import FlashAttentionConfig

    if family == "tma":
        out = [FlashAttentionConfig(128, 128, 8, 3, 1)]  # the pointer route's sm_90 tile, first
        for bn, s, ws in itertools.product((128, 64), (2, 3, 4), (False, True)):
            if bn * s <= 3 * 128:  # shared memory: q 32 KiB + stages x (k, v) at head_dim 128, at most 224 KiB
                out.append(FlashAttentionConfig(128, bn, 8, s, 1, tma=True, warp_specialize=ws))
        return out
    out = [FlashAttentionConfig(128, 32, 8, 3, 1)]  # the shipped one at head_dim 128, first
    for bm, bn, w, s in itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3, 4)):
        if bm * bn < 128 * 128 and w == 8:
            continue
        cfg = FlashAttentionConfig(bm, bn, w, s, 1)
        if cfg not in out:
            out.append(cfg)
    return out


def inputs(shape):
    import torch

    b, h, hk, s, d, causal = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(b, hk, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(b, hk, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
    return q, k, v, causal, d ** -0.5


def measure(name, shape, cfgs, sdpa_us=None):
    import torch
    import triton

    from kernels.flash_attention import flash_attention, flash_attention_sdpa_auto

    q, k, v, causal, scale = inputs(shape)
    want = flash_attention_sdpa_auto(q=q, k=k, v=v, out=None, causal=causal, sm_scale=scale)
    if sdpa_us is None:
        sdpa_us = triton.testing.do_bench(
            lambda: flash_attention_sdpa_auto(q=q, k=k, v=v, out=None, causal=causal, sm_scale=scale),
            warmup=50, rep=300, return_mode="median") * 1e3
    out = torch.empty_like(q)
    rows = []
    for cfg in cfgs:
        row = {"shape": name, "block_m": cfg.block_m, "block_n": cfg.block_n, "num_warps": cfg.num_warps,
               "num_stages": cfg.num_stages, "tma": cfg.tma, "warp_specialize": cfg.warp_specialize,
               "sdpa_auto_us": sdpa_us}
        try:
            t = time.perf_counter()
            flash_attention(q=q, k=k, v=v, out=out, causal=causal, sm_scale=scale, config=cfg)
            torch.cuda.synchronize()
            row["first_call_s"] = time.perf_counter() - t
            row["max_abs_err_vs_sdpa"] = (out.float() - want.float()).abs().max().item()
            if row["max_abs_err_vs_sdpa"] > 0.03:
                row["error"] = "wrong output"
            else:
                us = triton.testing.do_bench(
                    lambda cfg=cfg: flash_attention(q=q, k=k, v=v, out=out, causal=causal, sm_scale=scale, config=cfg),
                    warmup=25, rep=200, return_mode="median") * 1e3
                row["us"] = us
                row["vs_sdpa_auto"] = sdpa_us / us
        except Exception as exc:  # out of shared memory, a compile failure: recorded, the sweep goes on
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        rows.append(row)
        ok = f"{row['us']:9.1f} us  {row['vs_sdpa_auto']:.3f}x sdpa_auto" if "us" in row else row["error"]
        route = ("tma+ws" if cfg.warp_specialize else "tma") if cfg.tma else "ptr"
        print(f"{name:22s} {cfg.block_m:4d} {cfg.block_n:4d} w{cfg.num_warps} s{cfg.num_stages} {route:6s} {ok}",
              flush=True)
    return rows, sdpa_us


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--family", choices=("tiles", "tma"), default="tiles")
    a = ap.parse_args()
    import torch

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "family": a.family, "rows": []}
    import triton

    result["triton"] = triton.__version__
    try:
        first = next(iter(SHAPES))
        rows, _ = measure(first, SHAPES[first], configs(a.family))
        result["rows"] += rows
        timed = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])[:TOP]
        from kernels.flash_attention import FlashAttentionConfig

        best = [FlashAttentionConfig(r["block_m"], r["block_n"], r["num_warps"], r["num_stages"], 1, r["tma"],
                                     r["warp_specialize"]) for r in timed]
        for name, shape in list(SHAPES.items())[1:]:
            shipped = FlashAttentionConfig.for_shape(shape[3], shape[4], shape[1] // shape[2], torch.bfloat16,
                                                     hopper=a.family == "tma")
            rows, _ = measure(name, shape, [shipped] + [c for c in best if c != shipped])
            result["rows"] += rows
    except Exception:
        result["crash"] = traceback.format_exc()
        print(result["crash"], flush=True)
    (out / "sweep.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
