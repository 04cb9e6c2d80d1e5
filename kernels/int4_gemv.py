"""The decode path of weight-only int4 (kernels/int4_matmul.py): a GEMV for a few rows of activations.

At M = 1 to 4 a tensor-core tile of 16 rows does 4 to 16 times the work it needs, and the tile kernel's layout
shuffles of the dequantised weight into an MMA operand cost more than the multiply-adds themselves: Nsight Compute
found it bound by instruction latency at 15-18% of DRAM bandwidth (reports/h200/experiments/int4/). Here each
weight, once dequantised (``word_values``: two packed instructions per pair of values, rounded once to the
activations' type as the reference does), is widened to fp32 and multiplied into an fp32 accumulator per row of a,
on the CUDA cores, with no layout change: the accumulator has the weight tile's own shape and is summed across K
once, at the end. One K block is one quantisation group (16 words, 128 values of k), so each row's scale and zero
point are loaded once per block.

The weight must be readable as 32-bit words (K a multiple of 8, rows contiguous and 4-byte aligned: a
checkpoint's layout); the launcher sends everything else to the tile kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from kernels.common import round_to_bf16
from kernels.int4_dequant import word_values

GROUP_WORDS = 16  # 128 values of k: one quantisation group, one K block
# Rows of a up to which the GEMV runs (the tile kernel above): the products it does on the CUDA cores grow with M,
# the tile kernel's do not.
GEMV_MAX_M = 4


@dataclass(frozen=True)
class GemvConfig:
    block_n: int  # rows of w per program
    split_k: int  # K ranges, each reduced by the tile kernel's split-K reduction
    num_warps: int
    num_stages: int


def gemv_config(m: int, n: int, k: int, sms: int, interpreted: bool) -> GemvConfig:
    """Launch configuration for an [m, k] x [n, k] decode GEMV.

    Under the interpreter: one block of rows (up to 128) and a split of 2 where K has more than one group, so CPU
    runs check the split path. On a GPU: enough programs for several per multiprocessor, each streaming at least
    four groups."""
    groups = triton.cdiv(k, GROUP_WORDS * 8)
    if interpreted:
        return GemvConfig(min(max(triton.next_power_of_2(n), 16), 128), 2 if groups > 1 else 1, 4, 1)
    block_n = 64
    tiles = triton.cdiv(n, block_n)
    split = 1
    while tiles * split * 2 <= 4 * sms and groups // (split * 2) >= 4:
        split *= 2
    return GemvConfig(block_n, split, 4, 3)


@triton.jit
def _fma(acc, w, a_ptrs, mask):
    """acc [BLOCK_M, BLOCK_N, 16] + w [BLOCK_N, 16] * a [BLOCK_M, 16] in fp32, each row of a against every row of w."""
    a = tl.load(a_ptrs, mask=mask, other=0.0).to(tl.float32)
    return acc + w.to(tl.float32)[None, :, :] * a[:, None, :]


@triton.jit
def int4_gemv_kernel(
    a_ptr, w_ptr, s_ptr, z_ptr, out_ptr, M, N, KU, KU_PER_SPLIT,
    stride_am, stride_ak, stride_wn, stride_wk, stride_sn, stride_sg, stride_zn, stride_zg,
    stride_os, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_BF16: tl.constexpr, EMULATE: tl.constexpr,
    RNE_BF16: tl.constexpr,
):  # fmt: skip
    """c[:, n-block] (or split pid_k's fp32 partial of it) over words [pid_k * KU_PER_SPLIT, +KU_PER_SPLIT) of w,
    which the launcher passes viewed as int32 [N, K // 8]. KU_PER_SPLIT is a whole number of groups."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    BLOCK_U: tl.constexpr = 16  # GROUP_WORDS
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_u = tl.arange(0, BLOCK_U)
    rn = (offs_n % N).to(tl.int64)  # rows past the edge read a valid row again; the store is masked
    m_ok = offs_m < M
    u_lo = pid_k * KU_PER_SPLIT
    u_hi = min(KU, u_lo + KU_PER_SPLIT)
    w_ptrs = w_ptr + rn[:, None] * stride_wn + (u_lo + offs_u)[None, :] * stride_wk
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (8 * (u_lo + offs_u))[None, :] * stride_ak
    acc = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_U), dtype=tl.float32)
    for u0 in range(u_lo, u_hi, BLOCK_U):
        g = u0 // BLOCK_U
        u_ok = offs_u < u_hi - u0  # the last group may be partial
        b = tl.load(w_ptrs, mask=u_ok[None, :], other=0)
        s = tl.broadcast_to(tl.load(s_ptr + rn * stride_sn + g * stride_sg)[:, None], b.shape)
        z = tl.broadcast_to(tl.load(z_ptr + rn * stride_zn + g * stride_zg)[:, None], b.shape)
        w0, w1, w2, w3, w4, w5, w6, w7 = word_values(b, s, z, IS_BF16, EMULATE)
        am = m_ok[:, None] & u_ok[None, :]
        # a masked word reads 0 and dequantises to the finite -z * s; a's masked 0 makes its product 0
        acc = _fma(acc, w0, a_ptrs, am)
        acc = _fma(acc, w1, a_ptrs + stride_ak, am)
        acc = _fma(acc, w2, a_ptrs + 2 * stride_ak, am)
        acc = _fma(acc, w3, a_ptrs + 3 * stride_ak, am)
        acc = _fma(acc, w4, a_ptrs + 4 * stride_ak, am)
        acc = _fma(acc, w5, a_ptrs + 5 * stride_ak, am)
        acc = _fma(acc, w6, a_ptrs + 6 * stride_ak, am)
        acc = _fma(acc, w7, a_ptrs + 7 * stride_ak, am)
        w_ptrs += BLOCK_U * stride_wk
        a_ptrs += 8 * BLOCK_U * stride_ak
    c = tl.sum(acc, axis=2)
    if RNE_BF16:
        c = round_to_bf16(c)
    out_ptrs = out_ptr + pid_k.to(tl.int64) * stride_os + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, c.to(out_ptr.dtype.element_ty), mask=m_ok[:, None] & (offs_n < N)[None, :])
