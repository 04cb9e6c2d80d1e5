"""SwiGLU activation as vLLM's ``silu_and_mul``: ``out = silu(x[:, :d]) * x[:, d:]``; its backward, reference and
autograd.Function below the forward.

x is ``[tokens, 2 * d]`` and out ``[tokens, d]``; computed in fp32 and rounded once to out's dtype.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.common import cdiv, needs_bf16_rounding, next_power_of_2, round_to_bf16
from kernels.fastlaunch import FastLaunch

# Output elements per program: 16 KB of fp32 operands in flight, few enough programs for a long row.
_TILE = 4096
# Widest column block; a row-major x is read BLOCK_N contiguous elements at a time.
_MAX_BLOCK_N = 1024


@dataclass(frozen=True)
class SiluAndMulConfig:
    block_m: int  # rows per program
    block_n: int  # output columns per program
    num_warps: int

    @classmethod
    @functools.lru_cache(maxsize=256)
    def for_shape(cls, n_rows: int, d: int, column_major: bool) -> SiluAndMulConfig:
        if column_major:
            # x.t() is contiguous: rows are the fast dimension, so tile tall and narrow to coalesce
            block_m = min(max(next_power_of_2(n_rows), 16), _MAX_BLOCK_N)
            block_n = min(max(next_power_of_2(d), 1), max(_TILE // block_m, 1))
        else:
            block_n = min(max(next_power_of_2(d), 16), _MAX_BLOCK_N)
            block_m = min(max(_TILE // block_n, 1), next_power_of_2(max(n_rows, 1)))
        # 16 output elements per thread: two 16-byte loads of each operand for 16-bit types
        num_warps = min(max(block_m * block_n // (32 * 16), 1), 8)
        return cls(block_m=block_m, block_n=block_n, num_warps=num_warps)


@triton.jit
def _silu_and_mul_kernel(
    x_ptr, out_ptr, n_rows, d, n_col_blocks,
    stride_xm, stride_xn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, RNE_BF16: tl.constexpr,
):  # fmt: skip
    # one flat grid axis: row blocks can pass the 65535 limit of the second axis
    pid = tl.program_id(0)
    pid_m = pid // n_col_blocks
    pid_n = pid % n_col_blocks
    # int64 offsets: the huge tier has more than 2**31 elements in x
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < d)[None, :]
    x_rows = x_ptr + rows[:, None] * stride_xm
    a = tl.load(x_rows + cols[None, :] * stride_xn, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(x_rows + (cols + d)[None, :] * stride_xn, mask=mask, other=0.0).to(tl.float32)
    # exp(-a) overflows to inf for a < -88: a / inf = -0, the right limit
    y = a / (1.0 + tl.exp(-a)) * b
    if RNE_BF16:
        y = round_to_bf16(y)
    o_ptrs = out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on
    tl.store(o_ptrs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _check_shapes(x: torch.Tensor, out: torch.Tensor) -> None:
    if x.dim() != 2 or x.shape[1] % 2 or out.shape != (x.shape[0], x.shape[1] // 2):
        raise ValueError(
            f"silu_and_mul: expected x [tokens, 2 * d] and out [tokens, d]; got x {tuple(x.shape)}, "
            f"out {tuple(out.shape)}"
        )


_silu_and_mul_launch = FastLaunch(_silu_and_mul_kernel)


def silu_and_mul(*, x: torch.Tensor, out: torch.Tensor) -> None:
    """Triton kernel; any strides on x and out."""
    _check_shapes(x, out)
    n_rows, d = out.shape
    if out.numel() == 0:
        return
    column_major = x.stride(0) == 1 and x.stride(1) != 1
    cfg = SiluAndMulConfig.for_shape(n_rows, d, column_major)
    n_col_blocks = cdiv(d, cfg.block_n)
    grid = (cdiv(n_rows, cfg.block_m) * n_col_blocks,)
    _silu_and_mul_launch[grid](
        x, out, n_rows, d, n_col_blocks,
        x.stride(0), x.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, RNE_BF16=needs_bf16_rounding(out), num_warps=cfg.num_warps,
    )  # fmt: skip


def silu_and_mul_ref(*, x: torch.Tensor, out: torch.Tensor) -> None:
    """Plain torch, in fp32 or the input's precision if higher."""
    acc = torch.promote_types(x.dtype, torch.float32)
    d = x.shape[-1] // 2
    xf = x.to(acc)
    out.copy_(torch.nn.functional.silu(xf[..., :d]) * xf[..., d:])


