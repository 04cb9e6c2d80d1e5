"""Where the LayerNorm backward's time goes on the GPU, at the headline shape (16384 x 4096 bf16, bias).

Times, with the harness's engine (L2 flushed, kernel spans, medians): the whole ``layernorm_bwd``; its first
kernel alone; one partial sum; partial-sum launch configurations; one launch summing dw and db together; the
first kernel without the bias; a first kernel summing all four row sums in one phase about a shifted origin
(x[row, 0]), with its error against an fp64 reference on rows far from zero; RMSNorm's first kernel; a copy.

    python reports/h200/experiments/backward/layernorm_probe.py --out DIR [--ncu]

``--ncu`` runs each kernel once and stops (for ``ncu -k regex:...``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch
import triton
import triton.language as tl

from harness.timing.engine import TimingConfig, measure
from kernels.layernorm import LAYERNORM_LIMITS, _layernorm_bwd_kernel, layernorm_bwd, layernorm_bwd_ref
from kernels.rmsnorm_bwd import (
    _rmsnorm_bwd_kernel, _sum_partials_kernel, config_for, load_vector, load_x_dy, row_chunk, store_dx,
)


@triton.jit
def _sum_two_kernel(part_ptr, out0_ptr, out1_ptr, n_parts, n_cols, stride_k, stride_p, BLOCK_P: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    which = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    base = part_ptr + which.to(tl.int64) * stride_k
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for p0 in range(0, n_parts, BLOCK_P):
        p = (p0 + tl.arange(0, BLOCK_P)).to(tl.int64)
        acc += tl.load(base + p[:, None] * stride_p + cols[None, :], mask=(p < n_parts)[:, None] & col_ok[None, :],
                       other=0.0)
    total = tl.sum(acc, axis=0)
    if which == 0:
        tl.store(out0_ptr + cols, total.to(out0_ptr.dtype.element_ty), mask=col_ok)
    else:
        tl.store(out1_ptr + cols, total.to(out1_ptr.dtype.element_ty), mask=col_ok)


@triton.jit(do_not_specialize=["n_rows", "rows_per_program"])
def _ln_bwd_one_phase(
    x_ptr, w_ptr, dy_ptr, dx_ptr, part_ptr, n_rows, n_cols, rows_per_program, stride_part,
    stride_xm, stride_xn, stride_w, stride_dym, stride_dyn, stride_dxm, stride_dxn, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr, STAGES: tl.constexpr,
):  # fmt: skip
    pid, row_start, row_end = row_chunk(rows_per_program, n_rows)
    dw_row = part_ptr + pid * n_cols
    db_row = dw_row + stride_part
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    w = load_vector(w_ptr, cols, stride_w, n_cols, ACC)
    acc_w = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    acc_b = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
    for r0 in tl.range(row_start, row_end, BLOCK_M, num_stages=STAGES):
        rows = r0 + tl.arange(0, BLOCK_M)
        x, dy, mask = load_x_dy(x_ptr, dy_ptr, rows, cols, row_end, n_cols, stride_xm, stride_xn, stride_dym,
                                stride_dyn, ACC)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=4096)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    R, N = args.tokens, args.hidden
    x = torch.randn(R, N, device=dev, dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    w = torch.randn(N, device=dev, dtype=torch.bfloat16)
    gx, gw, gb = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
    cfg = config_for(x, dy, None, "probe", LAYERNORM_LIMITS)
    programs = cfg.programs(R)
    part = torch.empty((2, programs, N), device=dev, dtype=torch.float32)
    grid = (programs,)
    common = (x, w, dy, gx, part, R, N, cfg.rows_per_program, part.stride(0), x.stride(0), x.stride(1),
              w.stride(0), dy.stride(0), dy.stride(1), gx.stride(0), gx.stride(1), 1e-5)

    def first(has_bias=True):
        return lambda: _layernorm_bwd_kernel[grid](*common, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                                                   SINGLE_PASS=cfg.single_pass, HAS_BIAS=has_bias, ACC=tl.float32,
                                                   STAGES=cfg.num_stages, num_warps=cfg.num_warps)

    def one_phase(warps=cfg.num_warps, stages=cfg.num_stages):
        return lambda: _ln_bwd_one_phase[grid](*common, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, ACC=tl.float32,
                                               STAGES=stages, num_warps=warps)

    def sum_one(bn, bp, warps):
        return lambda: _sum_partials_kernel[(triton.cdiv(N, bn),)](part[0], gw, programs, N, part.stride(1),
                                                                 gw.stride(0), BLOCK_P=bp, BLOCK_N=bn,
                                                                 num_warps=warps)

    def sum_two(bn, bp, warps):
        return lambda: _sum_two_kernel[(triton.cdiv(N, bn), 2)](part, gw, gb, programs, N, part.stride(0),
                                                              part.stride(1), BLOCK_P=bp, BLOCK_N=bn,
                                                              num_warps=warps)

    rms_part = torch.empty((programs, N), device=dev, dtype=torch.float32)
    rms = lambda: _rmsnorm_bwd_kernel[grid](x, w, dy, gx, rms_part, R, N, cfg.rows_per_program, x.stride(0),  # noqa
                                            x.stride(1), w.stride(0), dy.stride(0), dy.stride(1), gx.stride(0),
                                            gx.stride(1), 1e-5, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                                            SINGLE_PASS=cfg.single_pass, ACC=tl.float32, STAGES=cfg.num_stages,
                                            num_warps=cfg.num_warps)
    src = torch.empty(R * N, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    cases = {
        "copy (x bytes, read + write)": lambda: dst.copy_(src),
        "layernorm_bwd (shipped)": lambda: layernorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw,
                                                         grad_bias=gb, eps=1e-5, has_bias=True),
        "first kernel": first(),
        "first kernel, no bias": first(False),
        "rmsnorm first kernel": rms,
        "one-phase first kernel": one_phase(),
        "one-phase, 16 warps": one_phase(16),
        "one-phase, 4 warps": one_phase(4),
        "one-phase, 2 stages": one_phase(stages=2),
    }
    for bn, bp, warps in [(32, 64, 4), (64, 64, 4), (32, 128, 4), (32, 256, 8), (64, 128, 8), (128, 32, 4),
                          (16, 64, 2), (16, 256, 4), (64, 32, 2)]:
        cases[f"sum one, BN={bn} BP={bp} w={warps}"] = sum_one(bn, bp, warps)
        cases[f"sum two, BN={bn} BP={bp} w={warps}"] = sum_two(bn, bp, warps)
    print(f"config {cfg}, programs {programs}", flush=True)
    if args.ncu:
        for name in ("first kernel", "one-phase first kernel", "rmsnorm first kernel"):
            cases[name]()
        torch.cuda.synchronize()
        return
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
    # accuracy of the one-phase sums, rows offset far from zero (|mean| >> std) and rows of unit scale
    ref_x = torch.empty(R, N, device=dev, dtype=torch.float64)
    for label, offset in (("unit rows", 0.0), ("rows at 1e3 + N(0, 1)", 1e3), ("rows at 1e2 + N(0, 1)", 1e2)):
        xx = (torch.randn(R, N, device=dev) + offset).to(torch.bfloat16)
        ref_gx = torch.empty_like(ref_x)
        ref_gw, ref_gb = torch.empty(N, device=dev, dtype=torch.float64), torch.empty(N, device=dev,
                                                                                        dtype=torch.float64)
        layernorm_bwd_ref(x=xx.double(), weight=w.double(), grad_out=dy.double(), grad_x=ref_gx, grad_weight=ref_gw,
                          grad_bias=ref_gb, eps=1e-5, has_bias=True)
        for kname, launch in (("shipped", _layernorm_bwd_kernel), ("one-phase", _ln_bwd_one_phase)):
            extra = dict(SINGLE_PASS=cfg.single_pass, HAS_BIAS=True) if kname == "shipped" else {}
            launch[grid](xx, *common[1:], BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, ACC=tl.float32,
                         STAGES=cfg.num_stages, num_warps=cfg.num_warps, **extra)
            err = ((gx.double() - ref_gx).norm() / ref_gx.norm()).item()
            dw = part[0].sum(0).double()
            errw = ((dw - ref_gw).norm() / ref_gw.norm()).item()
            rows.append(dict(name=f"accuracy {kname}, {label}", dx_rel_err=err, dw_rel_err=errw))
            print(f"accuracy {kname:9s} {label:24s} dx normwise rel err {err:.3e}, dw {errw:.3e}", flush=True)
    (args.out / "layernorm_probe.json").write_text(json.dumps(dict(config=str(cfg), programs=programs,
                                                                   device=torch.cuda.get_device_name(),
                                                                   triton=triton.__version__, rows=rows), indent=1))


if __name__ == "__main__":
    main()
