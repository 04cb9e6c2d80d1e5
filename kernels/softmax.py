"""Numerically stable softmax over the last dimension of a 2-D tensor; its backward (from the saved output), the
backward's reference and an autograd.Function follow the forward.

A row that fits one block is loaded once and kept in registers. A longer row takes an online pass (a
running max and a running sum of exp(x - max), rescaled whenever the max grows) and then a second pass
that writes exp(x - max) / sum; the second pass walks the row backwards so that its first loads hit the
blocks the first pass touched last, which are the likeliest still to be in cache.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.common import cdiv, interpreted, next_power_of_2
from kernels.fastlaunch import FastLaunch

# Longest row kept in registers in one pass (elements); longer rows take the online two-pass path. On an
# H200 one pass over a 32000-column fp32 row ran at 98% of copy bandwidth, the online path at 66-78%.
_MAX_SINGLE_BLOCK = 32768
# Block of the online path (16384 measured best of 2048-16384 on an H200 for 128256 and 262144 columns).
_ONLINE_BLOCK = 16384
# Elements one program holds at a time; short rows are packed several to a program up to this.
_ELEMS_PER_PROGRAM = 2048
# Below this many programs the rows are not packed further, so that every SM gets some.
_MIN_PROGRAMS = 1024


@dataclass(frozen=True)
class SoftmaxConfig:
    block_m: int  # rows per program
    block_n: int  # columns per iteration, a power of two
    num_warps: int
    single_pass: bool  # the whole row fits one block

    @classmethod
    @functools.lru_cache(maxsize=256)
    def for_shape(cls, rows: int, cols: int, dtype: torch.dtype, interpreted: bool = False) -> SoftmaxConfig:
        """`interpreted`: the Triton interpreter runs programs one after another at a high fixed cost
        each, so it packs rows into as few programs as possible instead of filling a GPU."""
        single_pass = cols <= _MAX_SINGLE_BLOCK
        block_n = next_power_of_2(max(cols, 1)) if single_pass else _ONLINE_BLOCK
        block_m, num_warps = _row_tiles(rows, block_n, interpreted)
        return cls(block_m=block_m, block_n=block_n, num_warps=num_warps, single_pass=single_pass)


def _row_tiles(rows: int, block_n: int, interpreted: bool) -> tuple[int, int]:
    """Rows per program and warps for row blocks of ``block_n`` columns, forward and backward alike."""
    elems = _ELEMS_PER_PROGRAM * (32 if interpreted else 1)
    min_programs = 1 if interpreted else _MIN_PROGRAMS
    block_m = min(next_power_of_2(max(rows, 1)), max(1, elems // block_n))
    while block_m > 1 and cdiv(rows, block_m) < min_programs:
        block_m //= 2
    # about 16 elements per thread: a few 16-byte vector loads, no register spills
    return block_m, max(1, min(16, block_m * block_n // (32 * 16)))


@triton.jit
def _row_pointers(x_ptr, out_ptr, n_rows, stride_x_row, stride_o_row, BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    # Rows past the end re-read the last row instead of loading -inf everywhere: no -inf - -inf = NaN.
    rows = tl.minimum(rows, n_rows - 1).to(tl.int64)
    return x_ptr + rows[:, None] * stride_x_row, out_ptr + rows[:, None] * stride_o_row, row_mask[:, None]


@triton.jit
def _softmax_single_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_x_row, stride_x_col, stride_o_row,
                           stride_o_col, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    x_rows, o_rows, row_mask = _row_pointers(x_ptr, out_ptr, n_rows, stride_x_row, stride_o_row, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)[None, :]
    col_mask = cols < n_cols
    cols = cols.to(tl.int64)  # a column-major tensor has a column stride of `rows`
    x = tl.load(x_rows + cols * stride_x_col, mask=col_mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=1)
    e = tl.exp(x - m[:, None])
    s = tl.sum(e, axis=1)
    out = (e / s[:, None]).to(out_ptr.dtype.element_ty)
    tl.store(o_rows + cols * stride_o_col, out, mask=row_mask & col_mask)


@triton.jit
def _softmax_online_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_x_row, stride_x_col, stride_o_row,
                           stride_o_col, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    x_rows, o_rows, row_mask = _row_pointers(x_ptr, out_ptr, n_rows, stride_x_row, stride_o_row, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)[None, :]

    # The first block is peeled off so that the running max starts finite (no -inf - -inf = NaN).
    x = tl.load(x_rows + cols.to(tl.int64) * stride_x_col, mask=cols < n_cols, other=float("-inf"))
    x = x.to(tl.float32)
    m = tl.max(x, axis=1)
    s = tl.sum(tl.exp(x - m[:, None]), axis=1)
    for start in range(BLOCK_N, n_cols, BLOCK_N):
        offs = start + cols
        x = tl.load(x_rows + offs.to(tl.int64) * stride_x_col, mask=offs < n_cols, other=float("-inf"))
        x = x.to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=1))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[:, None]), axis=1)
        m = m_new

    m = m[:, None]
    s = s[:, None]
    n_blocks = tl.cdiv(n_cols, BLOCK_N)
    for i in range(0, n_blocks):
        offs = (n_blocks - 1 - i) * BLOCK_N + cols
        mask = offs < n_cols
        offs = offs.to(tl.int64)
        x = tl.load(x_rows + offs * stride_x_col, mask=mask, other=float("-inf")).to(tl.float32)
        out = (tl.exp(x - m) / s).to(out_ptr.dtype.element_ty)
        tl.store(o_rows + offs * stride_o_col, out, mask=row_mask & mask)


def _check_args(x, out) -> None:
    if x.dim() != 2:
        raise ValueError(f"softmax: x must be 2-D [rows, cols], got shape {tuple(x.shape)}")
    if out.shape != x.shape:
        raise ValueError(f"softmax: out shape {tuple(out.shape)} differs from x shape {tuple(x.shape)}")
    if not x.is_floating_point() or not out.is_floating_point():
        raise ValueError(f"softmax: x and out must be floating point, got {x.dtype} and {out.dtype}")
    if x.device != out.device:
        raise ValueError(f"softmax: x is on {x.device} but out is on {out.device}")
    if x.shape[1] >= 2**31:
        raise ValueError(f"softmax: rows of {x.shape[1]} columns exceed the 2**31 - 1 supported")


_softmax_single_launch = FastLaunch(_softmax_single_kernel)
_softmax_online_launch = FastLaunch(_softmax_online_kernel)


def softmax(*, x, out, config: SoftmaxConfig | None = None) -> None:
    """Write softmax(x, dim=-1) into `out`; any 2-D strides are accepted."""
    _check_args(x, out)
    rows, cols = x.shape
    if rows == 0 or cols == 0:
        return
    cfg = config or SoftmaxConfig.for_shape(rows, cols, x.dtype, interpreted=interpreted(x))
    if cfg.single_pass and cfg.block_n < cols:
        raise ValueError(f"softmax: a single-pass config needs block_n >= cols, got {cfg.block_n} < {cols}")
    kernel = _softmax_single_launch if cfg.single_pass else _softmax_online_launch
    kernel[(cdiv(rows, cfg.block_m),)](
        x, out, rows, cols, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.num_warps,
    )  # fmt: skip


def softmax_liger(*, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Liger-Kernel 0.8's softmax (LigerSoftmaxFunction, contiguous inputs: its ensure_contiguous copies any
    other), returning Liger's own output."""
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    return LigerSoftmaxFunction.apply(x)


