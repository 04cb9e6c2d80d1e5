"""LayerNorm over the last dimension: Triton kernel, torch reference and F.layer_norm as a peer; the backward
(dx, dweight, dbias) and the autograd.Function are in kernels/layernorm_bwd.py.

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
    accumulation_dtype,
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
    _PLANS.run(sig, lambda: forward_plan(x, weight, bias, out, has_bias, mean, rstd),
               x, weight, bias, out, mean, rstd, eps)


def _empty_stats(x, weight, bias, out, mean, rstd, eps) -> None:
    mean.fill_(float("nan"))  # an empty row's mean and variance: 0 / 0, as torch's
    rstd.fill_(float("nan"))


def forward_plan(x, weight, bias, out, has_bias, mean, rstd):
    """Checks the operands and works out the launch :func:`layernorm` makes for their signature (kernels.common.
    Plans): ``launch(x, weight, bias, out, mean, rstd, eps)``."""
    _check_shapes(x, weight, bias, out, has_bias)
    stats = check_stats(x, mean, rstd, "layernorm")
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


def check_stats(x: torch.Tensor, mean: torch.Tensor | None, rstd: torch.Tensor | None, who: str) -> bool:
    """Whether both statistics are given, each a ``[tokens]`` tensor of x's accumulation type."""
    if mean is None and rstd is None:
        return False
    want = accumulation_dtype(x)
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
