"""Rotary position embedding with the semantics of vLLM's `rotary_embedding` custom op.

`query [tokens, heads * head_size]` and `key [tokens, kv_heads * head_size]` are rotated in place by the
cos/sin row `cos_sin_cache[positions[t]]` (first `rot_dim / 2` columns cos, last `rot_dim / 2` sin).
Only the first `rot_dim` elements of each head are rotated (partial rotary); the rest are never touched.
neox style pairs element `i` with `i + rot_dim / 2`, gpt-j style pairs `2i` with `2i + 1`.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.common import cdiv, interpreted, next_power_of_2
from kernels.fastlaunch import FastLaunch

# Rotation pairs one program handles per tensor: enough to amortise the position and cos/sin loads and
# the program's start, few enough to stay in registers (measured best on an H200 for 128-dim heads).
_PAIRS_PER_PROGRAM = 2048
# Below this many programs (decode-sized batches) the work is split further so that every SM gets some.
_MIN_PROGRAMS = 1024
# Tokens per step of the reference.
_REF_CHUNK_TOKENS = 1 << 16


@dataclass(frozen=True)
class RopeConfig:
    block_t: int  # tokens per program
    block_h: int  # heads per program (query and key heads share the program)
    block_r: int  # rotation pairs per head, a power of two >= rot_dim // 2
    num_warps: int

    @classmethod
    @functools.lru_cache(maxsize=256)
    def for_shape(
        cls, tokens: int, heads: int, kv_heads: int, rot_dim: int, dtype: torch.dtype,
        interpreted: bool = False,
    ) -> RopeConfig:
        """`interpreted`: the Triton interpreter runs programs one after another at a high fixed cost
        each, so it gets as few programs as possible instead of enough to fill a GPU."""
        pairs = _PAIRS_PER_PROGRAM * (32 if interpreted else 1)
        min_programs = 1 if interpreted else _MIN_PROGRAMS
        max_heads = max(heads, kv_heads, 1)
        block_r = next_power_of_2(max(rot_dim // 2, 1))
        block_h = min(next_power_of_2(max_heads), max(1, pairs // block_r))
        block_t = min(next_power_of_2(max(tokens, 1)), max(1, pairs // (block_h * block_r)))
        while block_t * block_h > 1:
            if cdiv(tokens, block_t) * cdiv(max_heads, block_h) >= min_programs:
                break
            if block_t > 1:
                block_t //= 2
            else:
                block_h //= 2
        # 16 bytes of x and 16 of its partner per thread: one vector load each for 16-bit types
        pairs_per_thread = 16 // dtype.itemsize
        num_warps = max(1, min(8, block_t * block_h * block_r // (32 * pairs_per_thread)))
        return cls(block_t=block_t, block_h=block_h, block_r=block_r, num_warps=num_warps)


@triton.jit
def _rotate_heads(base_ptr, tok, tok_mask, stride_tok, stride_col, num_heads, head_size, h, half_rot, cos, sin,
                  IS_NEOX: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr):
    # [BLOCK_T, BLOCK_H, BLOCK_R] pairs. Column offsets are int64 too: a column-major tensor's column stride
    # is `tokens`. Explicit fma: left to the compiler, contraction differed between layouts (1 ulp in fp32).
    row = tok[:, None, None] * stride_tok
    head_col = h.to(tl.int64)[None, :, None] * head_size
    head_mask = tok_mask[:, None, None] & (h < num_heads)[None, :, None]
    if IS_NEOX:
        r = tl.arange(0, BLOCK_R)[None, None, :]
        mask = head_mask & (r < half_rot)
        x_ptrs = base_ptr + row + (head_col + r) * stride_col
        y_ptrs = base_ptr + row + (head_col + r + half_rot) * stride_col
        x = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
        y = tl.load(y_ptrs, mask=mask, other=0.0).to(tl.float32)
        tl.store(x_ptrs, tl.fma(x, cos, -(y * sin)).to(base_ptr.dtype.element_ty), mask=mask)
        tl.store(y_ptrs, tl.fma(y, cos, x * sin).to(base_ptr.dtype.element_ty), mask=mask)
    else:
        # Adjacent pairs: one contiguous load of the rotated part, split into (even, odd) in registers.
        # Two stride-2 loads instead ran 7-15x slower on an H200 (no vectorisation, poor coalescing).
        c = tl.arange(0, 2 * BLOCK_R)[None, None, :]
        mask = head_mask & (c < 2 * half_rot)
        ptrs = base_ptr + row + (head_col + c) * stride_col
        v = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
        x, y = tl.split(tl.reshape(v, [BLOCK_T, BLOCK_H, BLOCK_R, 2]))
        out = tl.join(tl.fma(x, cos, -(y * sin)), tl.fma(y, cos, x * sin))
        out = tl.reshape(out, [BLOCK_T, BLOCK_H, 2 * BLOCK_R])
        tl.store(ptrs, out.to(base_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_kernel(
    pos_ptr, q_ptr, k_ptr, cs_ptr,
    num_tokens, stride_pos, stride_q_tok, stride_q_col, stride_k_tok, stride_k_col,
    stride_cs_pos, stride_cs_col,
    num_heads, num_kv_heads, head_size, half_rot,
    IS_NEOX: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr,
):  # fmt: skip
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    tok_mask = tok < num_tokens
    tok = tok.to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    pos = tl.load(pos_ptr + tok * stride_pos, mask=tok_mask, other=0).to(tl.int64)

    r = tl.arange(0, BLOCK_R)
    cs_mask = tok_mask[:, None] & (r < half_rot)[None, :]
    cs_row = cs_ptr + pos[:, None] * stride_cs_pos
    cos = tl.load(cs_row + r[None, :] * stride_cs_col, mask=cs_mask, other=0.0).to(tl.float32)
    sin = tl.load(cs_row + (r + half_rot)[None, :] * stride_cs_col, mask=cs_mask, other=0.0).to(tl.float32)
    cos = cos[:, None, :]
    sin = sin[:, None, :]

    _rotate_heads(q_ptr, tok, tok_mask, stride_q_tok, stride_q_col, num_heads, head_size, h, half_rot, cos, sin,
                  IS_NEOX, BLOCK_T, BLOCK_H, BLOCK_R)
    _rotate_heads(k_ptr, tok, tok_mask, stride_k_tok, stride_k_col, num_kv_heads, head_size, h, half_rot, cos,
                  sin, IS_NEOX, BLOCK_T, BLOCK_H, BLOCK_R)


def _check_args(positions, query, key, cos_sin_cache, head_size) -> tuple[int, int, int, int]:
    """Validate the arguments; return (tokens, heads, kv_heads, rot_dim)."""
    if isinstance(head_size, bool) or not hasattr(head_size, "__index__") or operator.index(head_size) <= 0:
        raise ValueError(f"rope: head_size must be a positive int, got {head_size!r}")
    head_size = operator.index(head_size)
    if positions.dim() != 1:
        raise ValueError(f"rope: positions must be 1-D [tokens], got shape {tuple(positions.shape)}")
    if positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"rope: positions must be int32 or int64, got {positions.dtype}")
    if query is None:
        raise ValueError("rope: query is required")
    tokens = positions.shape[0]
    widths = {}
    for name, t in (("query", query), ("key", key)):
        if t is None:
            continue
        if t.dim() != 2:
            shape = tuple(t.shape)
            raise ValueError(f"rope: {name} must be 2-D [tokens, heads * head_size], got shape {shape}")
        if t.shape[0] != tokens:
            raise ValueError(f"rope: {name} has {t.shape[0]} tokens but positions has {tokens}")
        if t.shape[1] % head_size:
            raise ValueError(f"rope: {name} width {t.shape[1]} is not a multiple of head_size {head_size}")
        if not t.is_floating_point():
            raise ValueError(f"rope: {name} must be a floating-point tensor, got {t.dtype}")
        widths[name] = t.shape[1]
    if key is not None and key.dtype != query.dtype:
        raise ValueError(f"rope: key dtype {key.dtype} differs from query dtype {query.dtype}")
    if cos_sin_cache.dim() != 2:
        shape = tuple(cos_sin_cache.shape)
        raise ValueError(f"rope: cos_sin_cache must be 2-D [max_pos, rot_dim], got shape {shape}")
    if not cos_sin_cache.is_floating_point():
        raise ValueError(f"rope: cos_sin_cache must be a floating-point tensor, got {cos_sin_cache.dtype}")
    rot_dim = cos_sin_cache.shape[1]
    if rot_dim == 0 or rot_dim % 2:
        raise ValueError(f"rope: rot_dim (cos_sin_cache.shape[1] = {rot_dim}) must be even and positive")
    if rot_dim > head_size:
        raise ValueError(f"rope: rot_dim {rot_dim} (cos_sin_cache.shape[1]) exceeds head_size {head_size}")
    devices = {t.device for t in (positions, query, key, cos_sin_cache) if t is not None}
    if len(devices) != 1:
        raise ValueError(f"rope: all tensors must be on one device, got {sorted(map(str, devices))}")
    return tokens, widths["query"] // head_size, widths.get("key", 0) // head_size, rot_dim


_rope_launch = FastLaunch(_rope_kernel)


def rope(
    *, positions, query, key, cos_sin_cache, head_size, is_neox, config: RopeConfig | None = None
) -> None:
    """Rotate `query` and `key` (may be None) in place; any 2-D strides are accepted."""
    tokens, heads, kv_heads, rot_dim = _check_args(positions, query, key, cos_sin_cache, head_size)
    head_size = operator.index(head_size)
    if tokens == 0 or max(heads, kv_heads) == 0:
        return
    cfg = config or RopeConfig.for_shape(tokens, heads, kv_heads, rot_dim, query.dtype, interpreted(query))
    k = query if key is None else key  # kv_heads == 0 masks every key access
    grid = (cdiv(tokens, cfg.block_t), cdiv(max(heads, kv_heads), cfg.block_h))
    _rope_launch[grid](
        positions, query, k, cos_sin_cache,
        tokens, positions.stride(0), query.stride(0), query.stride(1), k.stride(0), k.stride(1),
        cos_sin_cache.stride(0), cos_sin_cache.stride(1),
        heads, kv_heads, head_size, rot_dim // 2,
        IS_NEOX=bool(is_neox), BLOCK_T=cfg.block_t, BLOCK_H=cfg.block_h, BLOCK_R=cfg.block_r,
        num_warps=cfg.num_warps,
    )  # fmt: skip


def rope_ref(*, positions, query, key, cos_sin_cache, head_size, is_neox) -> None:
    """Plain torch, like vLLM's forward_native: compute in promote(dtype, fp32), write back in place.

    Tokens go in chunks so that the temporaries stay small next to the `huge` tier's > 2**31-element query.
    """
    acc = torch.promote_types(query.dtype, torch.float32)
    rot_dim = cos_sin_cache.shape[-1]
    half = rot_dim // 2
    for start in range(0, positions.shape[0], _REF_CHUNK_TOKENS):
        stop = start + _REF_CHUNK_TOKENS
        cos_sin = cos_sin_cache.index_select(0, positions[start:stop].long()).to(acc)
        cos = cos_sin[:, None, :half]
        sin = cos_sin[:, None, half:rot_dim]
        for x in (query, key):
            if x is None or x.numel() == 0:
                continue
            x = x[start:stop]
            xh = x.reshape(x.shape[0], -1, head_size).to(acc)
            rot = xh[..., :rot_dim]
            x1, x2 = (rot[..., :half], rot[..., half:]) if is_neox else (rot[..., 0::2], rot[..., 1::2])
            o1 = x1 * cos - x2 * sin
            o2 = x2 * cos + x1 * sin
            rotated = torch.cat((o1, o2), dim=-1) if is_neox else torch.stack((o1, o2), dim=-1).flatten(-2)
            x.copy_(torch.cat((rotated, xh[..., rot_dim:]), dim=-1).reshape(x.shape))
