"""Numerically stable softmax over the last dimension of a 2-D tensor.

A row that fits one block is loaded once and kept in registers. A longer row takes an online pass (a
running max and a running sum of exp(x - max), rescaled whenever the max grows) and then a second pass
that writes exp(x - max) / sum; the second pass walks the row backwards so that its first loads hit the
blocks the first pass touched last, which are the likeliest still to be in cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

# Longest row kept in registers in one pass (elements); longer rows take the online two-pass path.
_MAX_SINGLE_BLOCK = 4096
# Block of the online path: big enough to amortise the two block reductions per iteration.
_ONLINE_BLOCK = 4096


@dataclass(frozen=True)
class SoftmaxConfig:
    block: int  # columns per iteration, a power of two
    num_warps: int
    single_pass: bool  # the whole row fits one block

    @classmethod
    def for_shape(cls, rows: int, cols: int, dtype: torch.dtype) -> SoftmaxConfig:
        single_pass = cols <= _MAX_SINGLE_BLOCK
        block = triton.next_power_of_2(max(cols, 1)) if single_pass else _ONLINE_BLOCK
        # about 16 elements per thread: a few 16-byte vector loads, no register spills
        num_warps = max(1, min(16, block // (32 * 16)))
        return cls(block=block, num_warps=num_warps, single_pass=single_pass)


@triton.jit
def _softmax_single_kernel(x_ptr, out_ptr, n_cols, stride_x_row, stride_x_col, stride_o_row, stride_o_col,
                           BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    cols64 = cols.to(tl.int64)  # a column-major tensor has a column stride of `rows`
    x = tl.load(x_ptr + row * stride_x_row + cols64 * stride_x_col, mask=mask, other=float("-inf"))
    x = x.to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    s = tl.sum(e, axis=0)
    out = (e / s).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + row * stride_o_row + cols64 * stride_o_col, out, mask=mask)


@triton.jit
def _softmax_online_kernel(x_ptr, out_ptr, n_cols, stride_x_row, stride_x_col, stride_o_row, stride_o_col,
                           BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x_row
    o_row = out_ptr + row * stride_o_row
    cols = tl.arange(0, BLOCK)

    # The first block is peeled off so that the running max starts finite (no -inf - -inf = NaN).
    x = tl.load(x_row + cols.to(tl.int64) * stride_x_col, mask=cols < n_cols, other=float("-inf"))
    x = x.to(tl.float32)
    m = tl.max(x, axis=0)
    s = tl.sum(tl.exp(x - m), axis=0)
    for start in range(BLOCK, n_cols, BLOCK):
        offs = start + cols
        x = tl.load(x_row + offs.to(tl.int64) * stride_x_col, mask=offs < n_cols, other=float("-inf"))
        x = x.to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new

    n_blocks = tl.cdiv(n_cols, BLOCK)
    for i in range(0, n_blocks):
        offs = (n_blocks - 1 - i) * BLOCK + cols
        mask = offs < n_cols
        offs64 = offs.to(tl.int64)
        x = tl.load(x_row + offs64 * stride_x_col, mask=mask, other=float("-inf")).to(tl.float32)
        out = tl.exp(x - m) / s
        tl.store(o_row + offs64 * stride_o_col, out.to(out_ptr.dtype.element_ty), mask=mask)


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


def softmax(*, x, out, config: SoftmaxConfig | None = None) -> None:
    """Write softmax(x, dim=-1) into `out`; any 2-D strides are accepted."""
    _check_args(x, out)
    rows, cols = x.shape
    if rows == 0 or cols == 0:
        return
    cfg = config or SoftmaxConfig.for_shape(rows, cols, x.dtype)
    if cfg.single_pass and cfg.block < cols:
        raise ValueError(f"softmax: a single-pass config needs block >= cols, got {cfg.block} < {cols}")
    kernel = _softmax_single_kernel if cfg.single_pass else _softmax_online_kernel
    kernel[(rows,)](
        x, out, cols, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
        BLOCK=cfg.block, num_warps=cfg.num_warps,
    )  # fmt: skip


def softmax_ref(*, x, out) -> None:
    """Plain torch: compute in promote(dtype, fp32), write in the dtype of `out`."""
    acc = torch.promote_types(x.dtype, torch.float32)
    out.copy_(torch.softmax(x.to(acc), dim=-1))
