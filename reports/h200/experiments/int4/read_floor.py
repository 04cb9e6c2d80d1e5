"""How fast any kernel that reads a decode GEMM's weights once can be, timed as the harness times kernels.

At M = 1 a weight-only GEMM is its weight read: int4's packed weight, scales and zero points against bf16's weight.
For each decode shape (N, K) this times, with harness.timing.engine.measure (events behind a spin kernel, L2 flushed
before each sample, as the int4 probes time the kernels):

- the best of a sweep of Triton read kernels over a buffer of int4's bytes, and over one of bf16's: each program
  reads BLOCK contiguous int32 words (16 bytes a thread and more) and writes their sum, or a persistent grid walks
  the buffer. These are the floors of a kernel that only streams the bytes, in the best layout there is;
- an empty launch (one program that does nothing): the part of every timing that is not the kernel's work;
- bf16 ``F.linear`` on the resident weight and int4_matmul's launcher (kernels/int4_cuda.py), for the ratios.

The ratio of the two floors bounds what a weight-only int4 kernel can gain over a bf16 GEMV that streams at its
floor. Run from the repository root on the GPU: ``python3 reports/h200/experiments/int4/read_floor.py --out DIR``
(writes DIR/read_floor.json).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from int4_probe import SWEEP_TIMING, int4_bytes, make_inputs, median_us  # noqa: E402

from kernels import int4_cuda as cu  # noqa: E402
from kernels import int4_matmul as q4  # noqa: E402

SHAPES = ((4096, 4096), (4096, 14336), (14336, 4096))
BLOCKS = (1024, 2048, 4096, 8192, 16384)
PERSISTENT = (1, 2, 4, 8)  # programs per SM


@triton.jit
def _read(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.program_id(0), tl.sum(tl.load(x_ptr + offs, mask=offs < n, other=0), axis=0))


@triton.jit
def _read_persistent(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0))


@triton.jit
def _empty(out_ptr):
    pass


def read_floor(nbytes: int) -> dict:
    """The fastest read of ``nbytes`` contiguous bytes over the sweep, with every variant's median."""
    words = nbytes // 4
    x = torch.randint(-(2**30), 2**30, (words,), dtype=torch.int32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.empty(max(triton.cdiv(words, min(BLOCKS)), sms * max(PERSISTENT)), dtype=torch.int32, device="cuda")
    rows = []
    for block in BLOCKS:
        for warps in (4, 8):
            grid = (triton.cdiv(words, block),)
            t, _ = median_us(lambda g=grid, b=block, nw=warps: _read[g](x, out, words, BLOCK=b, num_warps=nw),
                             SWEEP_TIMING)
            rows.append({"kind": "grid", "block": block, "warps": warps, "us": t})
    for per_sm in PERSISTENT:
        for block in (2048, 4096):
            grid = (sms * per_sm,)
            t, _ = median_us(lambda g=grid, b=block: _read_persistent[g](x, out, words, BLOCK=b, num_warps=8),
                             SWEEP_TIMING)
            rows.append({"kind": "persistent", "block": block, "warps": 8, "programs": sms * per_sm, "us": t})
    rows.sort(key=lambda r: r["us"])
    best = rows[0]
    return {"bytes": nbytes, "us": best["us"], "best": best, "gbps": nbytes / best["us"] / 1e3, "rows": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "shapes": []}  # fmt: skip
    one = torch.empty(1, dtype=torch.int32, device="cuda")
    res["empty_us"], _ = median_us(lambda: _empty[(1,)](one))
    print(f"empty launch: {res['empty_us']:.2f} us", flush=True)
    for n, k in SHAPES:
        a, w, s, z = make_inputs(1, n, k, torch.bfloat16)
        c = torch.empty((1, n), dtype=torch.bfloat16, device="cuda")
        w_bf16 = q4.dequantize(w, s, z, torch.bfloat16).contiguous()
        rec = {"N": n, "K": k}
        rec["int4_read"] = read_floor(int4_bytes(1, n, k) - (k + n) * 2)  # the weight's bytes: a and c left out
        rec["bf16_read"] = read_floor(n * k * 2)
        rec["bf16_us"], _ = median_us(lambda a=a, wb=w_bf16: torch.nn.functional.linear(a, wb))
        rec["int4_us"], _ = median_us(lambda a=a, w=w, s=s, z=z, c=c: cu.int4_matmul_cuda(a=a, w=w, scales=s,
                                                                                            zeros=z, c=c))
        fi, fb = rec["int4_read"]["us"], rec["bf16_read"]["us"]
        rec["floor_ratio"] = fb / fi
        res["shapes"].append(rec)
        print(f"N={n} K={k}: read floors int4 {fi:.2f} us ({rec['int4_read']['gbps']:.0f} GB/s, "
              f"{rec['int4_read']['best']}), bf16 {fb:.2f} us ({rec['bf16_read']['gbps']:.0f} GB/s); "
              f"floor ratio {fb / fi:.2f}x; bf16 F.linear {rec['bf16_us']:.2f} us, int4 launcher {rec['int4_us']:.2f} "
              f"us = {rec['bf16_us'] / rec['int4_us']:.2f}x, bf16 F.linear over the int4 read floor "
              f"{rec['bf16_us'] / fi:.2f}x", flush=True)
        with open(os.path.join(args.out, "read_floor.json"), "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
