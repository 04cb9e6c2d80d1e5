"""Where the LayerNorm backward's time goes on the GPU, at the headline shape (16384 x 4096 bf16, bias).

Times, with the harness's engine (L2 flushed, medians): the whole ``layernorm_bwd`` and ``rmsnorm_bwd``; the
first kernels alone, with and without their column masks (``EVEN_N``), at more pipeline stages, without the
bias; partial-sum launch configurations for one gradient and for two in one launch; a first kernel summing all
four row sums in one phase about a shifted origin (x[row, 0]), with its error against an fp64 reference on rows
far from zero; a copy of x's bytes.

Round 1 (reports/h200/experiments/backward/layernorm_probe-round1.log) ran this script's first revision: one
partial-sum launch per gradient, and no ``EVEN_N``.

    python reports/h200/experiments/backward/layernorm_probe.py --out DIR [--ncu]

``--ncu`` runs each kernel once and stops (for ``ncu -k regex:...``).
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
from pathlib import Path

import torch
import triton
import triton.language as tl

from harness.timing.engine import TimingConfig, measure
import kernels.rmsnorm_bwd as rmsnorm_bwd_module
from kernels.layernorm import _layernorm_bwd_kernel, layernorm, layernorm_bwd, layernorm_bwd_ref
from kernels.rmsnorm_bwd import (
    LAYERNORM_RECOMPUTE_LIMITS,
    NormBwdConfig,
    _rmsnorm_bwd_kernel,
    _sum_partials_kernel,
    config_for,
    load_vector,
    load_x_dy,
    rmsnorm_bwd,
    row_chunk,
    store_dx,
)


@triton.jit(do_not_specialize=["n_rows", "rows_per_program"])
def _ln_bwd_one_phase(
    x_ptr, w_ptr, dy_ptr, dx_ptr, part_ptr, n_rows, n_cols, rows_per_program, stride_part,
    stride_xm, stride_xn, stride_w, stride_dym, stride_dyn, stride_dxm, stride_dxn, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr, STAGES: tl.constexpr,
):  # fmt: skip
    pid, row_start, row_end = row_chunk(rows_per_program, n_rows, False)
    dw_row = part_ptr + pid * n_cols
    db_row = dw_row + stride_part
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    w = load_vector(w_ptr, cols, stride_w, n_cols, ACC)
    acc_w = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    acc_b = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    for r0 in tl.range(row_start, row_end, BLOCK_M, num_stages=STAGES):
        rows = r0 + tl.arange(0, BLOCK_M)
        x, dy, mask = load_x_dy(x_ptr, dy_ptr, rows, cols, row_end, n_cols, stride_xm, stride_xn, stride_dym,
                                stride_dyn, ACC, False)
        shift = tl.load(x_ptr + rows * stride_xm, mask=rows < row_end, other=0.0).to(ACC)[:, None]
        xs = tl.where(mask, x - shift, 0.0)
        g = dy * w
        s1 = tl.sum(xs, axis=1)[:, None] / n_cols
        s2 = tl.sum(xs * xs, axis=1)[:, None] / n_cols
        mean_g = tl.sum(g, axis=1)[:, None] / n_cols
        c = tl.sum(g * xs, axis=1)[:, None] / n_cols
        rstd = tl.rsqrt(tl.maximum(s2 - s1 * s1, 0.0) + eps)
        mean_gxhat = (c - s1 * mean_g) * rstd
        xhat = (xs - s1) * rstd
        store_dx(dx_ptr, rows, cols, stride_dxm, stride_dxn, (g - mean_g - xhat * mean_gxhat) * rstd, mask)
        acc_w += dy * xhat
        acc_b += dy
    tl.store(dw_row + cols, tl.sum(acc_w, axis=0), mask=cols < n_cols)
    tl.store(db_row + cols, tl.sum(acc_b, axis=0), mask=cols < n_cols)


@triton.jit
def _ln_fwd_variant(x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, rstd_ptr, n_cols, eps, BLOCK_N: tl.constexpr,
                    MODE: tl.constexpr):
    """The shipped forward's one-row, one-pass path (contiguous, exact rows), its statistics stored as MODE says:
    0 none, 1 mean and rstd (as shipped), 2 the mean alone, 3 both in one 8-byte store, 4 both as 0-d scalars."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row.to(tl.int64) * n_cols + cols).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = x - mean
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=0) / n_cols + eps)
    y = xc * rstd * tl.load(w_ptr + cols).to(tl.float32) + tl.load(b_ptr + cols).to(tl.float32)
    tl.store(out_ptr + row.to(tl.int64) * n_cols + cols, y.to(out_ptr.dtype.element_ty))
    if MODE == 1:
        r = row + tl.arange(0, 1)
        tl.store(mean_ptr + r, tl.full([1], 0, tl.float32) + mean)
        tl.store(rstd_ptr + r, tl.full([1], 0, tl.float32) + rstd)
    elif MODE == 2:
        tl.store(mean_ptr + row, mean)
    elif MODE == 3:
        two = tl.arange(0, 2)
        tl.store(mean_ptr + 2 * row + two, tl.where(two == 0, mean, rstd))
    elif MODE == 4:
        tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--cases", default="", help="a regular expression: time only the cases it finds")
    ap.add_argument("--no-accuracy", action="store_true", help="skip the one-phase sums' accuracy rows")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    R, N = args.tokens, args.hidden
    x = torch.randn(R, N, device=dev, dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    w = torch.randn(N, device=dev, dtype=torch.bfloat16)
    gx, gw, gb = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
    cfg = config_for(x, dy, None, "probe", LAYERNORM_RECOMPUTE_LIMITS)  # the rounds before the forward's stats
    programs = cfg.programs(R)
    part = torch.empty((2, programs, N), device=dev, dtype=torch.float32)
    grid = (programs,)
    common = (x, w, dy, gx, part, R, N, cfg.rows_per_program, part.stride(0), x.stride(0), x.stride(1),
              w.stride(0), dy.stride(0), dy.stride(1), gx.stride(0), gx.stride(1), 1e-5)
    # the forward's statistics, for the shipped kernel's HAS_STATS path (round 4)
    mean, rstd = torch.empty(R, device=dev), torch.empty(R, device=dev)
    layernorm(x=x, weight=w, bias=w, out=torch.empty_like(x), eps=1e-5, has_bias=True, mean=mean, rstd=rstd)
    shipped = (x, w, dy, gx, part, mean, rstd, R, N, cfg.rows_per_program, part.stride(0), x.stride(0), x.stride(1),
               w.stride(0), dy.stride(0), dy.stride(1), gx.stride(0), gx.stride(1), 1, 1, 1e-5)

    even = cfg.even(N)

    def first(has_bias=True, even=even, stages=cfg.num_stages, stats=False):
        return lambda: _layernorm_bwd_kernel[grid](*shipped, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                                                   SINGLE_PASS=cfg.single_pass, HAS_BIAS=has_bias, ACC=tl.float32,
                                                   STAGES=stages, EVEN_N=even, HAS_STATS=stats,
                                                   TRIGGER=False, num_warps=cfg.num_warps)

    sms = torch.cuda.get_device_properties(dev).multi_processor_count

    def per_sm(block_m, warps, stages, stats, programs_per_sm=1):
        """layernorm_bwd with one (or more) persistent programs per SM of ``block_m`` rows per iteration."""
        rpp = triton.cdiv(triton.cdiv(R, sms * programs_per_sm), block_m) * block_m
        c = NormBwdConfig(block_m=block_m, block_n=cfg.block_n, num_warps=warps, single_pass=True,
                          rows_per_program=rpp, num_stages=stages)
        kw = dict(mean=mean, rstd=rstd) if stats else {}
        return lambda: layernorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, grad_bias=gb, eps=1e-5,
                                     has_bias=True, config=c, **kw)

    fwd_out = torch.empty_like(x)
    def fwd(stats):
        kw = dict(mean=mean, rstd=rstd) if stats else {}
        return lambda: layernorm(x=x, weight=w, bias=w, out=fwd_out, eps=1e-5, has_bias=True, **kw)

    def one_phase(warps=cfg.num_warps, stages=cfg.num_stages):
        return lambda: _ln_bwd_one_phase[grid](*common, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, ACC=tl.float32,
                                               STAGES=stages, num_warps=warps)

    def sum_one(bn, bp, warps, k=1):
        return lambda: _sum_partials_kernel[(triton.cdiv(N, bn), k)](part, gw, gb, programs, N, part.stride(0),
                                                                   part.stride(1), 1, 1, BLOCK_P=bp, BLOCK_N=bn,
                                                                   WAIT=False, num_warps=warps)

    rms_part = torch.empty((programs, N), device=dev, dtype=torch.float32)
    def rms(even=even, stages=cfg.num_stages):
        return lambda: _rmsnorm_bwd_kernel[grid](x, w, dy, gx, rms_part, R, N, cfg.rows_per_program, x.stride(0),
                                                 x.stride(1), w.stride(0), dy.stride(0), dy.stride(1), gx.stride(0),
                                                 gx.stride(1), 1e-5, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                                                 SINGLE_PASS=cfg.single_pass, ACC=tl.float32, STAGES=stages,
                                                 EVEN_N=even, TRIGGER=False, num_warps=cfg.num_warps)
    src = torch.empty(R * N, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    cases = {
        "copy (x bytes, read + write)": lambda: dst.copy_(src),
        "layernorm_bwd (shipped)": lambda: layernorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw,
                                                         grad_bias=gb, eps=1e-5, has_bias=True),
        "rmsnorm_bwd (shipped)": lambda: rmsnorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw,
                                                     eps=1e-5),
        "first kernel": first(),
        "first kernel, column masks": first(even=False),
        "first kernel, 3 stages": first(stages=3),
        "first kernel, 4 stages": first(stages=4),
        "first kernel, 5 stages": first(stages=5),
        "first kernel, 6 stages": first(stages=6),
        "first kernel, 7 stages": first(stages=7),
        "first kernel, no bias": first(False),
        "rmsnorm first kernel": rms(),
        "rmsnorm first kernel, column masks": rms(False),
        "rmsnorm first kernel, 4 stages": rms(stages=4),
        "rmsnorm first kernel, 5 stages": rms(stages=5),
        "rmsnorm first kernel, 6 stages": rms(stages=6),
        "one-phase first kernel": one_phase(),
        "layernorm_bwd (shipped), stats": lambda: layernorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx,
                                                                grad_weight=gw, grad_bias=gb, eps=1e-5,
                                                                has_bias=True, mean=mean, rstd=rstd),
        "first kernel, stats, 2 stages": first(stages=2, stats=True),
        "first kernel, stats, 3 stages": first(stages=3, stats=True),
        "first kernel, stats, 4 stages": first(stages=4, stats=True),
        "first kernel, stats, 5 stages": first(stages=5, stats=True),
        "first kernel, stats, 6 stages": first(stages=6, stats=True),
        "layernorm forward": fwd(False),
        "layernorm forward, stats": fwd(True),
    }
    pair = torch.empty(2 * R, device=dev)
    for mode, label in enumerate(("none", "mean and rstd, [1] stores", "mean alone", "one 8-byte store",
                                  "mean and rstd, scalar stores")):
        cases[f"forward variant, {label}"] = functools.partial(
            lambda m: _ln_fwd_variant[(R,)](x, w, w, fwd_out, pair if m == 3 else mean, rstd, N, 1e-5, BLOCK_N=N,
                                            MODE=m, num_warps=8), mode)
    for bm, warps in ((2, 16), (1, 8)):
        for stages in (2, 3, 4):
            for stats in (False, True):
                cases[f"1 program/SM, {bm} row(s) x {warps} warps, {stages} stages{', stats' if stats else ''}"] = \
                    per_sm(bm, warps, stages, stats)
    # round 8: two rows a program, as the forward's fastest launch (reports/h200/experiments/layernorm_fwd/)
    for bm, warps in ((2, 8), (2, 16), (1, 8), (2, 4)):
        for stages in (2, 3, 4):
            cases[f"2 programs/SM, {bm} row(s) x {warps} warps, {stages} stages, stats"] = \
                per_sm(bm, warps, stages, True, programs_per_sm=2)
    # round 9: the partial sum as a programmatic dependent launch of the first kernel (the shipped default where
    # the GPU has it), against two plain launches
    def without_pdl(fn):
        def run():
            rmsnorm_bwd_module.PDL_SUM = False
            try:
                fn()
            finally:
                rmsnorm_bwd_module.PDL_SUM = True
        return run

    for name in ("layernorm_bwd (shipped), stats", "layernorm_bwd (shipped)", "rmsnorm_bwd (shipped)"):
        cases[f"{name}, no PDL"] = without_pdl(cases[name])
    for bn, bp, warps in [(32, 64, 4), (16, 256, 4), (16, 512, 4), (32, 256, 8), (16, 128, 4), (8, 256, 2),
                          (32, 512, 8), (8, 512, 4)]:
        cases[f"sum one, BN={bn} BP={bp} w={warps}"] = sum_one(bn, bp, warps)
        cases[f"sum two, BN={bn} BP={bp} w={warps}"] = sum_one(bn, bp, warps, k=2)
    print(f"config {cfg}, programs {programs}", flush=True)
    if args.ncu:
        for name in ("first kernel", "first kernel, column masks", "rmsnorm first kernel"):
            cases[name]()
        torch.cuda.synchronize()
        return
    if args.cases:
        cases = {name: fn for name, fn in cases.items() if re.search(args.cases, name)}
    rows = []
    tcfg = TimingConfig(timeout_s=4.0, min_time_s=0.3)
    for name, fn in cases.items():
        try:
            m = measure(fn, device=dev, config=tcfg)
        except Exception as exc:  # a config that does not compile is a finding, not the end of the probe
            print(f"{name:40s} FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        med = statistics.median(m.samples_us)
        q = statistics.quantiles(m.samples_us, n=10) if len(m.samples_us) > 2 else [med] * 9
        rows.append(dict(name=name, median_us=med, p10_us=q[0], p90_us=q[-1], samples=len(m.samples_us),
                         method=m.method))
        print(f"{name:40s} {med:9.2f} us  (p10 {q[0]:.2f}, p90 {q[-1]:.2f}, n={len(m.samples_us)}, {m.method})",
              flush=True)
    if not args.no_accuracy:
        accuracy(args, cfg, grid, common, x, dy, w, gx, part, even, rows)
    (args.out / "layernorm_probe.json").write_text(json.dumps(dict(config=str(cfg), programs=programs,
                                                                   device=torch.cuda.get_device_name(),
                                                                   triton=triton.__version__, rows=rows), indent=1))


def accuracy(args, cfg, grid, common, x, dy, w, gx, part, even, rows) -> None:
    R, N, dev = x.shape[0], x.shape[1], x.device
    # accuracy, rows offset far from zero (|mean| >> std) and rows of unit scale: the shipped backward with
    # the statistics recomputed and with the forward's, and the one-phase sums
    ref_x = torch.empty(R, N, device=dev, dtype=torch.float64)
    gw, gb = torch.empty_like(w), torch.empty_like(w)
    mean, rstd = torch.empty(R, device=dev), torch.empty(R, device=dev)
    for label, offset in (("unit rows", 0.0), ("rows at 1e3 + N(0, 1)", 1e3), ("rows at 1e2 + N(0, 1)", 1e2)):
        xx = (torch.randn(R, N, device=dev) + offset).to(torch.bfloat16)
        ref_gx = torch.empty_like(ref_x)
        ref_gw, ref_gb = torch.empty(N, device=dev, dtype=torch.float64), torch.empty(N, device=dev,
                                                                                        dtype=torch.float64)
        layernorm_bwd_ref(x=xx.double(), weight=w.double(), grad_out=dy.double(), grad_x=ref_gx, grad_weight=ref_gw,
                          grad_bias=ref_gb, eps=1e-5, has_bias=True)
        layernorm(x=xx, weight=w, bias=w, out=torch.empty_like(xx), eps=1e-5, has_bias=True, mean=mean, rstd=rstd)
        for kname in ("shipped", "shipped, stats", "one-phase"):
            if kname == "one-phase":
                _ln_bwd_one_phase[grid](xx, *common[1:], BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, ACC=tl.float32,
                                        STAGES=cfg.num_stages, num_warps=cfg.num_warps)
                dw = part[0].sum(0).double()
            else:
                kw = dict(mean=mean, rstd=rstd) if kname.endswith("stats") else {}
                layernorm_bwd(x=xx, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, grad_bias=gb, eps=1e-5,
                              has_bias=True, **kw)
                dw = gw.double()
            err = ((gx.double() - ref_gx).norm() / ref_gx.norm()).item()
            errw = ((dw - ref_gw).norm() / ref_gw.norm()).item()
            rows.append(dict(name=f"accuracy {kname}, {label}", dx_rel_err=err, dw_rel_err=errw))
            print(f"accuracy {kname:14s} {label:24s} dx normwise rel err {err:.3e}, dw {errw:.3e}", flush=True)


if __name__ == "__main__":
    main()
