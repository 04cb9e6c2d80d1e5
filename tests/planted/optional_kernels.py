"""A kernel with optional arguments (tests/specs/planted_optional.toml): loss = reduction(x * w * scale), where
w (a tensor) and scale (a float) may be None and the loss is 0-d unless reduction is "none". The Triton
launcher returns the loss (a new tensor), the reference writes the harness's buffer; each planted bug is one
a spec with optional arguments must catch (tests/test_spec_optional.py)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 64


@triton.jit
def _scaled_kernel(x_ptr, w_ptr, y_ptr, cols, stride_r, stride_c, scale, HAS_W: tl.constexpr,
                   BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    for start in range(0, cols, BLOCK):
        c = start + offs
        mask = c < cols
        x = tl.load(x_ptr + row * stride_r + c * stride_c, mask=mask).to(tl.float32)
        if HAS_W:
            x = x * tl.load(w_ptr + c, mask=mask).to(tl.float32)
        tl.store(y_ptr + row * cols + c, x * scale, mask=mask)


def _scaled(x, w, scale, use_w: bool = True) -> torch.Tensor:
    """x * w * scale in fp32 (w None: x * scale; scale None: 1)."""
    y = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    if x.numel():
        _scaled_kernel[(x.shape[0],)](x, w if use_w else None, y, x.shape[1], x.stride(0), x.stride(1),
                                      1.0 if scale is None else scale, HAS_W=use_w and w is not None, BLOCK=BLOCK)
    return y


def _reduce(y: torch.Tensor, reduction: str, dtype) -> torch.Tensor:
    out = y.sum() if reduction == "sum" else y.mean() if reduction == "mean" else y
    return out.to(dtype)


def loss(*, x, w, loss, reduction, scale):
    """The correct launcher: returns the loss, leaving the harness's buffer unwritten."""
    return _reduce(_scaled(x, w, scale), reduction, x.dtype)


def loss_ref(*, x, w, loss, reduction, scale):
    y = x * w if w is not None else x
    y = y * scale if scale is not None else y
    loss.copy_(y.sum() if reduction == "sum" else y.mean() if reduction == "mean" else y)


def loss_ignores_w(*, x, w, loss, reduction, scale):
    """Planted: drops the optional weight even where it is passed."""
    return _reduce(_scaled(x, w, scale, use_w=False), reduction, x.dtype)


def loss_scale_none_is_zero(*, x, w, loss, reduction, scale):
    """Planted: reads an absent scale as 0 (the sentinel the spec no longer passes)."""
    return _reduce(_scaled(x, w, scale or 0.0), reduction, x.dtype)


def loss_mean_as_sum(*, x, w, loss, reduction, scale):
    """Planted: sums where the string says mean."""
    return _reduce(_scaled(x, w, scale), "sum" if reduction == "mean" else reduction, x.dtype)


def loss_reduced_as_1(*, x, w, loss, reduction, scale):
    """Planted: a reduced loss of shape [1] (the old workaround), where the spec's shape says 0-d."""
    out = _reduce(_scaled(x, w, scale), reduction, x.dtype)
    return out.reshape(1) if out.dim() == 0 else out
