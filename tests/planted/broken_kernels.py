"""A correct row-scale kernel (out = x * w * 2) and deliberately broken variants of it.

Each broken variant plants one bug that a generated check must catch; tests/test_planted.py asserts
which check fails and with what message.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, w_ptr, out_ptr, n_cols, sx_row, sx_col, so_row, BLOCK: tl.constexpr,
                  DROP_LAST: tl.constexpr, ASSUME_CONTIGUOUS: tl.constexpr, WRITE_INPUT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    limit = n_cols - 1 if DROP_LAST else n_cols  # the off-by-one: drops the last element
    mask = cols < limit
    if ASSUME_CONTIGUOUS:
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    else:
        x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=mask)
    w = tl.load(w_ptr + cols, mask=mask)
    y = x.to(tl.float32) * w.to(tl.float32) * 2.0
    tl.store(out_ptr + row * so_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    if WRITE_INPUT:
        tl.store(x_ptr + row * sx_row + cols * sx_col, y.to(x_ptr.dtype.element_ty), mask=mask)


def _launch(x, w, out, rows=None, **flags):
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return
    flags = {"DROP_LAST": False, "ASSUME_CONTIGUOUS": False, "WRITE_INPUT": False, **flags}
    _scale_kernel[(n_rows if rows is None else rows,)](
        x, w, out, n_cols, x.stride(0), x.stride(1), out.stride(0),
        BLOCK=triton.next_power_of_2(n_cols), **flags)


def scale(*, x, w, out):
    _launch(x, w, out)


def scale_ref(*, x, w, out):
    acc = torch.promote_types(x.dtype, torch.float32)
    out.copy_(x.to(acc) * w.to(acc) * 2.0)


def scale_any(**kwargs):
    """scale, taking any keyword: for specs whose tensors and params vary (tests/test_fuzz_specs.py)."""
    scale(x=kwargs["x"], w=kwargs["w"], out=kwargs["out"])


def scale_ref_any(**kwargs):
    """scale_ref, taking any keyword."""
    scale_ref(x=kwargs["x"], w=kwargs["w"], out=kwargs["out"])


def scale_off_by_one(*, x, w, out):
    _launch(x, w, out, DROP_LAST=True)


def scale_assumes_contiguous(*, x, w, out):
    _launch(x, w, out, ASSUME_CONTIGUOUS=True)


def scale_skips_last_row(*, x, w, out):
    _launch(x, w, out, rows=max(x.shape[0] - 1, 0))


def scale_writes_input(*, x, w, out):
    _launch(x, w, out, WRITE_INPUT=True)


_WORKSPACE: dict = {}


def scale_stale_workspace(*, x, w, out):
    """Accumulates into a cached workspace that is never cleared: the second call sees the first's sum."""
    key = (tuple(x.shape), x.dtype, x.device)
    ws = _WORKSPACE.setdefault(key, torch.zeros(x.shape, dtype=torch.float32, device=x.device))
    _launch(x, w, out)
    ws += out.float() * 1e-2
    out.copy_(out.float() + ws - out.float() * 1e-2)


def scale_nan_on_negative(*, x, w, out):
    _launch(x, w, out)
    out.copy_(torch.where(x < -3.0, torch.full_like(out, float("nan")), out))


def scale_sloppy(*, x, w, out):
    """Rounds through fp16 on the way: fine for fp16/bf16 tolerances, wrong at fp32's."""
    _launch(x, w, out)
    out.copy_(out.to(torch.float16).to(out.dtype))


def scale_zero_size_crash(*, x, w, out):
    block = 1024 // x.shape[0]  # divides by the row count: a 0-row input crashes
    del block
    _launch(x, w, out)


def scale_contiguous_only(*, x, w, out):
    if not x.is_contiguous():
        raise ValueError(f"scale_contiguous_only: x must be contiguous, got strides {tuple(x.stride())}")
    _launch(x, w, out)


def scale_launches_empty_grid(*, x, w, out):
    """Forgets the early return: a 0-row input launches a (0,) grid."""
    n_rows, n_cols = x.shape
    _scale_kernel[(n_rows,)](x, w, out, n_cols, x.stride(0), x.stride(1), out.stride(0),
                             BLOCK=triton.next_power_of_2(max(n_cols, 1)), DROP_LAST=False,
                             ASSUME_CONTIGUOUS=False, WRITE_INPUT=False)


def scale_returning(*, x, w, out):
    """A peer in the style of libraries that allocate their output: `out` untouched, the result returned."""
    acc = torch.promote_types(x.dtype, torch.float32)
    return (x.to(acc) * w.to(acc) * 2.0).to(x.dtype)


def scale_returning_two(*, x, w, out):
    return scale_returning(x=x, w=w, out=out), out


def scale_returning_wrong(*, x, w, out):
    return scale_returning(x=x, w=w, out=out)[:, :-1]  # a shape off by one column


def rotate_inplace_ref(*, x):
    """x <- x[:, ::-1] in place: the in-place shape of Liger's RoPE, whose calls compound."""
    x.copy_(x.flip(-1))


def rotate_inplace_returns_view(*, x):
    """Rotates in place and returns a view of x, as Liger's RoPE returns the q and k it rotated."""
    x.copy_(x.flip(-1))
    return x.view(x.shape)


def rotate_replays_a_copy(*, x):
    """Returns a fresh tensor (not a view of x), replayed for a buffer it has seen: wrong once x gets new values."""
    cache = rotate_replays_a_copy.__dict__.setdefault("cache", {})
    if x.data_ptr() not in cache:
        cache[x.data_ptr()] = x.flip(-1)
    return cache[x.data_ptr()]
