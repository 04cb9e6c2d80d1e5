"""Split-K probe for kernels.matmul's pointer kernel (run on a GPU from the repository root):
``python3 reports/h200/experiments/matmul/splitk_probe.py --out DIR``.

At few output tiles over a long K (M = 64-256, K >= 8192: ``splits_k``) the autotuner is offered configs that split
K 2 or 4 ways, summed in the same launch (kernels/splitk.py). Per shape, bf16 with no epilogue, this times (the
harness's engine: L2 flushed, CUDA events, medians):

- ``cublas``: ``F.linear`` (the spec's torch peer);
- ``shipped``: ``kernels.matmul.matmul`` as a caller gets it, with the config its autotuner picked;
- every config the autotuner is offered at that shape, forced, split or not.

Each is first checked against an fp32 GEMM of the same inputs (largest error over the spec's bf16 bound,
``1e-2 + 1.6e-2 |ref|``; a value above 1 fails), and a forced split launch twice in a row must agree bitwise (the
counters reset). Writes DIR/splitk_probe.json; every number printed is measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from harness.timing.engine import TimingConfig, measure  # noqa: E402
from harness.timing.stats import summarize  # noqa: E402
from kernels import matmul as mm  # noqa: E402
from kernels.splitk import scratch, unused  # noqa: E402

CFG = TimingConfig(min_samples=10, max_samples=200, min_time_s=0.1, timeout_s=5.0)
# (M, N, K): the shape first, then its neighbours; the last two are not offered a split (a control)
SHAPES = [(128, 4096, 14336), (64, 4096, 14336), (256, 4096, 14336), (128, 4096, 8192), (128, 14336, 4096),
          (16, 4096, 14336)]


def forced(cfg, a, b, bias, c):
    """A launch of ``_matmul_kernel`` with one config, as the autotuner would make it."""
    m, k = a.shape
    n = b.shape[0]
    split = cfg.kwargs.get("SPLIT_K", 1)
    ws, cnt = scratch(a.device, split * m * n, mm.cdiv(m, 16) * mm.cdiv(n, 16)) if split > 1 else unused(a.device)
    tiles = mm.cdiv(m, cfg.kwargs["BLOCK_M"]) * mm.cdiv(n, cfg.kwargs["BLOCK_N"])
    grid = (tiles, mm._splits(k, cfg.kwargs["BLOCK_K"], split))
    args = (a, b, bias, c, ws, cnt, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), bias.stride(0),
            c.stride(0), c.stride(1))

    def call():
        mm._matmul_kernel[grid](*args, EPILOGUE=0, RNE_BF16=False, UPCAST_DOT=False, **cfg.all_kwargs())
        return c
    return call


def name_of(cfg) -> str:
    kw = cfg.kwargs
    return (f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']}_w{cfg.num_warps}_s{cfg.num_stages}"
            f"_split{kw.get('SPLIT_K', 1)}")


def offered(a, b, bias, c):
    m, k = a.shape
    n = b.shape[0]
    named = dict(a_ptr=a, b_ptr=b, M=m, N=n, K=k, stride_ak=a.stride(1), stride_bk=b.stride(1),
                 stride_am=a.stride(0), stride_bn=b.stride(0))
    return mm.prune_configs(mm._matmul_autotuned.configs, named)


def time_us(fn) -> float:
    fn()
    torch.cuda.synchronize()
    return summarize(measure(fn, device="cuda", config=CFG).samples_us).median


def probe(m, n, k) -> dict:
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    b = (torch.randn(n, k, device="cuda", generator=g) / k ** 0.5).to(torch.bfloat16)
    bias = torch.zeros(n, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float().T
    row: dict = {"splits_offered": mm.splits_k(m, n, k), "providers": {}}
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    calls = {"cublas": lambda: F.linear(a, b),
             "shipped": lambda: mm.matmul(a=a, b=b, bias=bias, c=c, epilogue=0) or c}
    for cfg in offered(a, b, bias, c):
        calls[name_of(cfg)] = forced(cfg, a, b, bias, torch.empty_like(c))
    for name, fn in calls.items():
        try:
            got = fn().float()
            excess = ((got - ref).abs() / (1e-2 + 1.6e-2 * ref.abs())).max().item()
            entry = {"err_over_bound": excess}
            if name.endswith(("split2", "split4")):
                again = fn().clone()
                entry["repeatable"] = bool(torch.equal(again, fn()))
            entry["median_us"] = time_us(fn)
        except Exception as exc:  # noqa: BLE001 - recorded, the probe goes on
            entry = {"error": f"{type(exc).__name__}: {exc}"[:400]}
            traceback.print_exc()
        row["providers"][name] = entry
    best = mm._matmul_autotuned.best_config
    row["shipped_config"] = name_of(best) if best is not None else None
    return row


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    out = {"device": torch.cuda.get_device_name(), "shapes": {}}
    print("== median us; x = cuBLAS median / this one; err = largest error over the bf16 bound (fails above 1)")
    for (m, n, k) in SHAPES:
        key = f"M={m} N={n} K={k}"
        row = out["shapes"][key] = probe(m, n, k)
        base = row["providers"].get("cublas", {}).get("median_us")
        print(f"{key}  split offered: {row['splits_offered']}  shipped picked: {row['shipped_config']}")
        ranked = sorted(row["providers"].items(), key=lambda kv: kv[1].get("median_us", float("inf")))
        for name, r in ranked:
            if "median_us" not in r:
                print(f"    {name:34s} ERROR {r.get('error', '')[:150]}")
                continue
            rep = "" if "repeatable" not in r else f"  repeatable {r['repeatable']}"
            print(f"    {name:34s} {r['median_us']:8.2f} us  x{base / r['median_us']:.3f}  "
                  f"err {r['err_over_bound']:.3f}{rep}")
        (a.out / "splitk_probe.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
