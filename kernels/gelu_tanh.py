"""GELU, tanh approximation: ``y = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))``.

Elementwise on any shape; computed in fp32 and rounded once to out's dtype. The kernel here also serves
gelu_tanh_and_mul (``GATED``: the activation of the first half of each row times the second half).

No tanh is evaluated: ``0.5 * (1 + tanh(u)) == 1 / (1 + exp(-2u))`` exactly, so ``y = x / (1 + exp(-2u))``.
That needs only exp, which the Triton interpreter and every Triton version have (``tl.math.tanh`` does not
exist in all of them, and libdevice does not run under the interpreter), and it has no cancellation: tanh
written as ``1 - 2 / (exp(2u) + 1)`` loses the result's relative accuracy where 1 + tanh(u) is near 0 (x
below about -3), this form keeps it. For u < -44, exp(-2u) overflows to inf and y = x / inf = -0, the limit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.common import Plans, cdiv, needs_bf16_rounding, next_power_of_2, no_launch, round_to_bf16, signature
from kernels.fastlaunch import FastLaunch
from kernels.silu_and_mul import SiluAndMulConfig

# Flat (contiguous) elements per program, at most.
_MAX_FLAT_BLOCK = 4096
_MIN_FLAT_BLOCK = 512
# About two waves of programs on a 132-SM H100/H200: smaller inputs get smaller blocks, not fewer programs.
_MIN_PROGRAMS = 264
# Past this many programs a thread takes 32 elements (four 16-byte loads of bf16 in flight), else 16. Measured on
# the H200 (reports/h200/experiments/gelu_tanh/, bf16): 8192 x 16384 in 4096-element programs took 126.9 us at 4
# warps against 130.2 at 8 (a copy of the same bytes 124.9); 64 x 16384, 256 programs, 4.45 us at 4 warps
# against 3.78 at 8: with under two waves, fewer threads a program leave SMs idle.
_MANY_PROGRAMS = 4 * _MIN_PROGRAMS


@dataclass(frozen=True)
class GeluConfig:
    block_m: int  # rows per program
    block_n: int  # (output) columns per program
    num_warps: int

    @classmethod
    @functools.lru_cache(maxsize=256)
    def for_flat(cls, numel: int) -> GeluConfig:
        """A contiguous input seen as one row of ``numel`` elements."""
        per_program = next_power_of_2(cdiv(numel, _MIN_PROGRAMS))
        block_n = min(max(per_program, _MIN_FLAT_BLOCK), _MAX_FLAT_BLOCK)
        per_thread = 32 if cdiv(numel, block_n) >= _MANY_PROGRAMS else 16
        return cls(block_m=1, block_n=block_n, num_warps=min(max(block_n // (32 * per_thread), 1), 8))

    @classmethod
    @functools.lru_cache(maxsize=256)
    def for_rows(cls, n_rows: int, d: int, column_major: bool) -> GeluConfig:
        """A strided [rows, d] output whose input rows are read at the same columns: silu_and_mul's tiling."""
        c = SiluAndMulConfig.for_shape(n_rows, d, column_major)
        # a column-major tile is transposed for out's row-major store; at 2 warps (128 x 8) the gated GELU
        # spilled on sm_100 (`harness matrix`), at 4 it does not
        num_warps = max(c.num_warps, 4) if column_major else c.num_warps
        return cls(block_m=c.block_m, block_n=c.block_n, num_warps=num_warps)


@triton.jit
def gelu_tanh_f32(a):
    """The tanh GELU of fp32 ``a`` as ``a * sigmoid(2u)``, with u the tanh argument."""
    u = 0.7978845608028654 * (a + 0.044715 * a * a * a)  # sqrt(2 / pi)
    return a / (1.0 + tl.exp(-2.0 * u))


