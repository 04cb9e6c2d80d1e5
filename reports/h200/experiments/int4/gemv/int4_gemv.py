"""An experiment: a decode GEMV for weight-only int4 (kernels/int4_matmul.py) at M = 1, on the CUDA cores.

At M = 1 to 4 a tensor-core tile of 16 rows does 4 to 16 times the work it needs, and the tile kernel's layout
shuffles of the dequantised weight into an MMA operand cost more than the multiply-adds themselves: Nsight Compute
found it bound by instruction latency at 15-18% of DRAM bandwidth (reports/h200/experiments/int4/). Here each
weight, once dequantised (``word_values``: two packed instructions per pair of values, rounded once to the
activations' type as the reference does), is widened to fp32 and multiplied into an fp32 accumulator per row of a,
on the CUDA cores, with no layout change: the accumulator has the weight tile's own shape and is summed across K
once, at the end. One K block is one quantisation group (16 words, 128 values of k), so each row's scale and zero
point are loaded once per block.

The weight must be readable as 32-bit words (K a multiple of 8, rows contiguous and 4-byte aligned: a
checkpoint's layout).

Status. The first version (commit 1ff8b2e: a [BLOCK_M, BLOCK_N, 16] accumulator for M = 1..16, no prefetch) was
swept on an H200 (int4_gemv_sweep-1.log): at M = 1 its best configuration tied the shipped tile kernel at
4096 x 4096 (11.84 us, 1.14x bf16) and lost at the other shapes and at every M from 2. Its SASS (sm_90, from
`harness matrix`'s compile) showed why: no load pipelining (Triton pipelines only the loads that feed a dot), and
shared-memory layout conversions with 18 barriers per iteration. This version (M = 1 only, the next group
prefetched by hand, activations loaded in the weight tile's layout: 4 barriers, none in the loop) compiles for
sm_90 and matches the reference under the interpreter. Its H200 sweep (int4_gemv_sweep-2.log, 2026-12-04) was
right and bitwise repeatable at every checked shape, and slower than the first version: at 4096 x 4096 its best
configuration took 13.82 us against the tile kernel's 12.29 and bf16's 12.80 (0.93x bf16), at 4096 x 14336 35.04
against 21.25, at 14336 x 4096 36.53 against 27.87. The shipped launcher keeps the tile kernel.

Superseded by kernels/int4_gemv.py (its sweep: ../decode/). This script and int4_gemv_sweep.py are kept with
their logs as the record of the two runs above; they run against commit 0b701d3 or earlier, whose int4_matmul
still had the two-launch split of K (``_workspace``, ``_reduce_splits``) they call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels import int4_matmul as q4
from kernels.common import needs_bf16_rounding, round_to_bf16
from kernels.int4_dequant import word_values

GROUP_WORDS = 16  # 128 values of k: one quantisation group, one K block


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
    """acc [BLOCK_N, 16] + w [BLOCK_N, 16] * a, with a loaded through pointers of w's own shape (each thread
    reads the activations of its own columns: no layout conversion, L1 hits after the first row)."""
    a = tl.load(a_ptrs, mask=mask, other=0.0).to(tl.float32)
    return acc + w.to(tl.float32) * a


@triton.jit
def int4_gemv_kernel(
    a_ptr, w_ptr, s_ptr, z_ptr, out_ptr, N, KU, KU_PER_SPLIT,
    stride_ak, stride_wn, stride_wk, stride_sn, stride_sg, stride_zn, stride_zg, stride_os, stride_on,
    BLOCK_N: tl.constexpr, IS_BF16: tl.constexpr, EMULATE: tl.constexpr, RNE_BF16: tl.constexpr,
):  # fmt: skip
    """c[0, n-block] (or split pid_k's fp32 partial of it) over words [pid_k * KU_PER_SPLIT, +KU_PER_SPLIT) of w,
    which the launcher passes viewed as int32 [N, K // 8]. KU_PER_SPLIT is a whole number of groups.

    Triton pipelines only the loads that feed a dot, so the next group's words, scales and zero points are
    loaded by hand one iteration ahead: the loop then waits on memory once, not once per group."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    BLOCK_U: tl.constexpr = 16  # GROUP_WORDS
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_u = tl.arange(0, BLOCK_U)
    rn = (offs_n % N).to(tl.int64)  # rows past the edge read a valid row again; the store is masked
    u_lo = pid_k * KU_PER_SPLIT
    u_hi = min(KU, u_lo + KU_PER_SPLIT)
    w_ptrs = w_ptr + rn[:, None] * stride_wn + (u_lo + offs_u)[None, :] * stride_wk
    a_ptrs = a_ptr + (8 * (u_lo + offs_u))[None, :] * stride_ak + 0 * rn[:, None]  # w's shape: see _fma
    s_ptrs = s_ptr + rn * stride_sn
    z_ptrs = z_ptr + rn * stride_zn
    g = u_lo // BLOCK_U
    b_next = tl.load(w_ptrs, mask=(offs_u < u_hi - u_lo)[None, :], other=0)
    s_next = tl.load(s_ptrs + g * stride_sg)
    z_next = tl.load(z_ptrs + g * stride_zg)
    acc = tl.zeros((BLOCK_N, BLOCK_U), dtype=tl.float32)
    for u0 in range(u_lo, u_hi, BLOCK_U):
        b = b_next
        s = tl.broadcast_to(s_next[:, None], b.shape)
        z = tl.broadcast_to(z_next[:, None], b.shape)
        u_ok = (offs_u < u_hi - u0)[None, :] & (rn >= 0)[:, None]  # the last group may be partial
        w_ptrs += BLOCK_U * stride_wk
        g_next = min(u0 + BLOCK_U, u_hi - 1) // BLOCK_U  # the last iteration reloads its own group
        b_next = tl.load(w_ptrs, mask=(offs_u < u_hi - u0 - BLOCK_U)[None, :], other=0)
        s_next = tl.load(s_ptrs + g_next * stride_sg)
        z_next = tl.load(z_ptrs + g_next * stride_zg)
        w0, w1, w2, w3, w4, w5, w6, w7 = word_values(b, s, z, IS_BF16, EMULATE)
        # a masked word reads 0 and dequantises to the finite -z * s; a's masked 0 makes its product 0
        acc = _fma(acc, w0, a_ptrs, u_ok)
        acc = _fma(acc, w1, a_ptrs + stride_ak, u_ok)
        acc = _fma(acc, w2, a_ptrs + 2 * stride_ak, u_ok)
        acc = _fma(acc, w3, a_ptrs + 3 * stride_ak, u_ok)
        acc = _fma(acc, w4, a_ptrs + 4 * stride_ak, u_ok)
        acc = _fma(acc, w5, a_ptrs + 5 * stride_ak, u_ok)
        acc = _fma(acc, w6, a_ptrs + 6 * stride_ak, u_ok)
        acc = _fma(acc, w7, a_ptrs + 7 * stride_ak, u_ok)
        a_ptrs += 8 * BLOCK_U * stride_ak
    c = tl.sum(acc, axis=1)
    if RNE_BF16:
        c = round_to_bf16(c)
    tl.store(out_ptr + pid_k.to(tl.int64) * stride_os + offs_n * stride_on, c.to(out_ptr.dtype.element_ty),
             mask=offs_n < N)


def int4_gemv(*, a, w, scales, zeros, c, config: GemvConfig | None = None) -> None:
    """c = a @ dequant(w).T for a of one row, w read as words; each split a whole number of groups."""
    m, k = a.shape
    if m != 1 or not q4._words_ok(w, k):
        raise ValueError("int4_gemv: one row of a, and w readable as 32-bit words")
    interp = q4.interpreted(a)
    cfg = config or gemv_config(m, w.shape[0], k, q4.sm_count(a.device), interp)
    n = w.shape[0]
    ku = k // 8
    ku_per_split = triton.cdiv(triton.cdiv(k, q4.GROUP_SIZE), cfg.split_k) * (q4.GROUP_SIZE // 8)
    split = triton.cdiv(ku, ku_per_split)
    out, out_strides = q4._workspace(split, c)
    wu = w.view(torch.int32)
    int4_gemv_kernel[(triton.cdiv(n, cfg.block_n), split)](
        a, wu, scales, zeros, out, n, ku, ku_per_split,
        a.stride(1), wu.stride(0), wu.stride(1), scales.stride(0), scales.stride(1), zeros.stride(0),
        zeros.stride(1), out_strides[0], out_strides[2],
        BLOCK_N=cfg.block_n, IS_BF16=a.dtype == torch.bfloat16, EMULATE=interp,
        RNE_BF16=needs_bf16_rounding(c) and split == 1, num_warps=cfg.num_warps, num_stages=cfg.num_stages)  # fmt: skip
    if split > 1:
        q4._reduce_splits(out, c, split)
