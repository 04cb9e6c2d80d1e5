"""LayerNorm over the last dimension: Triton kernel, torch reference and F.layer_norm as a peer; the backward
(dx, dweight, dbias), its reference and an autograd.Function (below the forward).

``out = (x - mean) * rsqrt(var + eps) * weight (+ bias)`` with x ``[tokens, hidden]``, weight and bias
``[hidden]``; the biased variance, as torch.nn.LayerNorm. Statistics in fp32, one rounding of the output.

Bias is optional as in F.layer_norm: the ``has_bias`` param says whether it is used; without it ``bias`` (and
the backward's ``grad_bias``) may be None and is never read or written.

Variance is never ``E[x^2] - E[x]^2``, which cancels catastrophically when |mean| >> std. A row that fits
one block is centred in registers before it is squared (an exact two-pass); a longer row is read in
blocks, each block's mean and centred sum of squares computed the same way and merged into the running
ones with Chan's parallel Welford update, then read again to normalise.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import torch
import triton
import triton.language as tl

from kernels.common import (
    Plans,
    cdiv,
    interpreted,
    needs_bf16_rounding,
    next_power_of_2,
    no_launch,
    round_to_bf16,
    signature,
)
from kernels.fastlaunch import FastLaunch

# Same problem shape as RMSNorm (a row reduction, then a row-wise scale), so RMSNorm's launch heuristic where
# _ONE_PASS (below) has no measured entry: rows packed per program while many remain, one row in registers up to
# 8192 columns, blocks beyond.
from kernels.rmsnorm import _MIN_PROGRAMS, RMSNormConfig
from kernels.rmsnorm_bwd import (
    LAYERNORM_LIMITS,
    LAYERNORM_RECOMPUTE_LIMITS,
    NormBwdConfig,
    accumulator,
    add_to_partial,
    config_for,
    load_vector,
    load_x_dy,
    norm_backward,
    norm_forward,
    pdl_sum,
    row_chunk,
    store_dx,
    sum_partials_plan,
)


@triton.jit
def _layernorm_kernel(
    x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, rstd_ptr, n_rows, n_cols,
    stride_xm, stride_xn, stride_w, stride_b, stride_om, stride_on, stride_mean, stride_rstd, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr, HAS_BIAS: tl.constexpr,
    RNE_BF16: tl.constexpr, STATS: tl.constexpr, EVEN: tl.constexpr,
):  # fmt: skip
    # int64 offsets: rows * row stride passes 2**31 in the huge tier, and so can columns * column stride of
    # a column-major x
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = (rows < n_rows)[:, None]
    x_rows = x_ptr + rows[:, None] * stride_xm
    o_rows = out_ptr + rows[:, None] * stride_om
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    if SINGLE_PASS:
        # EVEN (whole blocks of rows exactly one block wide) drops every mask, as the probe's fastest variants had
        # none (reports/h200/experiments/layernorm_fwd/; the masks' cost alone was not measured)
        if EVEN:
            mask, col_mask, row_mask, other = None, None, None, None
        else:
            col_mask = cols < n_cols
            row_mask = rows < n_rows
            mask, other = row_ok & col_mask[None, :], 0.0
        x = tl.load(x_rows + cols[None, :] * stride_xn, mask=mask, other=other).to(tl.float32)
        mean = tl.sum(x, axis=1) / n_cols
        xc = x - mean[:, None]
        if not EVEN:
            xc = tl.where(mask, xc, 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
        # weight and bias loaded after the sums, so that their registers are not held across them (loaded before,
        # 16384-column rows with the statistics ran 106.9 us against 70.5 us: probe rounds 4 and 5)
        y = xc * rstd[:, None] * tl.load(w_ptr + cols * stride_w, mask=col_mask, other=other).to(tl.float32)[None, :]
        if HAS_BIAS:
            y += tl.load(b_ptr + cols * stride_b, mask=col_mask, other=other).to(tl.float32)[None, :]
        if RNE_BF16:
            y = round_to_bf16(y)
        tl.store(o_rows + cols[None, :] * stride_on, y.to(out_ptr.dtype.element_ty), mask=mask)
        if STATS:  # after the row's stores, off the path from its loads to them
            tl.store(mean_ptr + rows * stride_mean, mean, mask=row_mask)
            tl.store(rstd_ptr + rows * stride_rstd, rstd, mask=row_mask)
    else:
        mean = tl.zeros([BLOCK_M], dtype=tl.float32)
        m2 = tl.zeros([BLOCK_M], dtype=tl.float32)  # sum of squared deviations from mean
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            mask = row_ok & col_ok[None, :]
            x = tl.load(x_rows + c[None, :] * stride_xn, mask=mask, other=0.0).to(tl.float32)
            count = tl.sum(col_ok.to(tl.float32), axis=0)  # this block's columns, counted exactly
            block_mean = tl.sum(x, axis=1) / count
            xc = tl.where(mask, x - block_mean[:, None], 0.0)
            # Chan et al.: merge (start columns, mean, m2) with (count, block_mean, block m2)
            total = start + count
            delta = block_mean - mean
            mean += delta * (count / total)
            m2 += tl.sum(xc * xc, axis=1) + delta * delta * (start * (count / total))
        if STATS:
            tl.store(mean_ptr + rows * stride_mean, mean, mask=rows < n_rows)
            tl.store(rstd_ptr + rows * stride_rstd, tl.rsqrt(m2 / n_cols + eps), mask=rows < n_rows)
        rstd = tl.rsqrt(m2 / n_cols + eps)[:, None]
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            mask = row_ok & col_ok[None, :]
            x = tl.load(x_rows + c[None, :] * stride_xn, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c * stride_w, mask=col_ok, other=0.0).to(tl.float32)
            y = (x - mean[:, None]) * rstd * w[None, :]
            if HAS_BIAS:
                y += tl.load(b_ptr + c * stride_b, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            if RNE_BF16:
                y = round_to_bf16(y)
            tl.store(o_rows + c[None, :] * stride_on, y.to(out_ptr.dtype.element_ty), mask=mask)


# One-pass launches by row length (a power of two): rows per program and warps, the fastest of the probe's
# variants on an H200 (reports/h200/experiments/layernorm_fwd/, rounds 1-3, bf16 with the statistics stored).
# RMSNorm's rule, 16 elements a thread, leaves LayerNorm's second row sum (it waits for the first) exposed: 66.4 us
# at 16384 x 4096 against a copy's 62.0. About 32 a thread, and two rows a program up to 4096 columns, took it to
# 64.4 us. Rows up to 32768 columns take one pass (16384: 72.0 us, against 106.6 us read twice blockwise).
_ONE_PASS = {256: (16, 4), 512: (4, 2), 1024: (2, 4), 2048: (2, 4), 4096: (2, 8), 8192: (1, 8), 16384: (1, 8),
             32768: (1, 32)}


@functools.lru_cache(maxsize=256)
def forward_config(n_rows: int, n_cols: int, interpreted: bool = False) -> RMSNormConfig:
    """RMSNorm's launch rule, but _ONE_PASS's where a row length is listed and enough rows remain to fill the GPU
    with it (decode-sized batches keep RMSNorm's, which spreads a row over more threads)."""
    cfg = RMSNormConfig.for_shape(n_rows, n_cols, interpreted)
    block_n = max(next_power_of_2(n_cols), 16)
    tuned = _ONE_PASS.get(block_n)
    if interpreted or tuned is None or n_rows < tuned[0] * _MIN_PROGRAMS:
        return cfg
    return replace(cfg, block_m=tuned[0], block_n=block_n, num_warps=tuned[1], single_pass=True)


def _check_shapes(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
                  has_bias: bool) -> None:
    hidden = x.shape[-1] if x.dim() else -1
    bias_shape = None if bias is None else tuple(bias.shape)
    if x.dim() != 2 or weight.shape != (hidden,) or out.shape != x.shape or (has_bias and bias_shape != (hidden,)):
        raise ValueError(
            f"layernorm: expected x [tokens, hidden], weight and bias [hidden], out like x; got x "
            f"{tuple(x.shape)}, weight {tuple(weight.shape)}, bias {bias_shape}, out {tuple(out.shape)}"
        )


_layernorm_launch = FastLaunch(_layernorm_kernel)


_PLANS = Plans()


def layernorm(*, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor, eps: float,
              has_bias: bool, mean: torch.Tensor | None = None, rstd: torch.Tensor | None = None) -> None:
    """Triton LayerNorm; any strides on x, weight, bias and out. ``bias`` is not read (and may be None) unless
    ``has_bias``. Given ``mean`` and ``rstd`` (fp32 ``[tokens]``, any stride), it writes each row's statistics
    there too, for :func:`layernorm_bwd`."""
    sig = (signature(x, weight, bias, out, mean, rstd), bool(has_bias))
    _PLANS.run(sig, lambda: _plan(x, weight, bias, out, has_bias, mean, rstd), x, weight, bias, out, mean, rstd, eps)


def _empty_stats(x, weight, bias, out, mean, rstd, eps) -> None:
    mean.fill_(float("nan"))  # an empty row's mean and variance: 0 / 0, as torch's
    rstd.fill_(float("nan"))


def _plan(x, weight, bias, out, has_bias, mean, rstd):
    """Checks the operands and works out the launch :func:`layernorm` makes for their signature (kernels.common.
    Plans): ``launch(x, weight, bias, out, mean, rstd, eps)``."""
    _check_shapes(x, weight, bias, out, has_bias)
    stats = _check_stats(x, mean, rstd, "layernorm")
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return _empty_stats if stats else no_launch
    cfg = forward_config(n_rows, n_cols, interpreted(x))
    grid = (cdiv(n_rows, cfg.block_m),)
    scalars = (n_rows, n_cols, x.stride(0), x.stride(1), weight.stride(0), bias.stride(0) if has_bias else 0,
               out.stride(0), out.stride(1), mean.stride(0) if stats else 0, rstd.stride(0) if stats else 0)
    kwargs = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SINGLE_PASS=cfg.single_pass, HAS_BIAS=bool(has_bias),
                  RNE_BF16=needs_bf16_rounding(out), STATS=stats,
                  EVEN=cfg.single_pass and n_cols == cfg.block_n and n_rows % cfg.block_m == 0,
                  num_warps=cfg.num_warps)  # fmt: skip

    fast = _layernorm_launch.pinned(grid, **kwargs)  # the signature fixes every key part but eps, a float

    def launch(x, weight, bias, out, mean, rstd, eps):
        fast(x, weight, bias, out, mean, rstd, *scalars, float(eps))
    return launch