def silu_and_mul_liger(*, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Liger-Kernel 0.8's SiLU-and-mul, returning Liger's own output.

    Liger takes gate and up as two tensors and makes each contiguous (its `ensure_contiguous`), so from
    vLLM's fused [gate | up] layout it copies both halves first: those copies are in its time, as they
    would be for any caller holding that layout."""
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    if out.numel() == 0:
        return out
    d = x.shape[-1] // 2
    return LigerSiLUMulFunction.apply(x[..., :d], x[..., d:])


# ---------------------------------------------------------------------------------------------------
# Backward. With a = x[:, :d], b = x[:, d:] and s = sigmoid(a):
#     dx[:, :d] = dy * b * s * (1 + a * (1 - s))        (silu'(a) = s + a * s * (1 - s))
#     dx[:, d:] = dy * a * s                            (silu(a))
# Saved tensor: x. Elementwise, so it takes the forward's tiling (SiluAndMulConfig): x and dy read once, both
# halves of dx written once; each program's gate and up columns are one tile apart, as in the forward. On an H200
# (Triton 3.6, bytes x + dy + dx) it moved 4184 GB/s at 8192 x 14336 bf16 (280.7 us) and 4217 GB/s at 4096 x
# 28672, beside 4260 GB/s for a device copy in the same run; of 8 other tilings none was faster by more than 2%.


@triton.jit
def _silu_and_mul_bwd_kernel(
    x_ptr, dy_ptr, dx_ptr, n_rows, d, n_col_blocks,
    stride_xm, stride_xn, stride_dym, stride_dyn, stride_dxm, stride_dxn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ACC: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    pid_m = pid // n_col_blocks
    pid_n = pid % n_col_blocks
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < d)[None, :]
    x_rows = x_ptr + rows[:, None] * stride_xm
    a = tl.load(x_rows + cols[None, :] * stride_xn, mask=mask, other=0.0).to(ACC)
    b = tl.load(x_rows + (cols + d)[None, :] * stride_xn, mask=mask, other=0.0).to(ACC)
    dy = tl.load(dy_ptr + rows[:, None] * stride_dym + cols[None, :] * stride_dyn, mask=mask, other=0.0).to(ACC)
    # exp(-a) overflows to inf for a < -88: s = 0 and both gradients are -0 or 0, the limits
    s = 1.0 / (1.0 + tl.exp(-a))
    da = dy * b * s * (1.0 + a * (1.0 - s))
    db = dy * a * s
    dx_rows = dx_ptr + rows[:, None] * stride_dxm
    tl.store(dx_rows + cols[None, :] * stride_dxn, da.to(dx_ptr.dtype.element_ty), mask=mask)
    tl.store(dx_rows + (cols + d)[None, :] * stride_dxn, db.to(dx_ptr.dtype.element_ty), mask=mask)


_silu_and_mul_bwd_launch = FastLaunch(_silu_and_mul_bwd_kernel)


def silu_and_mul_bwd(*, x: torch.Tensor, grad_out: torch.Tensor, grad_x: torch.Tensor,
                     config: SiluAndMulConfig | None = None) -> None:
    """Triton backward into grad_x (x's shape, both halves); any strides on every tensor, grad_out's zero strides
    included."""
    _check_shapes(x, grad_out)
    if grad_x.shape != x.shape:
        raise ValueError(f"silu_and_mul_bwd: grad_x {tuple(grad_x.shape)} must have x's shape {tuple(x.shape)}")
    n_rows, d = grad_out.shape
    if grad_out.numel() == 0:
        return
    column_major = x.stride(0) == 1 and x.stride(1) != 1
    cfg = config or SiluAndMulConfig.for_shape(n_rows, d, column_major)
    n_col_blocks = cdiv(d, cfg.block_n)
    grid = (cdiv(n_rows, cfg.block_m) * n_col_blocks,)
    _silu_and_mul_bwd_launch[grid](
        x, grad_out, grad_x, n_rows, d, n_col_blocks,
        x.stride(0), x.stride(1), grad_out.stride(0), grad_out.stride(1), grad_x.stride(0), grad_x.stride(1),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, ACC=tl.float64 if x.dtype == torch.float64 else tl.float32,
        num_warps=cfg.num_warps,
    )  # fmt: skip


def silu_and_mul_bwd_ref(*, x: torch.Tensor, grad_out: torch.Tensor, grad_x: torch.Tensor) -> None:
    """The closed form in plain torch, in fp32 or the inputs' precision if higher."""
    acc = torch.promote_types(x.dtype, torch.float32)
    d = x.shape[-1] // 2
    a, b, dy = x[..., :d].to(acc), x[..., d:].to(acc), grad_out.to(acc)
    s = torch.sigmoid(a)
    grad_x[..., :d].copy_(dy * b * s * (1 + a * (1 - s)))
    grad_x[..., d:].copy_(dy * a * s)


class SiluAndMulFunction(torch.autograd.Function):
    """``silu(x[..., :d]) * x[..., d:]`` over the last dimension of x (any leading dimensions): the Triton forward
    and backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        # not reshape(-1, 2 * d): with d = 0 the row count cannot be inferred
        x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
        out = torch.empty((x2.shape[0], x2.shape[1] // 2), dtype=x.dtype, device=x.device)
        silu_and_mul(x=x2, out=out)
        ctx.save_for_backward(x2)
        return out.view(*x.shape[:-1], out.shape[1])

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (x2,) = ctx.saved_tensors
        grad_x = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
        silu_and_mul_bwd(x=x2, grad_out=grad_out.reshape(x2.shape[0], x2.shape[1] // 2), grad_x=grad_x)
        return grad_x.view(*grad_out.shape[:-1], x2.shape[1])


def silu_and_mul_autograd(x: torch.Tensor) -> torch.Tensor:
    """``SiluAndMulFunction.apply``: a differentiable SwiGLU on vLLM's fused [gate | up] layout."""
    return SiluAndMulFunction.apply(x)
