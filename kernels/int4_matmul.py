"""Weight-only int4 GEMM (the vLLM/AWQ/GPTQ/Marlin decode case): Triton kernel, torch reference and a torch peer.

``c = a @ dequant(w).T`` with activations a ``[M, K]`` (bf16 or fp16), c ``[M, N]`` in a's dtype, and a weight
stored as 4-bit integers with a zero point and a scale per group of ``GROUP_SIZE`` (128) consecutive k:

- ``w`` ``[N, K // 2]`` uint8, two values per byte along K: the LOW nibble holds the even k (``2j``), the HIGH
  nibble the odd k (``2j + 1``); ``q[n, 2j] = w[n, j] & 0xF``, ``q[n, 2j + 1] = w[n, j] >> 4``. K must therefore
  be even (an odd K would leave half a byte; a checkpoint pads K instead). Row n is an ``nn.Linear`` weight row.
- ``scales`` ``[N, G]`` in a's dtype and ``zeros`` ``[N, G]`` uint8 in [0, 16), one per (row, group), not packed;
  ``G = ceil(K / 128)``: K need not be a multiple of 128, the last group is then partial.
- ``w_deq[n, k] = (q[n, k] - zeros[n, k // 128]) * scales[n, k // 128]``, ROUNDED ONCE TO a's DTYPE, as every
  production kernel does (its tensor cores take 16-bit operands); then ``c = a @ w_deq.T`` with fp32 accumulation
  and one rounding into c.

Numerics. ``(q - z)`` is an integer in [-15, 15] and the scale a 16-bit float, so the product is exact in fp32 and
the kernel's one rounding of it to a's dtype gives the same bits as the reference's (``int4_matmul_ref`` rounds
the same exact product). The products ``a * w_deq`` of two 16-bit values are exact in fp32 too, so kernel and
reference differ only by their fp32 summation orders (and then by c's one rounding): the spec's error model.

Reading w. Where K is a multiple of 8 and w's rows are contiguous and 4-byte aligned (a checkpoint's layout), w is
read as 32-bit words, eight values each (``_dot_words``); otherwise as bytes (``_dot_bytes``: any strides, any
even K, the generated edge cases' layouts). The K loop counts these units, so the masks keep the divisibility
Triton specialises on K and w streams through the cp.async pipeline in 16-byte vectors (counted in k, w loaded
one byte at a time, each load a stall). The scale and zero point of the next K block are loaded one iteration
ahead: one value a row, too narrow for cp.async, they would otherwise stall every block.

Dequantisation, on a GPU, in the activations' own 16-bit type and without int -> float conversions (a quarter of
the FMA rate on Hopper): a nibble OR'ed into the bits of ``2**E`` (1024.0 in fp16, 128.0 in bf16, whose ulp is 1)
is the float ``2**E + q`` exactly; subtracting ``2**E + z`` leaves ``q - z`` exactly; the multiply by the scale is
the one rounding. The word path does it as Marlin does, in inline PTX on packed pairs (lop3, two fma.rn.x2 per
pair: about 1.9 instructions per weight) and never interleaves the values back into k order: a word yields values
i and i + 4 in one register, so the block becomes four dots over tiles whose K index pairs them, with a's (small)
tile split the same way. The byte path does it in Triton ops and interleaves (join, reshape). The interpreter runs
no PTX and truncates bf16 arithmetic: under it the word path, and the byte path in bf16, compute the same values in
fp32 and round them explicitly (``round_to_bf16``; the byte path's fp16 arithmetic, which numpy rounds correctly,
runs as on a GPU), so a CPU run checks the rest of the word path (pairing, a's split, the transposed tiles) too.

Decode (M <= 16) is bound by the weight's bytes; int4 reads 4x fewer than bf16. Tiles of 16 rows, many programs
along N and, where N gives too few programs to fill the GPU, a split of K (``_split_k``): each split writes its
fp32 partial tile to a workspace and takes a ticket from the tile's counter; the program drawing the last one
sums the splits in split order and rounds once into c, in the same launch (kernels/splitk.py says more). No
floating-point atomics: the result is deterministic, whichever split finishes first. One
row of a with a word-readable w goes to that GEMV instead.

Measured on an H200 (reports/h200/experiments/int4/int4_probe.py, triton 3.6, bf16, against F.linear on the resident
bf16 weight): M = 1, N = K = 4096: 12.5 us against 13.0 (1.04x); N = 4096, K = 14336: 22.7 against 32.1 (1.42x);
N = 14336, K = 4096: 30.7 against 31.6 (1.03x; 1.34x at M = 4). The issue's 3x is not reached: Nsight Compute
showed the decode kernel (word path) bound by instruction latency at low occupancy: about 5 instructions issued
per weight in all, 23% of issue slots busy, 15 of 64 warps resident per SM (~100-140 registers a thread), 15-18%
of DRAM bandwidth. From M = 64 on it is 0.3-0.7x of cuBLAS: the dequantisation is redone for every 16-128-row tile.
"""

