"""GeGLU with the tanh GELU, as vLLM's ``gelu_tanh_and_mul``: ``out = gelu_tanh(x[:, :d]) * x[:, d:]``.

x is ``[tokens, 2 * d]`` and out ``[tokens, d]``; computed in fp32 and rounded once to out's dtype. The
kernel is gelu_tanh's with its GATED flag (see kernels/gelu_tanh.py for how tanh is avoided), tiled as
silu_and_mul, whose layout is the same.
"""

from __future__ import annotations

import torch

from kernels.common import Plans, no_launch, signature
from kernels.gelu_tanh import GeluConfig, is_column_major, rows_plan


def _check_shapes(x: torch.Tensor, out: torch.Tensor) -> None:
    if x.dim() != 2 or x.shape[1] % 2 or out.shape != (x.shape[0], x.shape[1] // 2):
        raise ValueError(
            f"gelu_tanh_and_mul: expected x [tokens, 2 * d] and out [tokens, d]; got x {tuple(x.shape)}, "
            f"out {tuple(out.shape)}"
        )


_PLANS = Plans()


def gelu_tanh_and_mul(*, x: torch.Tensor, out: torch.Tensor) -> None:
    """Triton kernel; any strides on x and out."""
    _PLANS.run(signature(x, out), lambda: _plan(x, out), x, out)


def _plan(x: torch.Tensor, out: torch.Tensor):
    _check_shapes(x, out)
    if out.numel() == 0:
        return no_launch
    return rows_plan(x, out, True, GeluConfig.for_rows(out.shape[0], out.shape[1], is_column_major(x)))


def gelu_tanh_and_mul_ref(*, x: torch.Tensor, out: torch.Tensor) -> None:
    """Plain torch, in fp32 or the input's precision if higher."""
    acc = torch.promote_types(x.dtype, torch.float32)
    d = x.shape[-1] // 2
    xf = x.to(acc)
    out.copy_(torch.nn.functional.gelu(xf[..., :d], approximate="tanh") * xf[..., d:])


def gelu_tanh_and_mul_liger(*, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Liger-Kernel 0.8's GEGLU (tanh GELU of its first argument times its second), returning Liger's own
    output.

    Like its SiLU-and-mul, Liger takes gate and up as two tensors and makes each contiguous, so from vLLM's
    fused [gate | up] layout it copies both halves first: those copies are in its time, as they would be for
    any caller holding that layout."""
    from liger_kernel.ops.geglu import LigerGELUMulFunction

    if out.numel() == 0:
        return out
    d = x.shape[-1] // 2
    return LigerGELUMulFunction.apply(x[..., :d], x[..., d:])
