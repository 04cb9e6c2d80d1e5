"""Planted bugs for the numerics, poison and guards checks: a row softmax and an int8 truncation, each correct
and with one bug. tests/specs/planted_softmax.toml and planted_quant.toml declare them (``{impl}`` is filled
in by tests/test_checks_planted.py), which asserts the check that fails and its message.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK = 4096  # columns per block; a longer row takes the online two-pass path

CORRECT, DROPS_LAST, DROPS_TAIL, WRITES_PAST_ROW, WRITES_PAST_END, COPIES_PAST_END = range(6)


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, n_rows, n_cols, sx_row, sx_col, so_row, so_col, BLOCK: tl.constexpr,
                    BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * sx_row
    o_row = out_ptr + row * so_row
    cols = tl.arange(0, BLOCK).to(tl.int64)
    # Pass 1: running max and running sum of exp(x - max), rescaled when the max grows.
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.full((), 0.0, tl.float32)
    limit = n_cols
    if BUG == 1:  # DROPS_LAST: a long row's last element is left out of the normaliser
        if n_cols > BLOCK:
            limit = n_cols - 1
    n_blocks = tl.cdiv(n_cols, BLOCK)
    if BUG == 2:  # DROPS_TAIL: the online pass walks the full blocks only, the ragged last one is forgotten
        if n_cols > BLOCK:
            n_blocks = n_cols // BLOCK
    for b in range(0, n_blocks):
        c = b * BLOCK + cols
        x = tl.load(x_row + c * sx_col, mask=c < limit, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    # Pass 2: write exp(x - max) / sum.
    for b in range(0, tl.cdiv(n_cols, BLOCK)):
        c = b * BLOCK + cols
        x = tl.load(x_row + c * sx_col, mask=c < n_cols, other=float("-inf")).to(tl.float32)
        tl.store(o_row + c * so_col, (tl.exp(x - m) / s).to(out_ptr.dtype.element_ty), mask=c < n_cols)
    if BUG == 3:  # WRITES_PAST_ROW: one value stored one element past the row's end, into x
        tl.store(x_row + n_cols * sx_col, tl.load(x_row))
    if BUG == 4:  # WRITES_PAST_END: the first program stores one element past the end of out
        if row == 0:
            tl.store(out_ptr + n_rows * so_row, (1.0 / s).to(out_ptr.dtype.element_ty))
    if BUG == 5:  # COPIES_PAST_END: the last program copies the element after x's end to the one after out's
        if row == n_rows - 1:  # (an elementwise kernel whose load and store masks both say `<=`)
            tl.store(out_ptr + n_rows * so_row, tl.load(x_ptr + n_rows * sx_row))


def _softmax(x, out, bug: int) -> None:
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return
    block = min(_BLOCK, triton.next_power_of_2(n_cols))
    _softmax_kernel[(n_rows,)](x, out, n_rows, n_cols, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
                               BLOCK=block, BUG=bug)


def softmax(*, x, out):
    _softmax(x, out, CORRECT)


def softmax_ref(*, x, out):
    acc = torch.promote_types(x.dtype, torch.float32)
    out.copy_(torch.softmax(x.to(acc), dim=-1))


def softmax_drops_last(*, x, out):
    _softmax(x, out, DROPS_LAST)


def softmax_drops_tail(*, x, out):
    _softmax(x, out, DROPS_TAIL)


def softmax_writes_past_row(*, x, out):
    _softmax(x, out, WRITES_PAST_ROW)


def softmax_writes_past_end(*, x, out):
    _softmax(x, out, WRITES_PAST_END)


def softmax_copies_past_end(*, x, out):
    _softmax(x, out, COPIES_PAST_END)


@triton.jit
def _trunc_kernel(x_ptr, q_ptr, n_cols, sx_row, sx_col, sq_row, BLOCK: tl.constexpr, BUG: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK).to(tl.int64)
    mask = cols < n_cols
    if BUG == 3:  # SKIPS_LAST: the last column is never stored
        mask = cols < n_cols - 1
    x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=mask, other=0.0).to(tl.float32)
    if BUG == 1:  # OFF_BY_ONE: floor instead of truncation toward zero (negative non-integers land one lower)
        x = tl.floor(x)
    q = x.to(tl.int32)
    if BUG == 2:  # OFF_BY_128: an unsigned zero point of 128 added, stored into int8 where it wraps
        q = q + 128
    tl.store(q_ptr + row * sq_row + cols, q.to(tl.int8), mask=mask)


def _trunc(x, q, bug: int) -> None:
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return
    _trunc_kernel[(n_rows,)](x, q, n_cols, x.stride(0), x.stride(1), q.stride(0),
                             BLOCK=triton.next_power_of_2(n_cols), BUG=bug)


def trunc_int8(*, x, q):
    _trunc(x, q, 0)


def trunc_int8_ref(*, x, q):
    q.copy_(x.to(torch.int32).clamp(-128, 127).to(torch.int8))


def trunc_int8_off_by_one(*, x, q):
    _trunc(x, q, 1)


def trunc_int8_off_by_128(*, x, q):
    _trunc(x, q, 2)


def trunc_int8_skips_last(*, x, q):
    _trunc(x, q, 3)