from __future__ import annotations

import weakref

import torch
import triton
import triton.language as tl

from kernels.common import (
    CachedAutotune,
    Plans,
    cdiv,
    interpreted,
    needs_bf16_rounding,
    no_launch,
    round_to_bf16,
    signature,
    sm_count,
)
from kernels.fastlaunch import FastLaunch
from kernels.int4_configs import (  # noqa: F401 - Int4Config, GROUP_SIZE: this module's public names too
    _DECODE_M,
    _SWAP_MIN_M,
    CONFIGS,
    GROUP_SIZE,
    Int4Config,
    prune_configs,
)
from kernels.int4_dequant import word_values
from kernels.int4_gemv import plan as gemv_plan
from kernels.matmul import grouped_tile
from kernels.splitk import SPLIT_MAX, scratch, split_k_total


@triton.jit
def _dot_bytes(a, b, s, z, acc, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IS_BF16: tl.constexpr,
               DEQUANT_F32: tl.constexpr):  # fmt: skip
    """acc + a @ dequant(b).T for a K block read as bytes b [BLOCK_N, BLOCK_K // 2] (any strides, any even K)."""
    if DEQUANT_F32:  # the interpreter (bf16): its bf16 arithmetic truncates; fp32, then round to nearest even
        sf = s.to(tl.float32)[:, None]
        zf = z.to(tl.float32)[:, None]
        w_lo = round_to_bf16(((b & 0xF).to(tl.float32) - zf) * sf)
        w_hi = round_to_bf16(((b >> 4).to(tl.float32) - zf) * sf)
        a = a.to(tl.float32)  # its dot reads bf16 as raw bits; the products are the same, exact, in fp32
    else:
        # 2**E + q from the bits (module docstring): no int -> float conversion; (2**E + q) - (2**E + z) is
        # exact, the multiply by the scale is the one rounding, in the activations' own type
        bits = b.to(tl.uint16)
        if IS_BF16:
            lo = ((bits & 0xF) | 0x4300).to(tl.bfloat16, bitcast=True)  # 128 + q
            hi = ((bits >> 4) | 0x4300).to(tl.bfloat16, bitcast=True)
            zb = (z.to(tl.bfloat16) + 128.0)[:, None]
        else:
            lo = ((bits & 0xF) | 0x6400).to(tl.float16, bitcast=True)  # 1024 + q
            hi = ((bits >> 4) | 0x6400).to(tl.float16, bitcast=True)
            zb = (z.to(tl.float16) + 1024.0)[:, None]
        w_lo = (lo - zb) * s[:, None]
        w_hi = (hi - zb) * s[:, None]
    # interleave back to k order: [BLOCK_N, BLOCK_K // 2, 2] -> [BLOCK_N, BLOCK_K], k = 2j + nibble
    w = tl.reshape(tl.join(w_lo, w_hi), (BLOCK_N, BLOCK_K))
    return tl.dot(a, tl.trans(w), acc)