def _check_stats(x: torch.Tensor, mean: torch.Tensor | None, rstd: torch.Tensor | None, who: str) -> bool:
    """Whether both statistics are given, each a ``[tokens]`` tensor of x's accumulation type."""
    if mean is None and rstd is None:
        return False
    want = torch.float64 if x.dtype == torch.float64 else torch.float32
    for name, t in (("mean", mean), ("rstd", rstd)):
        if t is None or t.shape != x.shape[:1] or t.dtype != want:
            got = "None" if t is None else f"{tuple(t.shape)} {t.dtype}"
            raise ValueError(f"{who}: expected {name} [{x.shape[0]}] {want} (mean and rstd together), got {got}")
    return True


def layernorm_ref(*, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor, eps: float,
                  has_bias: bool, mean: torch.Tensor | None = None, rstd: torch.Tensor | None = None) -> None:
    """Plain torch, in fp32 or the inputs' precision if higher: the variance never as E[x^2] - E[x]^2."""
    acc = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(acc)
    # torch's var_mean, a stable one-pass (Welford) reduction: no squared copy of the case (17 GB for fp32 cases
    # at 2**31 elements, upcast)
    var, mu = torch.var_mean(xf, dim=-1, keepdim=True, correction=0)
    xc = xf - mu
    r = torch.rsqrt(var + eps)
    tracked = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))
    if tracked:  # differentiated (the backward's reference): out of place, as autograd needs
        y = xc * r * weight.to(acc)
        if has_bias:
            y = y + bias.to(acc)
    else:  # in place: one row-sized temporary, not three (fp32 cases at 2**31 elements upcast to 17 GB each)
        y = xc.mul_(r).mul_(weight.to(acc))
        if has_bias:
            y.add_(bias.to(acc))
    out.copy_(y)
    if mean is not None:
        mean.copy_(mu.squeeze(-1))
        rstd.copy_(r.squeeze(-1))


