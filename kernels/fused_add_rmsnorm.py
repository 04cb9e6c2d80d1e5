"""Residual add fused with RMSNorm, in place, with the semantics of vLLM's ``fused_add_rms_norm``.

``residual = x + residual``, then ``x = residual * rsqrt(mean(residual**2) + eps) * weight``.

Rounding: the sum is computed in fp32 and rounded once into ``residual``'s dtype, and the norm is taken
of that stored sum, as vLLM does: the fused op equals the unfused ``residual += x; x = rmsnorm(residual)``
in the storage dtype. The reference does the same (it normalises what it stored), so when the harness
runs it on upcast copies the only extra error is the one rounding of the sum to a 16-bit dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import cdiv, interpreted, needs_bf16_rounding, round_to_bf16
from kernels.fastlaunch import FastLaunch
from kernels.rmsnorm import RMSNormConfig


@triton.jit
def _add_into_residual(x_ptrs, r_ptrs, mask, RNE_BF16_R: tl.constexpr):
    """residual = x + residual, rounded once to residual's dtype and stored; returns the stored sum in fp32."""
    x = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptrs, mask=mask, other=0.0).to(tl.float32)
    s = x + r
    if RNE_BF16_R:
        s = round_to_bf16(s)
    s = s.to(r_ptrs.dtype.element_ty)
    tl.store(r_ptrs, s, mask=mask)
    return s.to(tl.float32)


@triton.jit
def _fused_add_rmsnorm_kernel(
    x_ptr, r_ptr, w_ptr, n_rows, n_cols,
    stride_xm, stride_xn, stride_rm, stride_rn, stride_w, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr,
    RNE_BF16_X: tl.constexpr, RNE_BF16_R: tl.constexpr,
):  # fmt: skip
    # int64 offsets: rows * row stride and (column-major) columns * column stride can pass 2**31
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = (rows < n_rows)[:, None]
    x_rows = x_ptr + rows[:, None] * stride_xm
    r_rows = r_ptr + rows[:, None] * stride_rm
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    if SINGLE_PASS:
        col_ok = cols < n_cols
        mask = row_ok & col_ok[None, :]
        x_ptrs = x_rows + cols[None, :] * stride_xn
        s = _add_into_residual(x_ptrs, r_rows + cols[None, :] * stride_rn, mask, RNE_BF16_R)
        rstd = tl.rsqrt(tl.sum(s * s, axis=1) / n_cols + eps)
        w = tl.load(w_ptr + cols * stride_w, mask=col_ok, other=0.0).to(tl.float32)
        y = s * rstd[:, None] * w[None, :]
        if RNE_BF16_X:
            y = round_to_bf16(y)
        tl.store(x_ptrs, y.to(x_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok & (c < n_cols)[None, :]
            s = _add_into_residual(x_rows + c[None, :] * stride_xn, r_rows + c[None, :] * stride_rn, mask,
                                   RNE_BF16_R)
            acc += s * s
        # the second pass reads back the sums other threads of this program stored
        tl.debug_barrier()
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)[:, None]
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            mask = row_ok & col_ok[None, :]
            s = tl.load(r_rows + c[None, :] * stride_rn, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c * stride_w, mask=col_ok, other=0.0).to(tl.float32)
            y = s * rstd * w[None, :]
            if RNE_BF16_X:
                y = round_to_bf16(y)
            tl.store(x_rows + c[None, :] * stride_xn, y.to(x_ptr.dtype.element_ty), mask=mask)


def _check_shapes(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
    if x.dim() != 2 or residual.shape != x.shape or weight.shape != (x.shape[1],):
        raise ValueError(
            f"fused_add_rmsnorm: expected x and residual [tokens, hidden], weight [hidden]; got x "
            f"{tuple(x.shape)}, residual {tuple(residual.shape)}, weight {tuple(weight.shape)}"
        )


_fused_add_rmsnorm_launch = FastLaunch(_fused_add_rmsnorm_kernel)


def fused_add_rmsnorm(*, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Triton kernel; updates residual and x in place; any strides."""
    _check_shapes(x, residual, weight)
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return
    cfg = RMSNormConfig.for_shape(n_rows, n_cols, interpreted(x))
    _fused_add_rmsnorm_launch[(cdiv(n_rows, cfg.block_m),)](
        x, residual, weight, n_rows, n_cols,
        x.stride(0), x.stride(1), residual.stride(0), residual.stride(1), weight.stride(0), eps,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SINGLE_PASS=cfg.single_pass,
        RNE_BF16_X=needs_bf16_rounding(x), RNE_BF16_R=needs_bf16_rounding(residual),
        num_warps=cfg.num_warps,
    )  # fmt: skip


def fused_add_rmsnorm_ref(
    *, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> None:
    """Plain torch, in fp32 or the inputs' precision if higher; normalises the sum as stored."""
    acc = torch.promote_types(x.dtype, torch.float32)
    residual.copy_(x.to(acc) + residual.to(acc))
    s = residual.to(acc)
    x.copy_(s * torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.to(acc))


def fused_add_rmsnorm_liger(
    *, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> dict | None:
    """Liger-Kernel 0.8's fused add + RMSNorm (llama casting). Liger returns new tensors instead of updating
    x and residual in place; they are returned as they are, so the timing holds no copies back."""
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    if x.numel() == 0:
        return None
    y, s = LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, 0.0, "llama", False)
    return {"x": y, "residual": s}