@triton.jit
def _dot_words(a, b, s, z, acc, BLOCK_M: tl.constexpr, UNITS: tl.constexpr, IS_BF16: tl.constexpr,
               SWAP: tl.constexpr, EMULATE: tl.constexpr):  # fmt: skip
    """acc + a @ dequant(b).T for a K block read as 32-bit words b [BLOCK_N, BLOCK_K // 8].

    The eight values of a word come out as eight tiles, tile i holding k = 8u + i (PTX on a GPU; ``EMULATE``, the
    interpreter, computes the same values in fp32 and rounds them as the PTX does, so a CPU run checks everything
    else here: the pairing, a's split and the transposed tiles). Instead of interleaving the weight back into k
    order (register shuffles on the large operand), a's small tile is split the same way: the same products,
    summed in another order."""
    w0, w1, w2, w3, w4, w5, w6, w7 = word_values(
        b, tl.broadcast_to(s[:, None], b.shape), tl.broadcast_to(z[:, None], b.shape), IS_BF16, EMULATE)
    if EMULATE:
        a = a.to(tl.float32)  # the interpreter's dot reads bf16 as raw bits; in fp32 the products are the same
    # The asm leaves values i and i + 4 of a word in one 32-bit register: tile j (0..3) pairs them, its K index
    # 2u + h holding k = 8u + j + 4h, so those registers are already the pairs along K that a dot operand takes.
    # a[:, 8u + 4h + 2q + r] as [BLOCK_M, UNITS, h, q, r]: split r, then q; j = 2q + r.
    a_r0, a_r1 = tl.split(tl.reshape(a, (BLOCK_M, UNITS, 2, 2, 2)))
    a_j0, a_j2 = tl.split(a_r0)
    a_j1, a_j3 = tl.split(a_r1)
    BLOCK_N: tl.constexpr = b.shape[0]
    a0 = tl.reshape(a_j0, (BLOCK_M, 2 * UNITS))
    a1 = tl.reshape(a_j1, (BLOCK_M, 2 * UNITS))
    a2 = tl.reshape(a_j2, (BLOCK_M, 2 * UNITS))
    a3 = tl.reshape(a_j3, (BLOCK_M, 2 * UNITS))
    t0 = tl.reshape(tl.join(w0, w4), (BLOCK_N, 2 * UNITS))
    t1 = tl.reshape(tl.join(w1, w5), (BLOCK_N, 2 * UNITS))
    t2 = tl.reshape(tl.join(w2, w6), (BLOCK_N, 2 * UNITS))
    t3 = tl.reshape(tl.join(w3, w7), (BLOCK_N, 2 * UNITS))
    if SWAP:  # acc is c's tile transposed, [BLOCK_N, BLOCK_M]: the weight is the operand a wgmma takes in registers
        acc = tl.dot(t0, tl.trans(a0), acc)
        acc = tl.dot(t1, tl.trans(a1), acc)
        acc = tl.dot(t2, tl.trans(a2), acc)
        acc = tl.dot(t3, tl.trans(a3), acc)
    else:
        acc = tl.dot(a0, tl.trans(t0), acc)
        acc = tl.dot(a1, tl.trans(t1), acc)
        acc = tl.dot(a2, tl.trans(t2), acc)
        acc = tl.dot(a3, tl.trans(t3), acc)
    return acc


