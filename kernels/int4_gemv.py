"""The weight-only int4 GEMM's decode path (kernels/int4_matmul.py dispatches to it): a GEMV on the CUDA cores for
one to a few rows of activations, with its split of K reduced inside the same launch.

Why not the tile kernel at M = 1. Its 16-row tensor-core tile does 16 times the multiply-adds one token needs, the
dequantised weight is shuffled into an MMA operand, and its split of K needs a second launch to sum the partials.
Nsight Compute found it bound by instruction latency at 15-18% of DRAM bandwidth (reports/h200/experiments/int4/).
Here each program streams ``BLOCK_N`` rows of w through ``BLOCK_U`` 32-bit words (8 values each) per iteration,
the next iteration's words, scales and zero points loaded one iteration ahead (Triton pipelines only the loads
that feed a dot). Each word is dequantised with the tile kernel's packed bit trick (``word_values``: rounded once
to the activations' type, as the reference rounds), widened to fp32 and multiplied into an fp32 accumulator of the
word tile's own shape, one per row of a: no layout change in the loop; it is summed along K once, at the end.

Split K in one launch. Where N alone gives too few programs, each program takes a range of K (whole groups) and
writes its fp32 partial row to a workspace; it then takes a ticket from a per-tile counter. The program drawing
the last ticket sums every split's partial in split order (one tile load, one fixed reduction tree) and rounds
once into c, then resets the counter for the next launch. Which program finishes last does not change the sum:
the result is deterministic, without a second launch or floating-point atomics. The workspace and counters are
kept per device and stream, so launches on two streams never share them.

The weight must be readable as 32-bit words (K a multiple of 8, rows contiguous and 4-byte aligned: a
checkpoint's layout); kernels/int4_matmul.py keeps its tile kernel for every other layout and for larger M.

Status (2026-12-05, on an H100; no H200 could be started that day): right on the GPU (the 102 generated full-tier
tests and the sweep's checks, every configuration bitwise repeatable) and under the interpreter. At M = 1 it is
1.6x the bf16 GEMM at N = K = 4096 (10.1 us), 2.0x at K = 14336 and 1.8x at N = 14336, a few percent ahead of the
tile kernel; at M = 4 the tile kernel is faster (11 us against 17), so only M = 1 is routed here. The XOR floor
(this loop's loads with no arithmetic) takes 5.6 us at 4096 x 4096, 2.9x the bf16 GEMM: the dequantisation and the
multiply-adds cost the other 4.5 us (reports/h100/experiments/int4-decode/).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.common import CachedAutotune, cdiv, interpreted, needs_bf16_rounding, round_to_bf16
from kernels.fastlaunch import FastLaunch
from kernels.int4_dequant import word_values
from kernels.splitk import SPLIT_MAX, scratch

GROUP_WORDS = 16  # a quantisation group of 128 values of k is 16 words
_SPLIT_TILE = tl.constexpr(SPLIT_MAX)  # the reduction's tile height
GEMV_MAX_M = 4  # rows of a it takes: each is one more multiply-add per weight (the tile kernel takes more)


@dataclass(frozen=True)
class GemvConfig:
    block_n: int  # rows of w per program
    block_u: int  # words of each row per iteration: 16 is one quantisation group
    split_k: int  # K ranges (1: none), each a whole number of groups
    num_warps: int

    def __post_init__(self):
        if not 1 <= self.split_k <= SPLIT_MAX:
            raise ValueError(f"split_k {self.split_k} must lie in [1, {SPLIT_MAX}]")


@triton.jit
def _fma(acc, w, a, IS_FP32: tl.constexpr):
    """acc + w * a in fp32; a [BLOCK_U], broadcast along the rows (its load takes the rows' slice layout: no
    conversion through shared memory in the loop)."""
    return acc + a[None, :] * (w if IS_FP32 else w.to(tl.float32))


@triton.jit
def _pair(p, IS_BF16: tl.constexpr):
    """Two 16-bit activations read as one int32 (little-endian: the lower k in the low half), as fp32: half the
    loads of reading them one by one, and for bf16 no more instructions (a shift or a mask is the conversion)."""
    if IS_BF16:
        lo = (p << 16).to(tl.float32, bitcast=True)
        hi = (p & -65536).to(tl.float32, bitcast=True)
    else:
        lo = (p & 0xFFFF).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        hi = (p >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    return lo, hi


@triton.jit
def _fma_word(acc, w0, w1, w2, w3, w4, w5, w6, w7, a_ptr, u, ok, stride_ak, A_PAIRS: tl.constexpr,
              IS_BF16: tl.constexpr, EMULATE: tl.constexpr):  # fmt: skip
    """acc + the eight values of each word times their activations, a[8u + i] for nibble i. With A_PAIRS, a is
    passed as int32 pairs (contiguous and 4-byte aligned): four loads a word instead of eight."""
    if A_PAIRS:
        p_ptrs = a_ptr + 4 * u
        a0, a1 = _pair(tl.load(p_ptrs, mask=ok, other=0), IS_BF16)
        a2, a3 = _pair(tl.load(p_ptrs + 1, mask=ok, other=0), IS_BF16)
        a4, a5 = _pair(tl.load(p_ptrs + 2, mask=ok, other=0), IS_BF16)
        a6, a7 = _pair(tl.load(p_ptrs + 3, mask=ok, other=0), IS_BF16)
    else:
        a_ptrs = a_ptr + (8 * u) * stride_ak
        a0 = tl.load(a_ptrs, mask=ok, other=0.0).to(tl.float32)
        a1 = tl.load(a_ptrs + stride_ak, mask=ok, other=0.0).to(tl.float32)
        a2 = tl.load(a_ptrs + 2 * stride_ak, mask=ok, other=0.0).to(tl.float32)
        a3 = tl.load(a_ptrs + 3 * stride_ak, mask=ok, other=0.0).to(tl.float32)
        a4 = tl.load(a_ptrs + 4 * stride_ak, mask=ok, other=0.0).to(tl.float32)
        a5 = tl.load(a_ptrs + 5 * stride_ak, mask=ok, other=0.0).to(tl.float32)
        a6 = tl.load(a_ptrs + 6 * stride_ak, mask=ok, other=0.0).to(tl.float32)
        a7 = tl.load(a_ptrs + 7 * stride_ak, mask=ok, other=0.0).to(tl.float32)
    acc = _fma(acc, w0, a0, EMULATE)
    acc = _fma(acc, w1, a1, EMULATE)
    acc = _fma(acc, w2, a2, EMULATE)
    acc = _fma(acc, w3, a3, EMULATE)
    acc = _fma(acc, w4, a4, EMULATE)
    acc = _fma(acc, w5, a5, EMULATE)
    acc = _fma(acc, w6, a6, EMULATE)
    return _fma(acc, w7, a7, EMULATE)


@triton.jit
def _group_params(s_rows, z_rows, u0, u_hi, offs_u, stride_sg, stride_zg, GROUP_W: tl.constexpr):
    """The scales and zero points of words [u0, u0 + BLOCK_U) of each row, in the word tile's shape. A block of
    one group loads one of each per row (broadcast along the words); a wider one loads them per word."""
    BLOCK_U: tl.constexpr = offs_u.shape[0]
    if BLOCK_U == GROUP_W:
        g = min(u0, u_hi - 1) // GROUP_W  # past the end (the last prefetch) it reloads the last group, unused
        s = tl.broadcast_to(tl.load(s_rows + g * stride_sg)[:, None], (s_rows.shape[0], BLOCK_U))
        z = tl.broadcast_to(tl.load(z_rows + g * stride_zg)[:, None], (z_rows.shape[0], BLOCK_U))
    else:
        g = (u0 + offs_u) // GROUP_W
        ok = (u0 + offs_u < u_hi)[None, :]
        s = tl.load(s_rows[:, None] + g[None, :] * stride_sg, mask=ok, other=0.0)
        z = tl.load(z_rows[:, None] + g[None, :] * stride_zg, mask=ok, other=0)
    return s, z


@triton.jit
def _row_ptr(a_ptr, r: tl.constexpr, M, stride_am):
    """Row r of a (a row past M reads the last row again: its result is never stored)."""
    return a_ptr + min(r, M - 1) * stride_am


@triton.jit
def _store_rows(c_ptr, ws_ptr, base, p0, p1, p2, p3, offs_n, M, N, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, TO_WS: tl.constexpr, RNE_BF16: tl.constexpr):  # fmt: skip
    """Rows 0..BLOCK_M-1 of the result: into c (rounded once), or as fp32 partials into the workspace at
    ``base + r * N``."""
    n_ok = offs_n < N
    for r in tl.static_range(BLOCK_M):
        p = p0 if r == 0 else (p1 if r == 1 else (p2 if r == 2 else p3))
        if TO_WS:
            tl.store(ws_ptr + base + r * N + offs_n, p, mask=n_ok)
        else:
            if RNE_BF16:
                p = round_to_bf16(p)
            tl.store(c_ptr + r * stride_cm + offs_n * stride_cn, p.to(c_ptr.dtype.element_ty),
                     mask=n_ok & (offs_n * 0 + r < M))


@triton.jit
def _int4_gemv_kernel(
    a_ptr, w_ptr, s_ptr, z_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, KU,
    stride_am, stride_ak, stride_wn, stride_sn, stride_sg, stride_zn, stride_zg, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_U: tl.constexpr, SPLIT_K: tl.constexpr,
    GROUP_W: tl.constexpr, A_PAIRS: tl.constexpr, IS_BF16: tl.constexpr, EMULATE: tl.constexpr,
    RNE_BF16: tl.constexpr,
):  # fmt: skip
    """c[:M, n-block] over words [pid_k * ku_split, +ku_split) of w (viewed as int32 [N, K // 8]), for
    M <= BLOCK_M <= 4 rows of a: each word is dequantised once and multiplied into one accumulator per row.

    SPLIT_K (a tuning parameter, hence a constexpr) asks for that many K ranges of whole groups: ``split`` of
    them remain once rounded to groups (``ku_split``, as the launcher's grid counts them). With no split, c is
    written directly; with one, the last program of a column block sums the partials in a tile of SPLIT_MAX
    rows (``split`` of them used)."""
    ku_split = tl.cdiv(tl.cdiv(KU, GROUP_W), SPLIT_K) * GROUP_W
    split = tl.cdiv(KU, ku_split)
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_u = tl.arange(0, BLOCK_U)
    rn = (offs_n % N).to(tl.int64)  # rows past the edge read a valid row again; the stores are masked
    u_lo = pid_k * ku_split
    u_hi = min(KU, u_lo + ku_split)
    w_rows = w_ptr + rn[:, None] * stride_wn
    s_rows = s_ptr + rn * stride_sn
    z_rows = z_ptr + rn * stride_zn
    # the first iteration's words, scales and zero points; each iteration then loads the next one's
    u = u_lo + offs_u
    b_next = tl.load(w_rows + u[None, :], mask=(u < u_hi)[None, :], other=0)
    s_next, z_next = _group_params(s_rows, z_rows, u_lo, u_hi, offs_u, stride_sg, stride_zg, GROUP_W)
    acc0 = tl.zeros((BLOCK_N, BLOCK_U), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_N, BLOCK_U), dtype=tl.float32)  # rows 1..3: only where BLOCK_M has them
    acc2 = tl.zeros((BLOCK_N, BLOCK_U), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_N, BLOCK_U), dtype=tl.float32)
    for u0 in range(u_lo, u_hi, BLOCK_U):
        b = b_next
        s = s_next
        z = z_next
        u = u0 + offs_u
        un = u + BLOCK_U
        b_next = tl.load(w_rows + un[None, :], mask=(un < u_hi)[None, :], other=0)
        s_next, z_next = _group_params(s_rows, z_rows, u0 + BLOCK_U, u_hi, offs_u, stride_sg, stride_zg, GROUP_W)
        # a masked word reads 0 and dequantises to the finite -z * s; a's masked 0 makes its product 0
        w0, w1, w2, w3, w4, w5, w6, w7 = word_values(b, s, z, IS_BF16, EMULATE)
        ok = u < u_hi
        acc0 = _fma_word(acc0, w0, w1, w2, w3, w4, w5, w6, w7, a_ptr, u, ok, stride_ak, A_PAIRS, IS_BF16, EMULATE)
        if BLOCK_M > 1:
            acc1 = _fma_word(acc1, w0, w1, w2, w3, w4, w5, w6, w7, _row_ptr(a_ptr, 1, M, stride_am), u, ok,
                             stride_ak, A_PAIRS, IS_BF16, EMULATE)  # fmt: skip
        if BLOCK_M > 2:
            acc2 = _fma_word(acc2, w0, w1, w2, w3, w4, w5, w6, w7, _row_ptr(a_ptr, 2, M, stride_am), u, ok,
                             stride_ak, A_PAIRS, IS_BF16, EMULATE)  # fmt: skip
            acc3 = _fma_word(acc3, w0, w1, w2, w3, w4, w5, w6, w7, _row_ptr(a_ptr, 3, M, stride_am), u, ok,
                             stride_ak, A_PAIRS, IS_BF16, EMULATE)  # fmt: skip
    p0 = tl.sum(acc0, axis=1)
    p1 = tl.sum(acc1, axis=1)
    p2 = tl.sum(acc2, axis=1)
    p3 = tl.sum(acc3, axis=1)
    if SPLIT_K == 1:
        _store_rows(c_ptr, ws_ptr, 0, p0, p1, p2, p3, offs_n, M, N, stride_cm, stride_cn, BLOCK_M, False, RNE_BF16)
    else:
        # workspace [SPLIT, BLOCK_M, N]: this split's partials, then a ticket; the last one sums them in order
        _store_rows(c_ptr, ws_ptr, pid_k * BLOCK_M * N, p0, p1, p2, p3, offs_n, M, N, stride_cm, stride_cn,
                    BLOCK_M, True, RNE_BF16)  # fmt: skip
        tl.debug_barrier()  # every thread's partials written before the ticket releases them
        ticket = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if ticket == split - 1:
            tl.debug_barrier()
            offs_s = tl.arange(0, _SPLIT_TILE)
            s_ok = (offs_s < split)[:, None] & (offs_n < N)[None, :]
            for r in tl.static_range(BLOCK_M):
                parts = tl.load(ws_ptr + (offs_s[:, None] * BLOCK_M + r) * N + offs_n[None, :], mask=s_ok,
                                other=0.0, cache_modifier=".cg")  # fmt: skip
                total = tl.sum(parts, axis=0)
                if RNE_BF16:
                    total = round_to_bf16(total)
                tl.store(c_ptr + r * stride_cm + offs_n * stride_cn, total.to(c_ptr.dtype.element_ty),
                         mask=(offs_n < N) & (offs_n * 0 + r < M))  # fmt: skip
            tl.atomic_xchg(cnt_ptr + pid_n, 0)  # the next launch draws from 0 again


# The autotuner's candidates on a GPU: eight words a thread in one-group blocks, with every split of K the pruning
# keeps for the shape. On an H100 these three were the fastest tiles at all three decode shapes (M = 1; N, K in
# 4096 and 14336), within 4% of each other; 4 or 16 words a thread, or two groups a block, were 10-110% slower
# (reports/h100/experiments/int4-decode/). Fewer candidates also keep the first call's compile and tuning short.
TILES = ((16, 16, 1), (32, 16, 2), (64, 16, 4))
CONFIGS = tuple(GemvConfig(bn, bu, split, nw) for bn, bu, nw in TILES for split in (1, 2, 4, 8, 16))


def _prune(configs, named_args, **kwargs):
    """Splits that leave each range at least two groups and make at most 16 programs a multiprocessor (the
    H100/H200's 132), and no split where the column blocks alone give that many."""
    n, groups = named_args["N"], cdiv(named_args["KU"], GROUP_WORDS)
    kept = []
    for c in configs:
        split, tiles = c.kwargs["SPLIT_K"], cdiv(n, c.kwargs["BLOCK_N"])
        if split == 1 or (groups // split >= 2 and tiles * split <= 16 * 132):
            kept.append(c)
    return kept or list(configs)


_gemv_autotuned = triton.autotune(
    configs=[triton.Config({"BLOCK_N": c.block_n, "BLOCK_U": c.block_u, "SPLIT_K": c.split_k},
                           num_warps=c.num_warps, num_stages=1) for c in CONFIGS],
    key=["M", "N", "KU"],
    prune_configs_by={"early_config_prune": _prune},
)(_int4_gemv_kernel)
_gemv_launch = FastLaunch(CachedAutotune(_gemv_autotuned))


def interpreted_config(n: int, k: int) -> GemvConfig:
    """Under the interpreter: one block of rows and a split of 2 where K has more than one group, so CPU runs
    check the split and its reduction."""
    groups = cdiv(k, GROUP_WORDS * 8)
    return GemvConfig(min(max(1 << (n - 1).bit_length(), 16), 128), GROUP_WORDS, 2 if groups > 1 else 1, 4)


def _splits(ku: int, split_k: int) -> int:
    """K ranges a launch of ``split_k`` makes once each is rounded to whole groups (as the kernel counts them)."""
    return cdiv(ku, cdiv(cdiv(ku, GROUP_WORDS), split_k) * GROUP_WORDS)


_int4_gemv_launch = FastLaunch(_int4_gemv_kernel)


def int4_gemv(*, a: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, c: torch.Tensor,
              config: GemvConfig | None = None) -> None:  # fmt: skip
    """c = a @ dequant(w).T for a of one to GEMV_MAX_M rows, w read as 32-bit words (kernels/int4_matmul.py
    checks the arguments and dispatches here). ``config`` replaces the autotuner's choice (on a GPU) or the
    interpreter's configuration."""
    plan(a, w, scales, zeros, c, config)(a, w, scales, zeros, c)


def plan(a: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, c: torch.Tensor,
         config: GemvConfig | None = None):
    """The launch :func:`int4_gemv` makes for operands of these shapes, strides, dtypes, device and alignments:
    ``launch(a, w, scales, zeros, c)`` (kernels.common.Plans)."""
    m, k = a.shape
    if not 1 <= m <= GEMV_MAX_M:
        raise ValueError(f"int4_gemv: {m} rows of a; it takes 1 to {GEMV_MAX_M}")
    n = w.shape[0]
    ku = k // 8
    block_m = 1 << (m - 1).bit_length()
    interp = interpreted(a)
    if config is None and interp:
        config = interpreted_config(n, k)
    # every split a candidate may take: partials for SPLIT_MAX ranges, a counter per 16-row column block
    partials, tiles = SPLIT_MAX * block_m * n, cdiv(n, 16)
    # pairs of activations as one int32: contiguous rows, 4-byte aligned, an even row stride
    pairs = a.stride(1) == 1 and a.data_ptr() % 4 == 0 and (m == 1 or a.stride(0) % 2 == 0)
    scalars = (m, n, ku, a.stride(0) // 2 if pairs else a.stride(0), a.stride(1), w.stride(0) // 4, scales.stride(0),
               scales.stride(1), zeros.stride(0), zeros.stride(1), c.stride(0), c.stride(1))  # fmt: skip
    flags = dict(BLOCK_M=block_m, GROUP_W=GROUP_WORDS, A_PAIRS=pairs, IS_BF16=a.dtype == torch.bfloat16,
                 EMULATE=interp, RNE_BF16=needs_bf16_rounding(c))  # fmt: skip
    if config is not None:
        grid = (cdiv(n, config.block_n), _splits(ku, config.split_k))
        launcher = _int4_gemv_launch
        flags.update(BLOCK_N=config.block_n, BLOCK_U=config.block_u, SPLIT_K=config.split_k,
                     num_warps=config.num_warps, num_stages=1)  # fmt: skip
    else:
        launcher = _gemv_launch

        def grid(meta):
            return (cdiv(n, meta["BLOCK_N"]), _splits(ku, meta["SPLIT_K"]))

    def launch(a, w, scales, zeros, c):
        ws, cnt = scratch(a.device, partials, tiles)
        launcher[grid](a.view(torch.int32) if pairs else a, w.view(torch.int32), scales, zeros, c, ws, cnt,
                       *scalars, **flags)  # fmt: skip
    return launch