@triton.jit
def _gelu_kernel(
    x_ptr, out_ptr, n_rows, d, n_col_blocks,
    stride_xm, stride_xn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GATED: tl.constexpr, RNE_BF16: tl.constexpr,
):  # fmt: skip
    # one flat grid axis: row blocks can pass the 65535 limit of the second axis
    pid = tl.program_id(0)
    pid_m = pid // n_col_blocks
    pid_n = pid % n_col_blocks
    # int64 offsets: the huge tier has more than 2**31 elements
    rows = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < n_rows)[:, None] & (cols < d)[None, :]
    x_rows = x_ptr + rows[:, None] * stride_xm
    a = tl.load(x_rows + cols[None, :] * stride_xn, mask=mask, other=0.0).to(tl.float32)
    y = gelu_tanh_f32(a)
    if GATED:
        y = y * tl.load(x_rows + (cols + d)[None, :] * stride_xn, mask=mask, other=0.0).to(tl.float32)
    if RNE_BF16:
        y = round_to_bf16(y)
    o_ptrs = out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on
    tl.store(o_ptrs, y.to(out_ptr.dtype.element_ty), mask=mask)


_gelu_launch = FastLaunch(_gelu_kernel)


def rows_plan(x: torch.Tensor, out: torch.Tensor, gated: bool, cfg: GeluConfig):
    """``launch(x, out)``: ``out[r, c] = gelu(x[r, c]) (* x[r, c + d])`` for 2-D x and out of any strides,
    d = out's columns, and for any tensors of the same call signature (kernels.common.Plans) as these, or with
    their storage where these are views of it (the kernel reads pointers and the strides worked out here)."""
    n_rows, d = out.shape
    n_col_blocks = cdiv(d, cfg.block_n)
    grid = (cdiv(n_rows, cfg.block_m) * n_col_blocks,)
    scalars = (n_rows, d, n_col_blocks, x.stride(0), x.stride(1), out.stride(0), out.stride(1))
    # the signature fixes every part of FastLaunch's key: the launch is kept per device and stream
    pinned = _gelu_launch.pinned(grid, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, GATED=gated,
                                 RNE_BF16=needs_bf16_rounding(out), num_warps=cfg.num_warps)

    def launch(x, out):
        pinned(x, out, *scalars)
    return launch


def is_column_major(x: torch.Tensor) -> bool:
    return x.stride(0) == 1 and x.stride(1) != 1


_PLANS = Plans()


def gelu_tanh(*, x: torch.Tensor, out: torch.Tensor) -> None:
    """Triton kernel: any shape when x and out are contiguous (one flat pass), any strides when 2-D."""
    _PLANS.run(signature(x, out), lambda: _plan(x, out), x, out)


def _plan(x: torch.Tensor, out: torch.Tensor):
    if out.shape != x.shape:
        raise ValueError(f"gelu_tanh: out must have x's shape; got x {tuple(x.shape)}, out {tuple(out.shape)}")
    if out.numel() == 0:
        return no_launch
    if x.is_contiguous() and out.is_contiguous():  # the flat pass reads the tensors' pointers: no view per call
        return rows_plan(x.view(1, -1), out.view(1, -1), False, GeluConfig.for_flat(x.numel()))
    if x.dim() == 2:
        return rows_plan(x, out, False, GeluConfig.for_rows(x.shape[0], x.shape[1], is_column_major(x)))
    raise ValueError(f"gelu_tanh: non-contiguous tensors must be 2-D; got x {tuple(x.shape)} with strides "
                     f"{tuple(x.stride())}, out strides {tuple(out.stride())}")


def gelu_tanh_ref(*, x: torch.Tensor, out: torch.Tensor) -> None:
    """Plain torch, in fp32 or the input's precision if higher."""
    acc = torch.promote_types(x.dtype, torch.float32)
    out.copy_(torch.nn.functional.gelu(x.to(acc), approximate="tanh"))


def gelu_tanh_torch(*, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """torch.nn.functional.gelu(approximate="tanh") on the case's own dtype (one fused kernel, fp32 inside),
    returning its own output so the timing holds no copy into ``out``."""
    return torch.nn.functional.gelu(x, approximate="tanh")
