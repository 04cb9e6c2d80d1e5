"""The row-scale kernel of broken_kernels as the kernel's own PyTorch op (a spec's ``[kernel] op``): one
correct registration and planted-bug ones, each caught by the op check that targets it (tests/test_ops.py).

The ops live in their own namespace, so they never clash with the harness's ``kernel_harness`` ops.
"""

from __future__ import annotations

import torch

from tests.planted.broken_kernels import _launch


def _scale_op(name: str, fake):
    @torch.library.custom_op(f"kernel_harness_planted::{name}", mutates_args=())
    def op(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        _launch(x, w, out)
        return out

    op.register_fake(fake)
    return op


def _right_fake(x, w):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _fake_one_column_short(x, w):  # the declared shape is wrong: the kernel writes every column
    return torch.empty((x.shape[0], x.shape[1] - 1), dtype=x.dtype, device=x.device)


def _fake_specialising_rows(x, w):  # int() of a SymInt: the size is a constant of the graph, never dynamic
    return torch.empty((int(x.shape[0]), x.shape[1]), dtype=x.dtype, device=x.device)


def _fake_branching_on_rows(x, w):  # a size test: a guard on rows <= 5, so 6 rows need a second graph
    if x.shape[0] <= 5:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


scale_op = _scale_op("scale", _right_fake)
scale_op_wrong_fake = _scale_op("scale_wrong_fake", _fake_one_column_short)
scale_op_specialising_fake = _scale_op("scale_specialising_fake", _fake_specialising_rows)
scale_op_branching_fake = _scale_op("scale_branching_fake", _fake_branching_on_rows)


def scale_writes_x(*, x, w, out):
    """Writes its result into x too, which the spec declares read-only: the op's schema says x is not mutated."""
    _launch(x, w, out, WRITE_INPUT=True)
