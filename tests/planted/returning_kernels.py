"""Backends of tests/specs/planted_op.toml (out = x * w * 2) that return their outputs instead of writing the
harness's buffers, as libraries do: one correct, and planted bugs that only the op items can see once the op
returns what the backend returned (tests/test_ops_returning.py)."""

from __future__ import annotations


def scale_returns(*, x, w, out):
    """Correct: the result as a new tensor; ``out`` is left unwritten."""
    return x * w * 2


def scale_returns_a_column_short(*, x, w, out):
    """Planted: returns one column fewer than the spec's (and the op's fake) shape."""
    return (x * w * 2)[:, :-1]


def scale_returns_fp64(*, x, w, out):
    """Planted: returns float64 whatever the inputs' dtype, where the spec says the case dtype."""
    return (x * w * 2).double()


def scale_returns_x(*, x, w, out):
    """Returns its input itself (a library's identity shortcut): the op must not hand out an alias of it."""
    return x


def scale_rows_keepdim(*, x, w, out):
    """The row sums of x * w * 2 as [rows, 1]."""
    return (x * w * 2).sum(dim=-1, keepdim=True)


def scale_rows(*, x, w, out):
    """The row sums of x * w * 2 as [rows]."""
    return (x * w * 2).sum(dim=-1)


def double_in_place_returned(*, x):
    """An in-place kernel that returns its result as a new tensor instead of writing x."""
    return x * 2