def softmax_ref(*, x, out) -> None:
    """Plain torch: compute in promote(dtype, fp32), write in the dtype of `out`.

    Rows go in chunks of about 2**26 elements so that the upcast temporaries stay small on `huge` inputs.
    """
    acc = torch.promote_types(x.dtype, torch.float32)
    step = max(1, (1 << 26) // max(x.shape[-1], 1))
    for start in range(0, x.shape[0], step):
        out[start:start + step].copy_(torch.softmax(x[start:start + step].to(acc), dim=-1))


# ---------------------------------------------------------------------------------------------------
# Backward: dx = y * (dy - sum(dy * y)) per row, y the forward's output. Saved tensor: the output (the input x
# is not needed). A row that fits one block is read once, y and dy held in registers; a longer one is read
# twice, the dot product first, then dx with the blocks walked backwards as the forward's writing pass does.
#
# On an H200 (Triton 3.6, bytes y + dy + dx, copy 4260 GB/s in the same run): 16384 x 4096 bf16 99.1 us, 4064
# GB/s (95%), fp32 4198 GB/s (99%); 65536 x 512 bf16 91%; rows read twice: 4096 x 32000 bf16 235.3 us (78%), fp32
# 572 us (65%), 4096 x 128256 bf16 63%, 1024 x 262144 61%. fp32 rows of 8193 to 16384 columns, read twice since
# the fp64 dot product needs the registers, are not measured.
#
# dy - s cancels where one y dominates (s is then nearly that element's dy), so an fp32 s, rounded relative to
# sum(|y * dy|), left fp32 rows 50x over the default normwise bound against the fp64 reference (a 7-column case
# of tests/test_backward_kernels.py). For fp32 inputs s is summed in fp64 (each fp32 product is exact there)
# and kept as hi + lo, two fp32 values: dy - hi is exact where it cancels, so dx has one rounding's error.

# Longest row kept in registers, and a longer row's block: 32 KB of y. That is 16384 16-bit columns (half the
# forward's longest row: y and dy are both live), which beat blocks of 4096 and 8192 on the H200 at 4096 x 32000;
# and 8192 fp32 ones: 16384 spilled beside the fp64 dot product (padded rows, sm_90 and sm_100).
_BWD_BLOCK_BYTES = 32 << 10


@dataclass(frozen=True)
class SoftmaxBwdConfig:
    block_m: int  # rows per program
    block_n: int  # columns per iteration, a power of two
    num_warps: int
    single_pass: bool

    @classmethod
    @functools.lru_cache(maxsize=256)
    def for_shape(cls, rows: int, cols: int, itemsize: int = 2, interpreted: bool = False) -> SoftmaxBwdConfig:
        """`itemsize`: of the saved output; `interpreted`: as SoftmaxConfig's, few large programs."""
        longest = _BWD_BLOCK_BYTES // itemsize
        single_pass = cols <= longest
        block_n = next_power_of_2(max(cols, 1)) if single_pass else longest
        block_m, num_warps = _row_tiles(rows, block_n, interpreted)
        return cls(block_m=block_m, block_n=block_n, num_warps=num_warps, single_pass=single_pass)


# a row count of 1 specialised (decode) made ptxas pick other, spilling register budgets
@triton.jit(do_not_specialize=["n_rows"])
def _softmax_bwd_kernel(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, stride_y_row, stride_y_col, stride_dy_row,
                        stride_dy_col, stride_dx_row, stride_dx_col, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        SINGLE_PASS: tl.constexpr, ACC: tl.constexpr, DOT: tl.constexpr):
    rows = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_ok = (rows < n_rows)[:, None]
    y_rows = y_ptr + rows[:, None] * stride_y_row
    dy_rows = dy_ptr + rows[:, None] * stride_dy_row
    dx_rows = dx_ptr + rows[:, None] * stride_dx_row
    cols = tl.arange(0, BLOCK_N)[None, :].to(tl.int64)  # a column-major tensor has a column stride of `rows`
    if SINGLE_PASS:
        mask = row_ok & (cols < n_cols)
        y = tl.load(y_rows + cols * stride_y_col, mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_rows + cols * stride_dy_col, mask=mask, other=0.0).to(ACC)
        hi, lo = _split(tl.sum(y.to(DOT) * dy.to(DOT), axis=1), ACC)
        dx = y * ((dy - hi[:, None]) - lo[:, None])
        tl.store(dx_rows + cols * stride_dx_col, dx.to(dx_ptr.dtype.element_ty), mask=mask)
    else:
        # summed per block: a block-sized accumulator beside y and dy spilled at 16384 columns and 16 warps
        dot = tl.zeros([BLOCK_M], dtype=DOT)
        for start in range(0, n_cols, BLOCK_N):
            offs = start + cols
            mask = row_ok & (offs < n_cols)
            y = tl.load(y_rows + offs * stride_y_col, mask=mask, other=0.0).to(ACC)
            dy = tl.load(dy_rows + offs * stride_dy_col, mask=mask, other=0.0).to(ACC)
            dot += tl.sum(y.to(DOT) * dy.to(DOT), axis=1)
        hi, lo = _split(dot, ACC)
        n_blocks = tl.cdiv(n_cols, BLOCK_N)
        for i in range(0, n_blocks):
            offs = (n_blocks - 1 - i) * BLOCK_N + cols
            mask = row_ok & (offs < n_cols)
            y = tl.load(y_rows + offs * stride_y_col, mask=mask, other=0.0).to(ACC)
            dy = tl.load(dy_rows + offs * stride_dy_col, mask=mask, other=0.0).to(ACC)
            dx = y * ((dy - hi[:, None]) - lo[:, None])
            tl.store(dx_rows + offs * stride_dx_col, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _split(dot, ACC: tl.constexpr):
    """``dot`` as a sum hi + lo of two ACC values (lo is 0 when dot already is ACC)."""
    hi = dot.to(ACC)
    return hi, (dot - hi.to(dot.dtype)).to(ACC)


_softmax_bwd_launch = FastLaunch(_softmax_bwd_kernel)


def softmax_bwd(*, out, grad_out, grad_x, config: SoftmaxBwdConfig | None = None) -> None:
    """Write the gradient of softmax(x, dim=-1) into `grad_x` from the forward's output `out` and `grad_out`;
    any 2-D strides, grad_out's zero strides included."""
    _check_args(out, grad_x)
    for name, t in (("grad_out", grad_out), ("grad_x", grad_x)):
        if t.shape != out.shape:
            raise ValueError(f"softmax_bwd: {name} shape {tuple(t.shape)} differs from out shape {tuple(out.shape)}")
    rows, cols = out.shape
    if rows == 0 or cols == 0:
        return
    cfg = config or SoftmaxBwdConfig.for_shape(rows, cols, out.element_size(), interpreted=interpreted(out))
    if cfg.single_pass and cfg.block_n < cols:
        raise ValueError(f"softmax_bwd: a single-pass config needs block_n >= cols, got {cfg.block_n} < {cols}")
    wide = out.dtype == torch.float64
    _softmax_bwd_launch[(cdiv(rows, cfg.block_m),)](
        out, grad_out, grad_x, rows, cols, out.stride(0), out.stride(1), grad_out.stride(0), grad_out.stride(1),
        grad_x.stride(0), grad_x.stride(1), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SINGLE_PASS=cfg.single_pass,
        ACC=tl.float64 if wide else tl.float32, DOT=tl.float64 if wide or out.dtype == torch.float32 else tl.float32,
        num_warps=cfg.num_warps,
    )  # fmt: skip


def softmax_bwd_ref(*, out, grad_out, grad_x) -> None:
    """The closed form in plain torch, in fp32 or the inputs' precision if higher."""
    acc = torch.promote_types(out.dtype, torch.float32)
    y, dy = out.to(acc), grad_out.to(acc)
    grad_x.copy_(y * (dy - (y * dy).sum(dim=-1, keepdim=True)))


class SoftmaxFunction(torch.autograd.Function):
    """softmax over the last dimension of x (any leading dimensions): the Triton forward and backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        # not reshape(-1, cols): with cols = 0 the row count cannot be inferred
        x2 = x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
        out = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
        softmax(x=x2, out=out)
        ctx.save_for_backward(out)
        return out.view(x.shape)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        (out,) = ctx.saved_tensors
        grad_x = torch.empty(out.shape, dtype=out.dtype, device=out.device)
        softmax_bwd(out=out, grad_out=grad_out.reshape(out.shape), grad_x=grad_x)
        return grad_x.view(grad_out.shape)


def softmax_autograd(x: torch.Tensor) -> torch.Tensor:
    """``SoftmaxFunction.apply``: a differentiable softmax over the last dimension."""
    return SoftmaxFunction.apply(x)
