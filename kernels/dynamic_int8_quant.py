"""Per-token dynamic int8 quantisation, as vLLM's ``dynamic_scaled_int8_quant``.

For each row of ``x`` (the last dimension is the token's hidden vector): ``scale = max|x| / 127`` and
``q = round_half_even(x * (127 / max|x|))`` saturated to [-128, 127]; an all-zero row gets ``scale = 0`` and
``q = 0``. vLLM multiplies by the inverse scale rather than dividing by the scale, and so do the kernel and
the reference here. Both divide correctly rounded: the kernel with ``tl.div_rn`` (as CUDA C's ``127.0f / x``;
Triton's plain fp32 ``/`` is an approximate divide on a GPU), the reference with a tensor-by-tensor divide
(torch computes ``127.0 / t`` as ``t.reciprocal() * 127``, two roundings, which moved products across .5
ties: 358 off-by-one elements in 5.75 M before this was fixed). So both round the same fp32 product and agree
bit for bit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from kernels.common import interpreted, next_power_of_2
from kernels.fastlaunch import FastLaunch

# Longest row held in registers in one pass; longer rows are read twice (absmax, then quantise).
_MAX_SINGLE_BLOCK = 8192
_BLOCK = 4096


@dataclass(frozen=True)
class QuantConfig:
    block_n: int
    num_warps: int
    single_pass: bool

    @classmethod
    @functools.lru_cache(maxsize=256)
    def for_shape(cls, cols: int) -> QuantConfig:
        single = cols <= _MAX_SINGLE_BLOCK
        block_n = next_power_of_2(max(cols, 1)) if single else _BLOCK
        # about 8 elements per thread: 16-byte loads of 16-bit inputs, no spills
        return cls(block_n=block_n, num_warps=max(1, min(16, block_n // 256)), single_pass=single)


@triton.jit
def _round_half_even(y, INTERPRET: tl.constexpr):
    if INTERPRET:
        # libdevice.rint does not run under the Triton interpreter. floor(y + 0.5) is exact for |y| < 2**22
        # (always so after the 127 / absmax scaling), and a tie that landed on an odd integer steps back.
        # Not on a GPU: there the compiler contracts x * inv + 0.5 into one FMA, which rounds the product
        # differently from the tie test (on the H200: -63.5 became -63 in up to 0.08 % of elements).
        r = tl.floor(y + 0.5)
        odd = (r - 2.0 * tl.floor(r * 0.5)) != 0.0
        return tl.where((r - y == 0.5) & odd, r - 1.0, r)
    else:
        return libdevice.rint(y)  # round half to even, as vLLM's float_to_int8_rn (nearbyint)


@triton.jit
def _inverse_scale(absmax):
    safe = tl.where(absmax == 0.0, 1.0, absmax)  # no 127 / 0 evaluated even where it is discarded
    return tl.where(absmax == 0.0, 0.0, tl.div_rn(127.0, safe))


@triton.jit
def _quantise(x, inv, INTERPRET: tl.constexpr):
    q = _round_half_even(x * inv, INTERPRET)
    return tl.minimum(tl.maximum(q, -128.0), 127.0).to(tl.int8)


@triton.jit
def _quant_kernel(x_ptr, q_ptr, s_ptr, n_cols, stride_xm, stride_xn, stride_qm, stride_qn, stride_s,
                  BLOCK_N: tl.constexpr, SINGLE: tl.constexpr, INTERPRET: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    q_row = q_ptr + row * stride_qm
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    if SINGLE:
        mask = cols < n_cols
        x = tl.load(x_row + cols * stride_xn, mask=mask, other=0.0).to(tl.float32)
        absmax = tl.max(tl.abs(x), axis=0)
        inv = _inverse_scale(absmax)
        tl.store(q_row + cols * stride_qn, _quantise(x, inv, INTERPRET), mask=mask)
    else:
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            x = tl.load(x_row + c * stride_xn, mask=c < n_cols, other=0.0).to(tl.float32)
            acc = tl.maximum(acc, tl.abs(x))
        absmax = tl.max(acc, axis=0)
        inv = _inverse_scale(absmax)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            x = tl.load(x_row + c * stride_xn, mask=c < n_cols, other=0.0).to(tl.float32)
            tl.store(q_row + c * stride_qn, _quantise(x, inv, INTERPRET), mask=c < n_cols)
    tl.store(s_ptr + row * stride_s, tl.div_rn(absmax, 127.0))


def _check(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> None:
    if x.dim() != 2 or q.shape != x.shape or scale.shape != (x.shape[0], 1):
        raise ValueError(f"expected x [T, H], q [T, H], scale [T, 1]; got {tuple(x.shape)}, {tuple(q.shape)}, "
                         f"{tuple(scale.shape)}")
    if q.dtype != torch.int8 or scale.dtype != torch.float32:
        raise ValueError(f"q must be int8 and scale fp32, got {q.dtype} and {scale.dtype}")


_quant_launch = FastLaunch(_quant_kernel)


def dynamic_int8_quant(*, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> None:
    _check(x, q, scale)
    tokens, hidden = x.shape
    if tokens == 0:
        return
    if hidden == 0:  # no elements: nothing to scale by; vLLM would divide 0 by 127
        scale.zero_()
        return
    cfg = QuantConfig.for_shape(hidden)
    _quant_launch[(tokens,)](x, q, scale, hidden, x.stride(0), x.stride(1), q.stride(0), q.stride(1),
                             scale.stride(0), BLOCK_N=cfg.block_n, SINGLE=cfg.single_pass,
                             INTERPRET=interpreted(x), num_warps=cfg.num_warps)


def dynamic_int8_quant_ref(*, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> None:
    """Plain torch, in fp32 on the input's values (the spec runs it at the input precision)."""
    _check(x, q, scale)
    if x.shape[1] == 0:
        scale.zero_()
        return
    xf = x.to(torch.float32)
    absmax = xf.abs().amax(dim=-1, keepdim=True)
    # full_like(127) / absmax, not 127.0 / absmax: torch turns a scalar numerator into reciprocal * 127
    inv = torch.where(absmax == 0, torch.zeros_like(absmax), torch.full_like(absmax, 127.0) / absmax)
    scale.copy_(absmax / 127.0)
    q.copy_(torch.round(xf * inv).clamp_(-128, 127).to(torch.int8))  # torch.round: half to even
