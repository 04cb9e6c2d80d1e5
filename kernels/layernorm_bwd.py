"""LayerNorm's backward (dx, dweight, dbias): the Triton kernel, its launcher and reference, and the
autograd.Function of the forward (kernels/layernorm.py) and this backward."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import Plans, no_launch, signature
from kernels.fastlaunch import FastLaunch
from kernels.layernorm import check_stats, forward_plan
from kernels.norm_autograd import NormLaunchers, NormPlans, PlannedFunction
from kernels.rmsnorm_bwd import (
    LAYERNORM_LIMITS,
    LAYERNORM_RECOMPUTE_LIMITS,
    NormBwdConfig,
    accumulator,
    add_to_partial,
    config_for,
    load_vector,
    load_x_dy,
    pdl_sum,
    row_chunk,
    store_dx,
    sum_partials_plan,
)

# Backward. With xhat = (x - mean) * rstd and g = dy * w:
#     dx = rstd * (g - mean(g) - xhat * mean(g * xhat))     (means over the row)
#     dw = sum over rows of dy * xhat,   db = sum over rows of dy
# Saved tensors: x, weight and the forward's mean and rstd (fp32 [tokens], as torch.native_layer_norm and Liger
# save them). Given them, a row's two sums, of g and g * xhat, wait for nothing; recomputing them (a caller of
# another forward passes x and weight alone) puts the mean's sum before the centred ones, in the pass that sums g
# and g * xhat anyway. dw and db are reduced in the same two deterministic stages as RMSNorm's dweight, with its
# launch configuration but LAYERNORM_LIMITS (each program writes one partial row of each).
#
# Measured on an H200 as kernels/rmsnorm_bwd.py says (bytes: x, dy, dx, w, dw and db once each; copy 4260 GB/s):
# 16384 x 4096 bf16 122.3 us, 3291 GB/s (77%); fp32 221.5 us, 3636 GB/s (85%); 32768 x 4096 bf16 229.7 us (82%).
# Four row sums against RMSNorm's two leave it short of RMSNorm's 83%. Since then (the harness's engine, L2
# flushed; reports/h200/experiments/backward/layernorm_probe*.log): dw and db summed in one launch and a row loop
# 5 stages deep, 16384 x 4096 bf16 from 119.0 us to 111.4 us; the forward's statistics took the first kernel
# from 105.9 us to 101.0 us (round 5). Rows longer than 4096 columns go blockwise and fall far short: 332 us
# (28%) at 4096 x 16384; 8192-column rows, kept in registers at 16 or 32 warps, ran 189-202 us (47-50%) at
# 8192 x 8192 but spilled, and the blockwise path they now take is not measured there.
#
# A row longer than one block is summed blockwise in its first pass, without ever forming sum(g * x) (which
# would cancel as E[x^2] - E[x]^2 does when |mean| >> std): each block's mean, centred sum of squares, sum of g
# and centred sum of g * x are merged into the running ones (Chan's update for the first two; for the last,
# C = C_old + C_block + delta * (n_old * G_block - n_block * G_old) / n re-centres both on the merged mean,
# delta being the block mean minus the old mean).


# a row count of 1 specialised (decode) made ptxas pick other, spilling register budgets
@triton.jit(do_not_specialize=["n_rows", "rows_per_program"])
def _layernorm_bwd_kernel(
    x_ptr, w_ptr, dy_ptr, dx_ptr, part_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, rows_per_program, stride_part,
    stride_xm, stride_xn, stride_w, stride_dym, stride_dyn, stride_dxm, stride_dxn, stride_mean, stride_rstd, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr, HAS_BIAS: tl.constexpr,
    ACC: tl.constexpr, STAGES: tl.constexpr, EVEN_N: tl.constexpr, HAS_STATS: tl.constexpr, TRIGGER: tl.constexpr,
):  # fmt: skip
    pid, row_start, row_end = row_chunk(rows_per_program, n_rows, TRIGGER)
    dw_row = part_ptr + pid * n_cols  # this program's partial row of dw; db's is stride_part further
    db_row = dw_row + stride_part
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    if SINGLE_PASS:
        w = load_vector(w_ptr, cols, stride_w, n_cols, ACC)
        acc_w = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
        acc_b = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
        for r0 in tl.range(row_start, row_end, BLOCK_M, num_stages=STAGES):
            rows = r0 + tl.arange(0, BLOCK_M)
            x, dy, mask = load_x_dy(x_ptr, dy_ptr, rows, cols, row_end, n_cols, stride_xm, stride_xn, stride_dym,
                                    stride_dyn, ACC, EVEN_N)
            g = dy * w
            mean_g = (tl.sum(g, axis=1) / n_cols)[:, None]
            if HAS_STATS:  # the forward's: two row sums, neither waiting for the other
                row_ok = rows < row_end
                mean = tl.load(mean_ptr + rows * stride_mean, mask=row_ok, other=0.0).to(ACC)[:, None]
                rstd = tl.load(rstd_ptr + rows * stride_rstd, mask=row_ok, other=0.0).to(ACC)[:, None]
                # centred before scaling: x * rstd - mean * rstd would lose |mean| * rstd * 2^-24 of each xhat
                xhat = x - mean
                if not EVEN_N:
                    xhat = tl.where(mask, xhat, 0.0)
                xhat = xhat * rstd
                mean_gxhat = (tl.sum(g * xhat, axis=1) / n_cols)[:, None]
                # not g * rstd - (xhat * c1 + mean_g * rstd): fused, g * rstd's rounding is left over where the
                # terms cancel (hidden = 1 on the H200: dx 1.3e-5 where it is 0)
                dx = (g - mean_g - xhat * mean_gxhat) * rstd
            else:
                xc = x - (tl.sum(x, axis=1) / n_cols)[:, None]
                if not EVEN_N:  # padding columns; with EVEN_N a row past the chunk is 0 and so is its mean
                    xc = tl.where(mask, xc, 0.0)
                # three row sums that wait for none of each other: mean(g * xhat) = rstd * mean(g * xc)
                rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)[:, None]
                mean_gxhat = (tl.sum(g * xc, axis=1) / n_cols)[:, None] * rstd
                xhat = xc * rstd
                dx = (g - mean_g - xhat * mean_gxhat) * rstd
            store_dx(dx_ptr, rows, cols, stride_dxm, stride_dxn, dx, mask)
            acc_w += dy * xhat
            if HAS_BIAS:
                acc_b += dy
        tl.store(dw_row + cols, tl.sum(acc_w, axis=0), mask=cols < n_cols)
        if HAS_BIAS:
            tl.store(db_row + cols, tl.sum(acc_b, axis=0), mask=cols < n_cols)
    else:
        for c0 in range(0, n_cols, BLOCK_N):
            zero_ok = c0 + cols < n_cols
            tl.store(dw_row + c0 + cols, tl.zeros([BLOCK_N], dtype=ACC), mask=zero_ok)
            if HAS_BIAS:
                tl.store(db_row + c0 + cols, tl.zeros([BLOCK_N], dtype=ACC), mask=zero_ok)
        n_blocks = tl.cdiv(n_cols, BLOCK_N)
        for r0 in range(row_start, row_end, BLOCK_M):
            rows = r0 + tl.arange(0, BLOCK_M)
            sum_g = tl.zeros([BLOCK_M], dtype=ACC)
            cross = tl.zeros([BLOCK_M], dtype=ACC)  # sum of g * (x - mean)
            if HAS_STATS:
                row_ok = rows < row_end
                mean = tl.load(mean_ptr + rows * stride_mean, mask=row_ok, other=0.0).to(ACC)
                rstd = tl.load(rstd_ptr + rows * stride_rstd, mask=row_ok, other=0.0).to(ACC)[:, None]
                for c0 in tl.range(0, n_cols, BLOCK_N, num_stages=STAGES):
                    c = c0 + cols
                    x, dy, mask = load_x_dy(x_ptr, dy_ptr, rows, c, row_end, n_cols, stride_xm, stride_xn,
                                            stride_dym, stride_dyn, ACC, False)
                    g = dy * load_vector(w_ptr, c, stride_w, n_cols, ACC)
                    sum_g += tl.sum(g, axis=1)
                    cross += tl.sum(g * tl.where(mask, x - mean[:, None], 0.0), axis=1)
            else:
                mean = tl.zeros([BLOCK_M], dtype=ACC)
                m2 = tl.zeros([BLOCK_M], dtype=ACC)  # sum of (x - mean)**2
                for c0 in tl.range(0, n_cols, BLOCK_N, num_stages=STAGES):
                    c = c0 + cols
                    x, dy, mask = load_x_dy(x_ptr, dy_ptr, rows, c, row_end, n_cols, stride_xm, stride_xn,
                                            stride_dym, stride_dyn, ACC, False)
                    g = dy * load_vector(w_ptr, c, stride_w, n_cols, ACC)
                    count = tl.sum((c < n_cols).to(ACC), axis=0)
                    block_mean = tl.sum(x, axis=1) / count
                    xc = tl.where(mask, x - block_mean[:, None], 0.0)
                    block_g = tl.sum(g, axis=1)
                    total = c0 + count
                    delta = block_mean - mean
                    cross += tl.sum(g * xc, axis=1) + delta * (c0 * block_g - count * sum_g) / total
                    mean += delta * (count / total)
                    m2 += tl.sum(xc * xc, axis=1) + delta * delta * (c0 * (count / total))
                    sum_g += block_g
                rstd = tl.rsqrt(m2 / n_cols + eps)[:, None]
            mean = mean[:, None]
            mean_g = (sum_g / n_cols)[:, None]
            mean_gxhat = (cross / n_cols)[:, None] * rstd
            # every thread's partial-row stores of the last iteration are visible before this one reads them
            tl.debug_barrier()
            for i in tl.range(0, n_blocks, num_stages=STAGES):
                c = (n_blocks - 1 - i) * BLOCK_N + cols
                x, dy, mask = load_x_dy(x_ptr, dy_ptr, rows, c, row_end, n_cols, stride_xm, stride_xn, stride_dym,
                                        stride_dyn, ACC, False)
                xhat = tl.where(mask, x - mean, 0.0) * rstd
                g = dy * load_vector(w_ptr, c, stride_w, n_cols, ACC)
                store_dx(dx_ptr, rows, c, stride_dxm, stride_dxn, (g - mean_g - xhat * mean_gxhat) * rstd, mask)
                add_to_partial(dw_row, c, n_cols, dy * xhat)
                if HAS_BIAS:
                    add_to_partial(db_row, c, n_cols, dy)


def _check_bwd_shapes(x, weight, grad_out, grad_x, grad_weight, grad_bias, has_bias) -> None:
    hidden = x.shape[-1] if x.dim() else -1
    shape = lambda t: None if t is None else tuple(t.shape)  # noqa: E731
    if (x.dim() != 2 or shape(weight) != (hidden,) or shape(grad_out) != x.shape or shape(grad_x) != x.shape
            or shape(grad_weight) != (hidden,) or (has_bias and shape(grad_bias) != (hidden,))):
        raise ValueError(
            f"layernorm_bwd: expected x, grad_out and grad_x [tokens, hidden], weight, grad_weight and grad_bias "
            f"[hidden]; got x {shape(x)}, weight {shape(weight)}, grad_out {shape(grad_out)}, grad_x "
            f"{shape(grad_x)}, grad_weight {shape(grad_weight)}, grad_bias {shape(grad_bias)}"
        )


_layernorm_bwd_launch = FastLaunch(_layernorm_bwd_kernel)


_BWD_PLANS = Plans()


def layernorm_bwd(*, x: torch.Tensor, weight: torch.Tensor, grad_out: torch.Tensor, grad_x: torch.Tensor,
                  grad_weight: torch.Tensor, grad_bias: torch.Tensor | None, eps: float, has_bias: bool,
                  config: NormBwdConfig | None = None, mean: torch.Tensor | None = None,
                  rstd: torch.Tensor | None = None) -> None:
    """Triton LayerNorm backward into grad_x, grad_weight and (when ``has_bias``) grad_bias; any strides on every
    tensor, grad_out's zero strides included. ``grad_bias`` is not written (and may be None) unless ``has_bias``,
    as the forward's bias is not read. ``mean`` and ``rstd``, the forward's statistics (:func:`layernorm`), are
    read where given, else recomputed from x. Deterministic. Planned per call signature (kernels.common.Plans),
    unless ``config`` is given."""
    sig = None if config is not None else (
        signature(x, weight, grad_out, grad_x, grad_weight, grad_bias, mean, rstd), bool(has_bias))
    _BWD_PLANS.run(sig, lambda: _bwd_plan(x, weight, grad_out, grad_x, grad_weight, grad_bias, has_bias, config,
                                          mean, rstd),
                   x, weight, grad_out, grad_x, grad_weight, grad_bias, mean, rstd, eps)


def _bwd_plan(x, weight, grad_out, grad_x, grad_weight, grad_bias, has_bias, config, mean, rstd):
    """Checks the operands and works out both launches for their signature: ``launch(x, weight, grad_out, grad_x,
    grad_weight, grad_bias, mean, rstd, eps)``."""
    _check_bwd_shapes(x, weight, grad_out, grad_x, grad_weight, grad_bias, has_bias)
    stats = check_stats(x, mean, rstd, "layernorm_bwd")
    has_bias = bool(has_bias)
    n_rows, n_cols = x.shape
    if n_rows == 0:
        def zero(x, weight, grad_out, grad_x, grad_weight, grad_bias, mean, rstd, eps):
            for grad in (grad_weight, grad_bias) if has_bias else (grad_weight,):
                grad.zero_()  # no rows: each is an empty sum
        return zero
    if n_cols == 0:
        return no_launch
    cfg = config_for(x, grad_out, config, "layernorm_bwd", LAYERNORM_LIMITS if stats else LAYERNORM_RECOMPUTE_LIMITS)
    acc_torch, acc_tl = accumulator(x)
    programs = cfg.programs(n_rows)
    shape = (2 if has_bias else 1, programs, n_cols)
    scalars = (n_rows, n_cols, cfg.rows_per_program, programs * n_cols,  # the partials' stride(0): new, contiguous
               x.stride(0), x.stride(1), weight.stride(0), grad_out.stride(0), grad_out.stride(1),
               grad_x.stride(0), grad_x.stride(1), mean.stride(0) if stats else 0, rstd.stride(0) if stats else 0)
    fast = _layernorm_bwd_launch.pinned(
        (programs,), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SINGLE_PASS=cfg.single_pass, HAS_BIAS=has_bias,
        ACC=acc_tl, STAGES=cfg.num_stages, EVEN_N=cfg.even(n_cols), HAS_STATS=stats, TRIGGER=pdl_sum(x),
        num_warps=cfg.num_warps,
    )  # fmt: skip
    grads = (grad_weight, grad_bias) if has_bias else (grad_weight,)
    total = sum_partials_plan(torch.empty(shape, dtype=acc_torch, device=x.device), grads)

    def launch(x, weight, grad_out, grad_x, grad_weight, grad_bias, mean, rstd, eps):
        partials = torch.empty(shape, dtype=acc_torch, device=x.device)
        fast(x, weight, grad_out, grad_x, partials, mean, rstd, *scalars, float(eps))
        total(partials, (grad_weight, grad_bias) if has_bias else (grad_weight,))
    return launch


def layernorm_bwd_ref(*, x: torch.Tensor, weight: torch.Tensor, grad_out: torch.Tensor, grad_x: torch.Tensor,
                      grad_weight: torch.Tensor, grad_bias: torch.Tensor | None, eps: float, has_bias: bool,
                      mean=None, rstd=None) -> None:
    """The closed form in plain torch, in fp32 or the inputs' precision if higher; the statistics recomputed
    from x at that precision (a forward's ``mean`` and ``rstd`` are taken and not read)."""
    acc = torch.promote_types(x.dtype, torch.float32)
    xf, dy = x.to(acc), grad_out.to(acc)
    xc = xf - xf.mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps)
    xhat = xc * rstd
    g = dy * weight.to(acc)
    grad_x.copy_(rstd * (g - g.mean(dim=-1, keepdim=True) - xhat * (g * xhat).mean(dim=-1, keepdim=True)))
    grad_weight.copy_((dy * xhat).sum(dim=0))
    if has_bias:
        grad_bias.copy_(dy.sum(dim=0))


_AUTOGRAD = NormPlans(NormLaunchers(
    forward=lambda rows, weight, bias, out, mean, rstd: forward_plan(rows, weight, bias, out, bias is not None, mean,
                                                                     rstd),
    backward=lambda rows, weight, grad_rows, grad_x, grad_w, grad_b, mean, rstd: _bwd_plan(
        rows, weight, grad_rows, grad_x, grad_w, grad_b, grad_b is not None, None, mean, rstd),
    bias=True, stats=True,
))


class LayerNormFunction(PlannedFunction):
    """LayerNorm over the last dimension of x (any leading dimensions), bias optional: the Triton forward and
    backward, planned per call signature (kernels/norm_autograd.py)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
        return _AUTOGRAD.forward(ctx, x, weight, bias, eps)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        return *_AUTOGRAD.backward(ctx, grad_out), None


def layernorm_autograd(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                       eps: float = 1e-5) -> torch.Tensor:
    """``LayerNormFunction.apply``: a differentiable LayerNorm, as F.layer_norm over the last dimension."""
    return LayerNormFunction.apply(x, weight, bias, eps)
