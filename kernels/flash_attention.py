"""Forward flash attention (FlashAttention-2 style): causal or not, GQA, head_dim 64 or 128.

Layout [batch, heads, seq, head_dim] (torch SDPA's): q and out [batch, heads_q, seq_q, head_dim], k and v
[batch, heads_kv, seq_kv, head_dim]; heads_kv divides heads_q and q head h reads kv head h // (heads_q /
heads_kv). ``causal`` aligns the mask to the bottom right, as FlashAttention-2 does: query i sees keys
j <= i + seq_kv - seq_q, so a decode step (seq_q = 1) sees every key. A query row that sees no key at all
(seq_kv = 0, or causal rows i < seq_q - seq_kv) is written as zeros, as FlashAttention-2 writes it.

The score matrix is never materialised: each program keeps one block of query rows and walks the keys in
blocks with an online softmax (running max and sum in fp32, the accumulator rescaled when the max grows),
in base 2 with sm_scale * log2(e) folded into one multiply. As in Triton's fused-attention tutorial the key
loop is split in two: blocks every row of the program sees in full (no mask at all), then the few blocks
on the causal diagonal or past the end of the keys, masked. For decode-sized queries the q heads sharing
one kv head are packed into one program's rows (the "pack GQA" of FlashAttention), so each kv block is
read once per kv head instead of once per q head.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.common import Plans, cdiv, interpreted, next_power_of_2, no_launch, rebaser, round_to_bf16, signature
from kernels.fastlaunch import FastLaunch

# INTERP_BF16, set for bf16 on the CPU (the Triton interpreter) only, works around two of its differences
# from a GPU: its fp32 -> bf16 cast truncates (the kernel rounds to nearest even first, as a GPU's cast
# does) and its tl.dot multiplies bf16 operands as their raw uint16 bits (triton 3.9: bf16 is stored as
# uint16), so bf16 tiles go into the dots as fp32, which holds them exactly. Compiled code is unchanged.

_LOG2E = math.log2(math.e)
# Packed GQA rows at most (q heads of one kv head x query positions) for the decode path.
_MAX_PACKED_ROWS = 64


@dataclass(frozen=True)
class FlashAttentionConfig:
    block_m: int  # query rows per program (a power of two, >= 16 for tl.dot)
    block_n: int  # keys per iteration
    num_warps: int
    num_stages: int
    pack: int  # q heads of one kv head that a program takes together (1: one q head per program)
    # k and v blocks through TMA descriptors (sm_90+, fp16/bf16, a layout _kv_view accepts; else pointers): no
    # [d, n] offset tiles held in registers, and the copies are asynchronous
    tma: bool = False
    warp_specialize: bool = False  # the key loop warp-specialised by Triton (TMA only)

    @classmethod
    @functools.lru_cache(maxsize=256)
    def for_shape(cls, seq_q: int, head_dim: int, group: int, dtype: torch.dtype,
                  interpreted: bool = False, hopper: bool = False) -> FlashAttentionConfig:
        """`group` = heads_q // heads_kv. `interpreted`: the Triton interpreter runs programs one after
        another at a high cost each, so it takes large tiles (numpy matmuls) and few programs. `hopper`: the
        tiles for sm_90, whose shared memory (227 KiB) holds a deeper pipeline of wider key blocks."""
        rows = seq_q * group
        decode = rows <= _MAX_PACKED_ROWS
        pack = group if decode else 1  # decode: each kv block read once per kv head
        if interpreted:
            block_m = 16 if rows <= 16 else 64 if decode else min(128, max(16, next_power_of_2(seq_q)))
            return cls(block_m=block_m, block_n=64, num_warps=4, num_stages=1, pack=pack)
        # Every choice below compiles without register spills for sm_80, sm_90 and sm_100 (the hopper tile for sm_90
        # alone; python -m harness
        # matrix); wider tiles than these spill on at least one of them.
        if dtype == torch.float32:  # fp32 dots run on FMA units ("ieee"): small tiles, a correctness path
            block_m = 32 if rows <= 32 or head_dim == 128 else 64
            return cls(block_m=block_m, block_n=16, num_warps=8, num_stages=1, pack=pack)
        if decode:  # memory-bound: few rows, several loads in flight
            if rows <= 16:
                return cls(block_m=16, block_n=64 if head_dim == 64 else 32, num_warps=4, num_stages=4, pack=pack)
            return cls(block_m=64, block_n=64 if head_dim == 64 else 32, num_warps=4, num_stages=3, pack=pack)
        # Triton tutorial 06's forward shape: 128 query rows over two warpgroups (one 64-row wgmma each on
        # Hopper). Shared memory at d=128: q 32 KiB + 3 x (k, v) 16 KiB = 80 KiB, under sm_80's 163 KiB.
        # On Hopper, 128-key blocks: q 32 KiB + 3 x (k, v) 64 KiB = 224 KiB. The H200 sweep of tile, warps and
        # depth (reports/h200/experiments/flash_attention/) found it the fastest at head_dim 128, causal and
        # not, MHA and GQA: 1,268 us at the causal headline against 1,617 us for 128 x 32 (SDPA's cuDNN 1,043).
        # At head_dim 64 the tile below was within 2% of the sweep's best. The same tile with k and v through TMA
        # (reports/h100/experiments/flash_attention-tma/, an H100): 204 registers instead of 255, and 7% faster
        # at the causal headline (1,158 against 1,248 us), 9% without the mask, 7% with GQA; warp specialisation
        # of the key loop was 1-3% slower, and at head_dim 64 the pointer tile below stayed 12% ahead.
        if head_dim == 128 and hopper:
            return cls(block_m=128, block_n=128, num_warps=8, num_stages=3, pack=1, tma=True)
        if head_dim == 128:
            return cls(block_m=128, block_n=32, num_warps=8, num_stages=3, pack=1)
        return cls(block_m=128, block_n=64, num_warps=8, num_stages=4, pack=1)


@triton.jit
def _attend(acc, l_i, m_i, q, k_base, v_base, k_offs, v_offs, stride_kn, stride_vn, k_desc, v_desc, k_row, k_col,
            v_row, v_col, pos_q, lo, hi, seq_kv, diag, qk_scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
            CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr, INTERP_BF16: tl.constexpr, TMA: tl.constexpr,
            WS: tl.constexpr):
    """Keys [lo, hi) into the running (acc, l_i, m_i); `lo` is a multiple of BLOCK_N. MASKED: the blocks
    past the end of the keys or on the causal diagonal; otherwise every row sees every key of the range.
    TMA: k and v blocks from the descriptors' 2-D views (_kv_view), key j of this program's kv head at row
    k_row + j (v_row + j), columns from k_col (v_col)."""
    offs_n = tl.arange(0, BLOCK_N)
    # scalar bases that advance plus int32 offset tiles: 64-bit pointer tiles would cost registers
    k_base += lo * stride_kn
    v_base += lo * stride_vn
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WS):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        if MASKED:
            cols = start_n + offs_n
            in_kv = cols < seq_kv
        if TMA:
            k = k_desc.load([k_row + start_n, k_col]).T
            v = v_desc.load([v_row + start_n, v_col])
            if MASKED:
                # rows past seq_kv belong to the next head or sequence (zero only past the whole view): their
                # scores are masked below, and their values zeroed so that an inf or NaN there cannot reach p @ v
                v = tl.where(in_kv[:, None], v, 0.0)
        elif MASKED:
            k = tl.load(k_base + k_offs, mask=in_kv[None, :], other=0.0)
            v = tl.load(v_base + v_offs, mask=in_kv[:, None], other=0.0)
        else:
            k = tl.load(k_base + k_offs)
            v = tl.load(v_base + v_offs)
        if INTERP_BF16:
            k, v = k.to(tl.float32), v.to(tl.float32)
        qk = tl.dot(q, k, input_precision=DOT_PRECISION)
        if MASKED:
            keep = in_kv[None, :]
            if CAUSAL:
                keep = keep & (cols[None, :] <= pos_q[:, None] + diag)
            qk = tl.where(keep, qk * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            # a row that has seen no key yet keeps m = -inf: subtract 0 instead (no -inf - -inf = NaN)
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.math.exp2(qk - m_sub[:, None])
            alpha = tl.math.exp2(m_i - m_sub)
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = tl.math.exp2(qk * qk_scale - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        if INTERP_BF16:
            p = round_to_bf16(p)
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
        m_i = m_new
        k_base += BLOCK_N * stride_kn
        v_base += BLOCK_N * stride_vn
    return acc, l_i, m_i


# Sizes are not specialised on the value 1 (decode's seq_q = 1, MHA's group = 1): one compiled kernel per
# config, and ptxas spilled a few bytes on one such variant that the general one does not.
@triton.jit(do_not_specialize=["seq_q", "seq_kv", "n_head_blocks", "group", "pack"])
def _flash_attention_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, seq_q, seq_kv, n_head_blocks, group, pack, qk_scale,
    stride_qb, stride_qh, stride_qs, stride_qd, stride_kb, stride_kh, stride_ks, stride_kd,
    stride_vb, stride_vh, stride_vs, stride_vd, stride_ob, stride_oh, stride_os, stride_od,
    k_desc, v_desc, k_rows_b, k_rows_h, k_cols_h, v_rows_b, v_rows_h, v_cols_h,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr, INTERP_BF16: tl.constexpr, TMA: tl.constexpr,
    WS: tl.constexpr,
):  # fmt: skip
    # Causal programs run the longest (bottom) query blocks first, so the short ones fill the last wave.
    n_m = tl.num_programs(0)
    block = (n_m - 1 - tl.program_id(0)) if CAUSAL else tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // n_head_blocks
    h0 = (bh % n_head_blocks) * pack  # first q head of this program
    kv_head = h0 // group

    # Row r of the program is query position r // pack of q head h0 + r % pack.
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    pos_q = rows // pack
    head = h0 + rows % pack
    row_ok = pos_q < seq_q
    offs_d = tl.arange(0, HEAD_DIM)
    q_rows = b.to(tl.int64) * stride_qb + head.to(tl.int64) * stride_qh + pos_q.to(tl.int64) * stride_qs
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :] * stride_qd, mask=row_ok[:, None], other=0.0)
    if INTERP_BF16:
        q = q.to(tl.float32)

    offs_n = tl.arange(0, BLOCK_N)
    k_base = k_ptr + b.to(tl.int64) * stride_kb + kv_head.to(tl.int64) * stride_kh
    v_base = v_ptr + b.to(tl.int64) * stride_vb + kv_head.to(tl.int64) * stride_vh
    k_offs = offs_d[:, None] * stride_kd + offs_n[None, :] * stride_ks  # k transposed: [d, n]
    v_offs = offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    full_end = (seq_kv // BLOCK_N) * BLOCK_N  # keys up to here come in whole blocks
    diag = seq_kv - seq_q  # bottom-right alignment: query i sees keys j <= i + diag
    if CAUSAL:
        first = (block * BLOCK_M) // pack
        last = tl.minimum((block * BLOCK_M + BLOCK_M - 1) // pack, seq_q - 1)
        # blocks that even the program's first row sees in full, then up to the last row's last key
        unmasked_end = tl.minimum(tl.maximum(first + diag + 1, 0) // BLOCK_N * BLOCK_N, full_end)
        end = tl.minimum(tl.maximum(last + diag + 1, 0), seq_kv)
    else:
        unmasked_end = full_end
        end = seq_kv
    # the descriptors' views: one row stride per batch and per kv head, a column offset per kv head (_kv_view)
    k_row, k_col = b * k_rows_b + kv_head * k_rows_h, kv_head * k_cols_h
    v_row, v_col = b * v_rows_b + kv_head * v_rows_h, kv_head * v_cols_h
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, k_offs, v_offs, stride_ks, stride_vs, k_desc, v_desc,
                            k_row, k_col, v_row, v_col, pos_q, 0, unmasked_end, seq_kv, diag, qk_scale, BLOCK_N,
                            False, CAUSAL, DOT_PRECISION, INTERP_BF16, TMA, WS)
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, k_offs, v_offs, stride_ks, stride_vs, k_desc, v_desc,
                            k_row, k_col, v_row, v_col, pos_q, unmasked_end, end, seq_kv, diag, qk_scale, BLOCK_N,
                            True, CAUSAL, DOT_PRECISION, INTERP_BF16, TMA, False)

    # rows that saw no key have l = 0 and acc = 0: they are written as 0
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    if INTERP_BF16:
        out = round_to_bf16(out)
    o_rows = b.to(tl.int64) * stride_ob + head.to(tl.int64) * stride_oh + pos_q.to(tl.int64) * stride_os
    tl.store(out_ptr + o_rows[:, None] + offs_d[None, :] * stride_od, out.to(out_ptr.dtype.element_ty),
             mask=row_ok[:, None])


def _check_args(q, k, v, out) -> tuple[int, int, int, int, int, int]:
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape or out.shape != q.shape:
        raise ValueError(
            "flash_attention: expected q and out [batch, heads_q, seq_q, head_dim], k and v [batch, heads_kv, "
            f"seq_kv, head_dim]; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, "
            f"out {tuple(out.shape)}")
    batch, heads_q, seq_q, head_dim = q.shape
    _, heads_kv, seq_kv, _ = k.shape
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(f"flash_attention: k {tuple(k.shape)} does not match q {tuple(q.shape)} in batch or head_dim")
    if heads_kv == 0 or heads_q % heads_kv:
        raise ValueError(f"flash_attention: heads_kv={heads_kv} must divide heads_q={heads_q}")
    if head_dim not in (64, 128):
        raise ValueError(f"flash_attention: head_dim {head_dim} not supported (64 or 128)")
    if len({q.dtype, k.dtype, v.dtype, out.dtype}) != 1:
        raise ValueError(f"flash_attention: q, k, v, out dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}, {out.dtype}")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"flash_attention: dtype {q.dtype} not supported (fp16, bf16, fp32)")
    return batch, heads_q, heads_kv, seq_q, seq_kv, head_dim


_flash_attention_launch = FastLaunch(_flash_attention_kernel)


def _kv_view(t: torch.Tensor) -> tuple[tuple[int, int], int, tuple[int, int, int]] | None:
    """k or v [batch, heads, seq, d] as a 2-D TMA view: ((rows, cols), row stride, (rows per batch, rows per
    head, columns per head)), so that key j of (batch b, head h) is row b * rb + h * rh + j from column h * ch.
    Two layouts have one: heads-major ([b, h, s, d], rows padded or not), every head's keys stacked; and
    sequence-major ([b, s, h, d] seen transposed, vLLM's), a row per position holding every head. None for any
    other, or where TMA's rules (16-byte aligned base and row stride, unit stride along d) do not hold."""
    from kernels.matmul_tma import TensorDescriptor

    b, h, s, d = t.shape
    sb, sh, ss, sd = t.stride()
    size = t.element_size()
    if TensorDescriptor is None or sd != 1 or (t.device.type != "meta" and t.data_ptr() % 16):
        return None
    if (h == 1 or sh == s * ss) and (b == 1 or sb == h * s * ss) and ss >= d:
        stride, shape, steps = ss, (b * h * s, d), (h * s, s, 0)
    elif (h == 1 or sh >= d) and (b == 1 or sb == s * ss) and ss >= (h - 1) * sh + d:
        stride, shape, steps = ss, (b * s, (h - 1) * sh + d), (s, 0, sh)
    else:
        return None
    return (shape, stride, steps) if (stride * size) % 16 == 0 else None


def _kv_descriptors(k, v, cfg: FlashAttentionConfig):
    """(k_desc, v_desc, k steps, v steps) for the TMA route, or None for the pointer one (pointers in the
    descriptors' places)."""
    if not cfg.tma or k.dtype not in (torch.float16, torch.bfloat16):
        return None
    from kernels.matmul_tma import TensorDescriptor

    views = [_kv_view(t) for t in (k, v)]
    if None in views:
        return None
    descs = [TensorDescriptor(t, list(shape), [stride, 1], [cfg.block_n, t.shape[3]])
             for t, (shape, stride, _) in zip((k, v), views, strict=True)]
    return descs[0], descs[1], views[0][2], views[1][2]


# A call's plan per call signature (kernels.common.Plans): checks, config, grid, strides, the TMA descriptors'
# fields and the launch, worked out once; each call passes its tensors and sm_scale.
_PLANS = Plans()


def flash_attention(*, q, k, v, out, causal: bool, sm_scale: float,
                    config: FlashAttentionConfig | None = None, hopper: bool = False) -> None:
    """Write softmax(q k^T * sm_scale [causal mask, bottom-right]) v into `out`; any strides. `hopper`: take
    the sm_90 tiles (:meth:`FlashAttentionConfig.for_shape`), which need more shared memory than sm_80 has."""
    sig = (signature(q, k, v, out), bool(causal), bool(hopper)) if config is None else None
    _PLANS.run(sig, lambda: _plan(q, k, v, out, bool(causal), config, hopper), q, k, v, out, sm_scale)


def _zero_out(q, k, v, out, sm_scale) -> None:
    out.zero_()  # no key for any query


def _plan(q, k, v, out, causal: bool, config: FlashAttentionConfig | None, hopper: bool):
    """``launch(q, k, v, out, sm_scale)`` for these operands' signature."""
    batch, heads_q, heads_kv, seq_q, seq_kv, head_dim = _check_args(q, k, v, out)
    if out.numel() == 0:
        return no_launch
    if seq_kv == 0:
        return _zero_out
    group = heads_q // heads_kv
    cfg = config or FlashAttentionConfig.for_shape(seq_q, head_dim, group, q.dtype,
                                                   interpreted=interpreted(q), hopper=hopper)
    if group % cfg.pack:
        raise ValueError(f"flash_attention: config packs {cfg.pack} q heads, which does not divide {group}")
    n_head_blocks = heads_q // cfg.pack
    tma = _kv_descriptors(k, v, cfg)
    if tma is None and cfg.tma and config is None:
        # the sm_90 tile is the TMA route's: through pointers it takes 255 registers, and spills 220 B where d is
        # not k's and v's unit stride (`harness matrix`); the sm_80 tile has room for any layout
        cfg = FlashAttentionConfig.for_shape(seq_q, head_dim, group, q.dtype, interpreted=interpreted(q))
    grid = (cdiv(seq_q * cfg.pack, cfg.block_m), batch * n_head_blocks)
    sizes = (seq_q, seq_kv, n_head_blocks, group, cfg.pack)
    strides = (*q.stride(), *k.stride(), *v.stride(), *out.stride())
    steps = (*tma[2], *tma[3]) if tma is not None else (0,) * 6
    # the signature fixes every part of FastLaunch's key but sm_scale, a float: the launch is kept per device
    # and stream
    pinned = _flash_attention_launch.pinned(
        grid, HEAD_DIM=head_dim, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, CAUSAL=causal,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else None,  # fp32: exact, not tf32
        INTERP_BF16=interpreted(q) and out.dtype == torch.bfloat16, TMA=tma is not None,
        WS=tma is not None and cfg.warp_specialize, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if tma is None:
        def launch(q, k, v, out, sm_scale):
            pinned(q, k, v, out, *sizes, float(sm_scale) * _LOG2E, *strides, k, v, *steps)
        return launch
    rk, rv = rebaser(tma[0]), rebaser(tma[1])

    def launch_tma(q, k, v, out, sm_scale):
        pinned(q, k, v, out, *sizes, float(sm_scale) * _LOG2E, *strides, rk(k), rv(v), *steps)
    return launch_tma


def flash_attention_hopper(*, q, k, v, out, causal: bool, sm_scale: float) -> None:
    """The same kernel with the sm_90 tiles: the spec's backend for Hopper."""
    flash_attention(q=q, k=k, v=v, out=out, causal=causal, sm_scale=sm_scale, hopper=True)


def flash_attention_ref(*, q, k, v, out, causal: bool, sm_scale: float) -> None:
    """SDPA's math path in promote(dtype, fp32): q k^T, mask, softmax, times v; rows with no key are 0.

    GQA folds each kv head's q heads into the rows of one matmul ([batch, heads_kv, group * seq_q, d]
    against [batch, heads_kv, d, seq_kv]): the same products as repeat_interleave on k and v, without
    copying k and v group times (tens of GB at the decode bench shapes)."""
    acc = torch.promote_types(q.dtype, torch.float32)
    batch, heads_q, seq_q, head_dim = q.shape
    heads_kv, seq_kv = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    qf = q.to(acc).reshape(batch, heads_kv, group * seq_q, head_dim)
    scores = torch.matmul(qf, k.to(acc).transpose(-1, -2)) * sm_scale
    scores = scores.view(batch, heads_kv, group, seq_q, seq_kv)
    visible = torch.ones(seq_q, seq_kv, dtype=torch.bool, device=q.device)
    if causal:
        visible = visible.tril(diagonal=seq_kv - seq_q)
    scores = scores.masked_fill(~visible, float("-inf"))
    p = torch.where(visible.any(dim=-1, keepdim=True), torch.softmax(scores, dim=-1), 0.0)
    res = torch.matmul(p.view(batch, heads_kv, group * seq_q, seq_kv), v.to(acc))
    out.copy_(res.view(batch, heads_q, seq_q, head_dim))


def _sdpa_mask(q, k, causal: bool):
    """(attn_mask, is_causal) for SDPA. Its is_causal aligns top-left, so a causal case with seq_q != seq_kv
    (other than decode, where the bottom-right mask hides nothing) gets the bottom-right mask explicitly."""
    seq_q, seq_kv = q.shape[2], k.shape[2]
    mask, is_causal = None, bool(causal) and seq_q > 1
    if is_causal and seq_q != seq_kv:
        mask = torch.ones(seq_q, seq_kv, dtype=torch.bool, device=q.device).tril(diagonal=seq_kv - seq_q)
        is_causal = False
    return mask, is_causal


def flash_attention_sdpa(*, q, k, v, out, causal: bool, sm_scale: float) -> torch.Tensor:
    """torch SDPA (enable_gqa needs torch >= 2.5) restricted to its flash backend first (FlashAttention-2),
    then efficient, then math; an explicit mask rules flash out. Returns its own output."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    mask, is_causal = _sdpa_mask(q, k, causal)
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    with sdpa_kernel(backends if q.is_cuda else [SDPBackend.MATH]):
        return scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=sm_scale,
                                            enable_gqa=k.shape[1] != q.shape[1])


def flash_attention_sdpa_auto(*, q, k, v, out, causal: bool, sm_scale: float) -> torch.Tensor:
    """torch SDPA with torch's own backend choice (cuDNN attention included, which it prefers on sm_90).
    Returns its own output."""
    from torch.nn.functional import scaled_dot_product_attention

    mask, is_causal = _sdpa_mask(q, k, causal)
    return scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=sm_scale,
                                        enable_gqa=k.shape[1] != q.shape[1])