def layernorm_torch(*, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out: torch.Tensor, eps: float,
                    has_bias: bool, mean=None, rstd=None) -> torch.Tensor:
    """torch.nn.functional.layer_norm on the case's own dtype (its fused kernel, fp32 statistics), returning
    its own output so the timing holds no copy into ``out``; its statistics stay inside its autograd node."""
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias if has_bias else None, eps)


def layernorm_liger(*, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
                    eps: float, has_bias: bool, mean=None, rstd=None) -> torch.Tensor:
    """Liger-Kernel 0.8's LayerNorm (LigerLayerNormFunction), returning Liger's own output (its mean and rstd, in
    x's dtype, stay in its ctx). Liger's kernel always reads a bias: a caller without one passes zeros, and pays
    for its dbias in the backward."""
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    return LigerLayerNormFunction.apply(x, weight, bias if has_bias else torch.zeros_like(weight), eps)


# ---------------------------------------------------------------------------------------------------
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
    stats = _check_stats(x, mean, rstd, "layernorm_bwd")
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


class LayerNormFunction(torch.autograd.Function):
    """LayerNorm over the last dimension of x (any leading dimensions), bias optional: the Triton forward and
    backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
        ctx.has_bias = bias is not None
        return norm_forward(ctx, layernorm, x, weight, eps, stats=True, bias=bias, has_bias=ctx.has_bias)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        grads = norm_backward(ctx, layernorm_bwd, grad_out, ("weight", "bias"),
                              absent=() if ctx.has_bias else ("bias",), has_bias=ctx.has_bias)
        return *grads, None


def layernorm_autograd(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                       eps: float = 1e-5) -> torch.Tensor:
    """``LayerNormFunction.apply``: a differentiable LayerNorm, as F.layer_norm over the last dimension."""
    return LayerNormFunction.apply(x, weight, bias, eps)
