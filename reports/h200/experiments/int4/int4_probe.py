"""int4_matmul on a GPU: is it right, and is it faster than a bf16 GEMM whose weight is already resident?

1. Correctness: the Triton kernel (autotuned, as the harness runs it) against ``int4_matmul_ref`` on a few shapes
   in bf16 and fp16, judged with the spec's own tolerance (specs/int4_matmul.toml, harness.correctness.numerics),
   plus a second run that must be bitwise equal (the split-K reduction is deterministic).
2. Timing with harness.timing.engine.measure (CUDA events behind a spin kernel, L2 flushed by a read before each
   sample; a short TimingConfig): the int4 kernel against ``F.linear`` on the bf16 weight dequantised once, at
   M in {1, 4, 16, 64, 256, 1024, 4096} x (N, K) in {(4096, 4096), (4096, 14336), (14336, 4096)}. Prints median
   microseconds, the speedup, and GB/s over each side's bytes (int4: a + packed w + scales + zeros + c, the spec's
   roofline; bf16: a + w + c).

``--sweep`` (a tuning experiment, several minutes) instead times explicit launch configurations and decode split
counts, bypassing the autotuner, and prints the best per shape.

Run from the repository root on the GPU (writes DIR/int4_probe.json):
``python3 reports/h200/experiments/int4/int4_probe.py --out DIR``.
Every case is in its own try/except: one failure is a line in the output and a record in the JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
import time
import traceback

import torch

sys.path.insert(0, os.getcwd())
from harness.correctness.numerics import mismatch  # noqa: E402
from harness.spec.load import load as load_spec  # noqa: E402
from harness.spec.model import Case  # noqa: E402
from harness.timing.engine import TimingConfig, measure  # noqa: E402
from kernels import int4_matmul as q4  # noqa: E402
from kernels.common import sm_count  # noqa: E402

MS = (1, 4, 16, 64, 256, 1024, 4096)
NKS = ((4096, 4096), (4096, 14336), (14336, 4096))
# (M, N, K, w padded): the word path at decode and larger M (transposed tiles from 64 rows), the byte path for K
# not a multiple of 8 and for padded rows
CHECKS = (
    (1, 4096, 4096, False),
    (16, 4096, 14336, False),
    (4, 14336, 4096, False),
    (33, 5003, 4098, False),
    (256, 4096, 4096, False),
    (1024, 4096, 4096, False),
    (16, 4096, 4096, True),
    (128, 4096, 4096, True),
)
TIMING = TimingConfig(min_samples=10, max_rsd=0.01, min_time_s=0.01, timeout_s=1.0)
SWEEP_TIMING = TimingConfig(min_samples=10, max_rsd=0.02, min_time_s=0.0, timeout_s=0.4)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def make_inputs(m: int, n: int, k: int, dtype: torch.dtype, seed: int = 0):
    """The spec's distributions: a normal, every byte value, scales ~ 0.125 / sqrt(K), zero points in [0, 16)."""
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    groups = -(-k // q4.GROUP_SIZE)
    lo, hi = 0.05 / math.sqrt(k + 1), 0.2 / math.sqrt(k + 1)
    a = torch.randn(m, k, generator=gen, device="cuda").to(dtype)
    w = torch.randint(0, 256, (n, k // 2), generator=gen, device="cuda", dtype=torch.uint8)
    s = (torch.rand(n, groups, generator=gen, device="cuda") * (hi - lo) + lo).to(dtype)
    z = torch.randint(0, 16, (n, groups), generator=gen, device="cuda", dtype=torch.uint8)
    return a, w, s, z


def int4_bytes(m: int, n: int, k: int, itemsize: int = 2) -> int:
    groups = -(-k // q4.GROUP_SIZE)
    return m * k * itemsize + n * (k // 2) + n * groups * (itemsize + 1) + m * n * itemsize


def dense_bytes(m: int, n: int, k: int, itemsize: int = 2) -> int:
    return (m * k + n * k + m * n) * itemsize


def chosen_config() -> str:
    cfg = getattr(q4._int4_matmul_autotuned, "best_config", None)
    return str(cfg) if cfg is not None else "?"


def check(spec, m: int, n: int, k: int, dtype_name: str, padded: bool = False) -> dict:
    """``padded``: w's rows 3 bytes apart from contiguous (no 32-bit words): the kernel's byte path."""
    dtype = DTYPES[dtype_name]
    a, w, s, z = make_inputs(m, n, k, dtype)
    if padded:
        w = torch.empty((n, k // 2 + 3), dtype=torch.uint8, device="cuda")[:, : k // 2].copy_(w)
    c = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    q4.int4_matmul(a=a, w=w, scales=s, zeros=z, c=c)
    again = torch.full_like(c, float("inf"))
    q4.int4_matmul(a=a, w=w, scales=s, zeros=z, c=again)
    ref = torch.empty_like(c)
    q4.int4_matmul_ref(a=a, w=w, scales=s, zeros=z, c=ref)
    torch.cuda.synchronize()
    tol = spec.tolerance(dtype_name, "c", Case("full", (("M", m), ("N", n), ("K", k))))
    problem = mismatch(c, ref, tol)
    diff = (c.double() - ref.double()).abs()
    return {
        "M": m,
        "N": n,
        "K": k,
        "padded": padded,
        "dtype": dtype_name,
        "ok": problem is None,
        "problem": problem,
        "max_abs_err": float(diff.max()),
        "elements_differing": int((c != ref).sum()),
        "numel": c.numel(),
        "deterministic": bool(torch.equal(c.view(torch.int16), again.view(torch.int16))),
        "split_k": q4._split_k(m, n, k, sm_count(a.device)),
        "config": chosen_config(),
        "atol": tol.atol,
        "rtol": tol.rtol,
    }


def samples_of(r) -> tuple[float, ...]:
    """The kept samples; where every one was dropped (below the clock threshold after an idle spell, or launched
    late), the dropped ones, so a case still gets a number: the JSON says which."""
    if r.samples_us:
        return r.samples_us
    late = tuple(r.method_params.get("late_discarded_us") or ())
    if r.dropped_us or late:
        return r.dropped_us or late
    raise RuntimeError(f"no samples ({r.stop_reason}): {r.method_params}")


def median_us(fn, config: TimingConfig = TIMING) -> tuple[float, dict]:
    r = measure(fn, device="cuda", config=config)
    return statistics.median(samples_of(r)), {
        "samples": len(r.samples_us),
        "dropped": len(r.dropped_us),
        "stop": r.stop_reason,
        "warm_us": statistics.median(r.warm_us) if r.warm_us else None,
    }


def time_case(m: int, n: int, k: int) -> dict:
    a, w, s, z = make_inputs(m, n, k, torch.bfloat16)
    c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    w_bf16 = q4.dequantize(w, s, z, torch.bfloat16).contiguous()  # resident, as the spec's torch peer keeps it

    def int4():
        q4.int4_matmul(a=a, w=w, scales=s, zeros=z, c=c)

    def dense():
        torch.nn.functional.linear(a, w_bf16)

    t_int4, info_int4 = median_us(int4)
    t_dense, info_dense = median_us(dense)
    b4, bd = int4_bytes(m, n, k), dense_bytes(m, n, k)
    return {
        "M": m,
        "N": n,
        "K": k,
        "int4_us": t_int4,
        "bf16_us": t_dense,
        "speedup": t_dense / t_int4,
        "int4_GBps": b4 / t_int4 / 1e3,
        "bf16_GBps": bd / t_dense / 1e3,
        "int4_TFLOPs": 2 * m * n * k / t_int4 / 1e6,
        "bf16_TFLOPs": 2 * m * n * k / t_dense / 1e6,
        "split_k": q4._split_k(m, n, k, sm_count(a.device)),
        "config": chosen_config(),
        "int4_timing": info_int4,
        "bf16_timing": info_dense,
    }


# ------------------------------------------------------------------------------------------------ sweep


def sweep_configs(decode: bool) -> list[q4.Int4Config]:
    if decode:
        return [q4.Int4Config(16, bn, bk, 8, warps, stages) for bn, bk, warps, stages in
                ((32, 128, 4, 4), (64, 128, 4, 4), (128, 128, 4, 3), (64, 64, 4, 6), (128, 64, 4, 4),
                 (128, 64, 8, 4))]  # fmt: skip
    return [q4.Int4Config(bm, bn, bk, 8, warps, stages) for bm, bn, bk, warps, stages in
            ((64, 64, 128, 4, 4), (128, 64, 128, 4, 3), (128, 128, 128, 8, 3), (128, 128, 64, 8, 4),
             (128, 64, 64, 4, 4), (64, 128, 64, 4, 4))]  # fmt: skip


def sweep(out: dict) -> None:
    rows = out.setdefault("sweep", [])
    cases = [(m, n, k) for m in (1, 16) for n, k in NKS] + [(m, 4096, 4096) for m in (256, 4096)]
    for m, n, k in cases:
        decode = m <= q4._DECODE_M
        a, w, s, z = make_inputs(m, n, k, torch.bfloat16)
        c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        results = []
        # (split, the smallest BLOCK_M computed transposed): decode splits; larger M with and without the swap
        variants = [(split, 64) for split in (1, 2, 4, 8)] if decode else [(1, 64), (1, 1 << 30)]
        for cfg in sweep_configs(decode):
            for split, swap in variants:
                try:
                    fn = functools.partial(q4.int4_matmul, a=a, w=w, scales=s, zeros=z, c=c, config=cfg,
                                           split_k=split, swap_min_m=swap)  # fmt: skip
                    results.append((median_us(fn, SWEEP_TIMING)[0], cfg, split, cfg.block_m >= swap))
                except Exception as exc:  # noqa: BLE001 - a config that does not compile is a finding
                    print(f"  sweep M={m} N={n} K={k} {cfg} split {split} swap {swap}: {type(exc).__name__}: "
                          f"{str(exc).splitlines()[0][:120]}", flush=True)  # fmt: skip
        results.sort(key=lambda r: r[0])
        for t, cfg, split, swapped in results[:8]:
            print(f"sweep M={m:5d} N={n:5d} K={k:5d}: {t:8.2f} us  {cfg}  split={split} swap={swapped}", flush=True)
        rows += [
            {"M": m, "N": n, "K": k, "us": t, "config": str(cfg), "split": split, "swap": swapped}
            for t, cfg, split, swapped in results
        ]


# ------------------------------------------------------------------------------------------------ main


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for int4_probe.json")
    p.add_argument("--sweep", action="store_true", help="time explicit configs and split counts instead")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    props = torch.cuda.get_device_properties(0)
    out: dict = {
        "device": props.name,
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "checks": [],
        "timings": [],
        "errors": [],
    }
    print(f"{props.name}, {props.multi_processor_count} SMs, torch {out['torch']}, triton {out['triton']}", flush=True)
    try:
        if args.sweep:
            sweep(out)
        else:
            spec = load_spec("specs/int4_matmul.toml")
            for m, n, k, padded in CHECKS:
                for dtype_name in DTYPES:
                    try:
                        r = check(spec, m, n, k, dtype_name, padded)
                        out["checks"].append(r)
                        print(
                            f"check M={m} N={n} K={k}{' padded' if padded else ''} {dtype_name}: "
                            f"{'ok' if r['ok'] else 'FAIL'} max|err| "
                            f"{r['max_abs_err']:.3g}, {r['elements_differing']}/{r['numel']} elements differ, "
                            f"deterministic {r['deterministic']}, split {r['split_k']}, {r['config']}"
                            + ("" if r["ok"] else f"\n  {r['problem']}"),
                            flush=True,
                        )
                    except Exception as exc:  # noqa: BLE001
                        out["errors"].append(
                            {"case": f"check {m} {n} {k} {dtype_name}", "error": traceback.format_exc()}
                        )
                        print(f"check M={m} N={n} K={k} {dtype_name}: ERROR {type(exc).__name__}: {exc}", flush=True)
            print(
                f"{'M':>5} {'N':>6} {'K':>6} {'int4 us':>9} {'bf16 us':>9} {'speedup':>8} {'int4 GB/s':>10} "
                f"{'bf16 GB/s':>10} {'int4 TF/s':>10} {'bf16 TF/s':>10}  split config",
                flush=True,
            )
            for n, k in NKS:
                for m in MS:
                    try:
                        r = time_case(m, n, k)
                        out["timings"].append(r)
                        print(
                            f"{m:5d} {n:6d} {k:6d} {r['int4_us']:9.2f} {r['bf16_us']:9.2f} {r['speedup']:8.2f} "
                            f"{r['int4_GBps']:10.0f} {r['bf16_GBps']:10.0f} {r['int4_TFLOPs']:10.1f} "
                            f"{r['bf16_TFLOPs']:10.1f}  {r['split_k']} {r['config']}",
                            flush=True,
                        )
                    except Exception as exc:  # noqa: BLE001
                        out["errors"].append({"case": f"time {m} {n} {k}", "error": traceback.format_exc()})
                        print(f"time M={m} N={n} K={k}: ERROR {type(exc).__name__}: {exc}", flush=True)
    finally:
        out["wall_s"] = time.time() - t0
        with open(os.path.join(args.out, "int4_probe.json"), "w") as f:
            json.dump(out, f, indent=1)
    bad = [r for r in out["checks"] if not r["ok"] or not r["deterministic"]]
    print(
        f"done in {out['wall_s']:.0f} s: {len(out['checks']) - len(bad)}/{len(out['checks'])} checks ok, "
        f"{len(out['timings'])} timings, {len(out['errors'])} errors",
        flush=True,
    )
    return 1 if bad or out["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