@triton.jit
def _int4_matmul_kernel(
    a_ptr, w_ptr, s_ptr, z_ptr, out_ptr, c_ptr, cnt_ptr, M, N, KU, KU_PER_SPLIT, SPLIT,
    stride_am, stride_ak, stride_wn, stride_wk, stride_sn, stride_sg, stride_zn, stride_zg,
    stride_os, stride_om, stride_on, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    GROUP: tl.constexpr, WORDS: tl.constexpr, SWAP_MIN_M: tl.constexpr, IS_BF16: tl.constexpr,
    INTERPRETED: tl.constexpr, DEQUANT_F32: tl.constexpr, RNE_BF16: tl.constexpr, SPLIT_TILES: tl.constexpr,
):  # fmt: skip
    """One [BLOCK_M, BLOCK_N] tile of c over units [pid_k * KU_PER_SPLIT, +KU_PER_SPLIT) of w's rows: written to
    out, which is c itself (one split, SPLIT_TILES = 0) or split pid_k's slice of the fp32 workspace. Then, with
    a split, a ticket from the tile's counter: the program drawing the last one sums the SPLIT partials in split
    order (SPLIT_TILES, a constexpr bound, unrolls the loads so all are in flight at once), rounds once into c
    and resets the counter. The sum is the same whichever program finishes last, in one launch.

    A unit is what w is read as: a byte (2 values of k) or, with WORDS, a 32-bit word (8 values; the launcher
    passes w viewed as int32). The K loop counts units, not k: a unit offset, its bound and the masks built from
    them keep the divisibility Triton specialises on KU (16 for the shapes that matter), so w loads as 16-byte
    vectors through the cp.async pipeline. Counted in k, `(2 * j) < k_left` hides that and w loads one byte at a
    time, each a stall on memory."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    UNIT: tl.constexpr = 8 if WORDS else 2  # values of k per unit
    UNITS: tl.constexpr = BLOCK_K // UNIT  # units per K block
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    offs_u = tl.arange(0, UNITS)
    # rows and columns past the edge load a valid row/column again (stores are masked), as in kernels.matmul
    rm = (offs_m % M).to(tl.int64)
    rn = (offs_n % N).to(tl.int64)
    u_lo = pid_k * KU_PER_SPLIT  # a whole number of groups (the launcher's split), hence of K blocks
    u_hi = min(KU, u_lo + KU_PER_SPLIT)
    a_ptrs = a_ptr + rm[:, None] * stride_am + (UNIT * u_lo + offs_k)[None, :] * stride_ak
    w_ptrs = w_ptr + rn[:, None] * stride_wn + (u_lo + offs_u)[None, :] * stride_wk
    s_ptrs = s_ptr + rn * stride_sn
    z_ptrs = z_ptr + rn * stride_zn
    SWAP: tl.constexpr = WORDS and BLOCK_M >= SWAP_MIN_M
    acc = tl.zeros((BLOCK_N, BLOCK_M) if SWAP else (BLOCK_M, BLOCK_N), dtype=tl.float32)
    # The scale and zero point of the next block are loaded one iteration ahead: they feed every dequantising
    # instruction, and loaded where they are used each block waited for them (they are 1 and 2 bytes a row,
    # too narrow for the cp.async pipeline that carries a and w).
    GU: tl.constexpr = GROUP // UNIT  # units per group; BLOCK_K divides GROUP: a block lies in one group
    s_next = tl.load(s_ptrs + (u_lo // GU) * stride_sg)
    z_next = tl.load(z_ptrs + (u_lo // GU) * stride_zg)
    for u0 in range(u_lo, u_hi, UNITS):
        s = s_next
        z = z_next
        g_next = min(u0 + UNITS, u_hi - 1) // GU  # the last block reloads its own group: never out of bounds
        s_next = tl.load(s_ptrs + g_next * stride_sg)
        z_next = tl.load(z_ptrs + g_next * stride_zg)
        u_left = u_hi - u0  # the last block may be partial
        a = tl.load(a_ptrs, mask=offs_k[None, :] < UNIT * u_left, other=0.0)
        # a masked unit reads 0 and dequantises to the finite -z * s: its product with a's masked zero is 0
        b = tl.load(w_ptrs, mask=offs_u[None, :] < u_left, other=0)
        if WORDS:
            acc = _dot_words(a, b, s, z, acc, BLOCK_M, UNITS, IS_BF16, SWAP, INTERPRETED)
        else:
            acc = _dot_bytes(a, b, s, z, acc, BLOCK_N, BLOCK_K, IS_BF16, DEQUANT_F32)
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += UNITS * stride_wk
    if SWAP:
        acc = tl.trans(acc)
    if RNE_BF16 and SPLIT_TILES == 0:  # a split's partial stays fp32; the sum is rounded below
        acc = round_to_bf16(acc)
    out_ptrs = (
        out_ptr
        + pid_k.to(tl.int64) * stride_os
        + offs_m.to(tl.int64)[:, None] * stride_om
        + offs_n[None, :] * stride_on
    )
    mn_ok = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mn_ok)
    if SPLIT_TILES > 0:
        part_ptrs = out_ptr + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :] * stride_on
        last, total = split_k_total(part_ptrs, stride_os, mn_ok, cnt_ptr, pid, SPLIT, SPLIT_TILES)
        if last:
            if RNE_BF16:
                total = round_to_bf16(total)
            c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :] * stride_cn
            tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=mn_ok)


_int4_matmul_autotuned = triton.autotune(
    configs=[c.as_triton() for c in CONFIGS],
    key=["M", "N", "KU", "KU_PER_SPLIT", "WORDS"],
    prune_configs_by={"early_config_prune": prune_configs},
)(_int4_matmul_kernel)
_int4_launch = FastLaunch(CachedAutotune(_int4_matmul_autotuned))


# Decode split of K: aim for this many programs per multiprocessor (the weight stream needs several tiles in
# flight on each), with each split at least _MIN_SPLIT_GROUPS groups long (the fixed cost of a program and the
# workspace's round trip stay small against the bytes it streams).
_PROGRAMS_PER_SM = 4
_MIN_SPLIT_GROUPS = 4
_DECODE_TILE_N = 64  # the decode configs' typical BLOCK_N, to count programs before the autotuner picks one


def _split_k(m: int, n: int, k: int, sms: int) -> int:
    """How many K ranges a decode launch splits into (1: none): enough programs to fill the GPU."""
    if m > _DECODE_M:
        return 1
    groups = cdiv(k, GROUP_SIZE)
    tiles = cdiv(n, _DECODE_TILE_N)
    split = 1
    while (split * 2 <= SPLIT_MAX and tiles * split * 2 <= _PROGRAMS_PER_SM * sms
           and groups // (split * 2) >= _MIN_SPLIT_GROUPS):
        split *= 2
    return split


def _check(a: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, c: torch.Tensor) -> None:
    if a.dim() != 2 or w.dim() != 2 or scales.dim() != 2 or zeros.dim() != 2 or c.dim() != 2:
        raise ValueError("int4_matmul: expected 2-d a [M, K], w [N, K // 2], scales [N, G], zeros [N, G], c [M, N]")
    m, k = a.shape
    n = w.shape[0]
    groups = cdiv(k, GROUP_SIZE)
    if k % 2:
        raise ValueError(f"int4_matmul: K = {k} must be even: w packs two 4-bit values per byte along K")
    if w.shape[1] != k // 2 or scales.shape != (n, groups) or zeros.shape != (n, groups) or c.shape != (m, n):
        raise ValueError(
            f"int4_matmul: expected a [M, K], w [N, K // 2], scales and zeros [N, ceil(K / "
            f"{GROUP_SIZE})], c [M, N]; got a {tuple(a.shape)}, w {tuple(w.shape)}, scales "
            f"{tuple(scales.shape)}, zeros {tuple(zeros.shape)}, c {tuple(c.shape)}"
        )
    if w.dtype != torch.uint8 or zeros.dtype != torch.uint8:
        raise ValueError(f"int4_matmul: w and zeros must be uint8, got {w.dtype} and {zeros.dtype}")


def _words_ok(w: torch.Tensor, k: int) -> bool:
    """w can be read as 32-bit words: K a multiple of 8, rows contiguous along K and 4-byte aligned."""
    return k % 8 == 0 and w.stride(1) == 1 and w.stride(0) % 4 == 0 and w.data_ptr() % 4 == 0


_int4_matmul_launch = FastLaunch(_int4_matmul_kernel)


_PLANS = Plans()


def plan_for(a: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, c: torch.Tensor):
    """The plan :func:`int4_matmul` keeps for these operands (its autotuned calls), or None before a call has made
    one (for kernels.common.Plans.delegate)."""
    return _PLANS.get(signature(a, w, scales, zeros, c))


def int4_matmul(
    *,
    a: torch.Tensor,
    w: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    c: torch.Tensor,
    config: Int4Config | None = None,
    split_k: int | None = None,
    words: bool | None = None,
    swap_min_m: int | None = None,
) -> None:
    """Triton weight-only int4 GEMM ``c = a @ dequant(w).T``; any strides on every tensor. One row of a with w
    readable as words (a checkpoint's layout) goes to the decode GEMV (kernels/int4_gemv.py), all else to the
    tile kernel here.

    ``config``, ``split_k`` and ``words`` (tuning experiments: reports/h200/experiments/int4/int4_probe.py
    --sweep) replace the autotuner's choice, the decode split heuristic and the choice of how w is read."""
    tuned = config is None and split_k is None and words is None and swap_min_m is None
    sig = signature(a, w, scales, zeros, c) if tuned else None
    _PLANS.run(sig, lambda: _plan(a, w, scales, zeros, c, config, split_k, words, swap_min_m), a, w, scales, zeros, c)


def _empty_sum(a, w, scales, zeros, c) -> None:
    c.zero_()  # K = 0: an empty sum, and no tensor to read from


def checked_trivial(a, w, scales, zeros, c, name: str = "int4_matmul"):
    """Checks the operands (errors named after the launcher ``name``); the plan of a call with nothing to
    multiply (an empty c, or K = 0), else None."""
    _check(a, w, scales, zeros, c)
    if a.dtype not in (torch.float16, torch.bfloat16) or scales.dtype != a.dtype or c.dtype != a.dtype:
        raise ValueError(f"{name}: a, scales and c must share one dtype, fp16 or bf16; got {a.dtype}, "
                         f"{scales.dtype} and {c.dtype}")  # fmt: skip
    if a.shape[0] == 0 or w.shape[0] == 0:
        return no_launch
    return _empty_sum if a.shape[1] == 0 else None


def _plan(a, w, scales, zeros, c, config, split_k, words, swap_min_m):
    """Checks the operands and works out the launch :func:`int4_matmul` makes for their signature."""
    trivial = checked_trivial(a, w, scales, zeros, c)
    if trivial is not None:
        return trivial
    m, k = a.shape
    n = w.shape[0]
    interp = interpreted(a)
    if m == 1 and config is None and split_k is None and words is None and _words_ok(w, k):
        return gemv_plan(a, w, scales, zeros, c)
    if interp:  # one large tile, no autotuning; split K where a GPU launch would
        cfg = Int4Config.interpreted(m, n, k)
        split = 2 if m <= _DECODE_M and k > GROUP_SIZE else 1  # so that CPU runs check the split-K path too
    else:
        cfg = config
        split = split_k or _split_k(m, n, k, sm_count(a.device))
        if not 1 <= split <= SPLIT_MAX:
            raise ValueError(f"int4_matmul: split_k {split} must lie in [1, {SPLIT_MAX}]")

    words = _words_ok(w, k) if words is None else words
    unit = 8 if words else 2  # values of k per unit of w: a 32-bit word or a byte
    ku_per_split = cdiv(cdiv(k, GROUP_SIZE), split) * (GROUP_SIZE // unit)
    split = cdiv(k // unit, ku_per_split)
    partials, tiles = split * m * n, cdiv(m, 16) * cdiv(n, 16)
    scalars = (
        m,
        n,
        k // unit,
        ku_per_split,
        split,
        a.stride(0),
        a.stride(1),
        w.stride(0) // 4 if words else w.stride(0),
        w.stride(1),
        scales.stride(0),
        scales.stride(1),
        zeros.stride(0),
        zeros.stride(1),
        # out: the workspace [split, M, N] (kernels/splitk.py's, per device and stream) where K is split, else c
        *((m * n, n, 1) if split > 1 else (0, c.stride(0), c.stride(1))),
        c.stride(0),
        c.stride(1),
    )
    flags = dict(
        GROUP=GROUP_SIZE,
        WORDS=words,
        SWAP_MIN_M=_SWAP_MIN_M if swap_min_m is None else swap_min_m,
        IS_BF16=a.dtype == torch.bfloat16,
        INTERPRETED=interp,
        DEQUANT_F32=interp and a.dtype == torch.bfloat16,
        RNE_BF16=needs_bf16_rounding(c),
        SPLIT_TILES=SPLIT_MAX if split > 1 else 0,
    )
    if cfg is not None:
        grid = (cdiv(m, cfg.block_m) * cdiv(n, cfg.block_n), split)
        launcher = _int4_matmul_launch
        flags.update(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
                     num_warps=cfg.num_warps, num_stages=cfg.num_stages)  # fmt: skip
    else:
        launcher = _int4_launch

        def grid(meta):
            return (cdiv(m, meta["BLOCK_M"]) * cdiv(n, meta["BLOCK_N"]), split)

    def launch(a, w, scales, zeros, c):
        out, counters = scratch(a.device, partials, tiles) if split > 1 else (c, c)
        launcher[grid](a, w.view(torch.int32) if words else w, scales, zeros, out, c, counters, *scalars, **flags)
    return launch


def unpack(w: torch.Tensor) -> torch.Tensor:
    """``[N, K // 2]`` packed bytes -> ``[N, K]`` int32 values in [0, 16): low nibble k = 2j, high nibble 2j + 1."""
    w = w.to(torch.int32)
    return torch.stack((w & 0xF, w >> 4), dim=-1).reshape(w.shape[0], 2 * w.shape[1])


def dequantize(w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[N, K]`` weight ``(q - z) * s`` computed in fp32 (exact: a 5-bit integer times a 16-bit float) and
    rounded once to ``dtype``, the activations' type, as the kernel feeds its tensor cores."""
    q = unpack(w)
    g = torch.arange(q.shape[1], device=w.device) // GROUP_SIZE
    acc = torch.promote_types(scales.dtype, torch.float32)
    return ((q.to(acc) - zeros[:, g].to(acc)) * scales[:, g].to(acc)).to(dtype)


def int4_matmul_ref(
    *, a: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, c: torch.Tensor
) -> None:
    """Plain torch: unpack, dequantise in fp32 and round the weight once to a's dtype (the kernel's contract),
    matmul in fp32 (or a's precision, if higher), one rounding into c."""
    _check(a, w, scales, zeros, c)
    acc = torch.promote_types(a.dtype, torch.float32)
    w_deq = dequantize(w, scales, zeros, a.dtype)
    c.copy_(a.to(acc) @ w_deq.to(acc).T)


# The `torch` peer stands for what int4 is compared against in serving: a bf16/fp16 GEMM whose weight is already
# resident in that dtype. Dequantising on every call would time the unpacking (several full passes over an
# [N, K] tensor) instead of the GEMM, so the dequantised weight is made once per weight and kept here, keyed by
# each tensor's storage address, version counter (an in-place update invalidates the entry), shape, strides and
# dtype, and the device. A freed tensor's address is soon reused by the caching allocator for a new tensor of
# the same shape (the generated tests allocate fresh inputs per case), so an entry also holds weak references to
# the tensors it was made from and is used only while those are the very tensors passed.
_DEQUANT_CACHE: dict[tuple, tuple[tuple, torch.Tensor]] = {}
_DEQUANT_CACHE_SIZE = 4  # a benchmark holds one weight at a time; a few keep the memory bounded


def _resident_weight(w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    tensors = (w, scales, zeros)
    key = tuple((t.data_ptr(), t._version, tuple(t.shape), t.stride(), t.dtype) for t in tensors) + (dtype, w.device)
    hit = _DEQUANT_CACHE.get(key)
    if hit is not None and all(ref() is t for ref, t in zip(hit[0], tensors, strict=True)):
        return hit[1]
    if len(_DEQUANT_CACHE) >= _DEQUANT_CACHE_SIZE:
        _DEQUANT_CACHE.pop(next(iter(_DEQUANT_CACHE)))
    w_deq = dequantize(w, scales, zeros, dtype).contiguous()
    _DEQUANT_CACHE[key] = (tuple(weakref.ref(t) for t in tensors), w_deq)
    return w_deq


def int4_matmul_torch(
    *, a: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, c: torch.Tensor
) -> torch.Tensor:
    """``F.linear`` (cuBLAS) in a's dtype on the resident dequantised weight, into its own output."""
    return torch.nn.functional.linear(a, _resident_weight(w, scales, zeros, a.dtype))
