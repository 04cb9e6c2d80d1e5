"""The int4 GEMM's launch configurations (kernels/int4_matmul.py launches them): its quantisation group, the
autotuner's candidates per way of reading w, and the pruning that keeps the ones a launch can use."""

from __future__ import annotations

from dataclasses import dataclass

import triton

from kernels.common import next_power_of_2

GROUP_SIZE = 128
# Programs that share a band of a's rows walk w's columns together, so a band stays in L2 while it is used.
_GROUP_M = 8
# The interpreter runs programs one after another: few, large tiles (up to this size) keep a CPU run short.
_INTERP_BLOCK = 128
# Rows up to which a launch is "decode": 16-row tiles, and a split of K when N alone gives too few programs.
_DECODE_M = 16
# Word-path tiles of at least this many rows compute c's tile transposed (w @ a.T), the dequantised weight being
# the operand Hopper's wgmma may take from registers. The SASS for sm_90 has the same instruction mix either way,
# in fewer registers transposed (175 against 208 at 128 x 128); a GPU comparison is the probe's --sweep.
_SWAP_MIN_M = 64


@dataclass(frozen=True)
class Int4Config:
    block_m: int
    block_n: int
    block_k: int  # a power of two dividing GROUP_SIZE: every K block lies in one quantisation group
    group_m: int
    num_warps: int
    num_stages: int

    def __post_init__(self):
        if GROUP_SIZE % self.block_k or self.block_k < 2:
            raise ValueError(f"block_k {self.block_k} must divide the group size {GROUP_SIZE}")

    def as_triton(self) -> triton.Config:
        return triton.Config(
            {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "GROUP_M": self.group_m},
            num_warps=self.num_warps,
            num_stages=self.num_stages,
        )

    @classmethod
    def interpreted(cls, m: int, n: int, k: int) -> Int4Config:
        """The Triton interpreter's config: a tile covering as much of the problem as _INTERP_BLOCK allows."""

        def fit(size: int, lo: int = 16) -> int:
            return min(max(next_power_of_2(size), lo), _INTERP_BLOCK)

        return cls(fit(m), fit(n), min(fit(k), GROUP_SIZE), 1, 4, 1)


# The autotuner's candidates on a GPU, per way of reading w (prune_configs keeps one list). BLOCK_K stops at the
# group size (one scale and zero vector per K block); depth in flight comes from the pipeline's stages instead.
# Decode (16-row tiles): N tiles narrow enough that many programs stream w at once. Larger M: tiles up to
# 128 x 128, where the dequantisation is amortised over M rows. Each list compiles without spills for sm_80,
# sm_90 and sm_100 (`harness matrix`).
WORD_CONFIGS = (
    Int4Config(16, 64, 128, _GROUP_M, 4, 4),
    Int4Config(16, 128, 128, _GROUP_M, 4, 3),
    Int4Config(16, 64, 64, _GROUP_M, 4, 6),
    Int4Config(32, 64, 128, _GROUP_M, 4, 4),
    Int4Config(64, 64, 128, _GROUP_M, 4, 4),
    Int4Config(64, 128, 64, _GROUP_M, 4, 4),
    Int4Config(128, 64, 64, _GROUP_M, 4, 4),
    Int4Config(128, 128, 64, _GROUP_M, 8, 4),
)
# The byte path (K not a multiple of 8, or w's rows not 4-byte aligned): shallower K blocks, as the unpacking
# holds more in registers (the 128-deep decode tiles spilled; the 16 x 128 one on 4 warps spilled 8 B on sm_100
# once the split's sum moved into the kernel, so it takes 8).
BYTE_CONFIGS = (
    Int4Config(16, 32, 64, _GROUP_M, 4, 4),
    Int4Config(16, 64, 64, _GROUP_M, 4, 4),
    Int4Config(16, 128, 64, _GROUP_M, 8, 3),
    Int4Config(32, 64, 64, _GROUP_M, 8, 3),
    Int4Config(64, 64, 64, _GROUP_M, 4, 4),
    Int4Config(64, 128, 64, _GROUP_M, 4, 4),
    Int4Config(128, 64, 64, _GROUP_M, 4, 4),
    Int4Config(128, 128, 64, _GROUP_M, 8, 4),
)
CONFIGS = WORD_CONFIGS + tuple(c for c in BYTE_CONFIGS if c not in WORD_CONFIGS)


def _key(c) -> tuple:
    """An autotune config's identity as an Int4Config's fields (group_m aside)."""
    kw = c.kwargs
    return (kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], c.num_warps, c.num_stages)


_WORD_KEYS = {(c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages) for c in WORD_CONFIGS}
_BYTE_KEYS = {(c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages) for c in BYTE_CONFIGS}

# Operand and accumulator elements per thread above which a tile spills when its loads are not pipelined (an
# unaligned launch keeps whole tiles in registers): kernels.matmul's bound for the word path; the byte path holds
# more per element while it unpacks, and `harness matrix` showed its 96- and 128-element tiles spilling.
_UNPIPELINED_ELEMENTS = {True: 128, False: 88}


def _elements_per_thread(c) -> float:
    bm, bn, bk = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"]
    return (bm * bn + bm * bk + bn * bk) / (32 * c.num_warps)


def _aligned(named_args) -> bool:
    """K-major a and w (a row-major activation, a packed checkpoint's weight), 16-byte aligned pointers and row
    strides: the layout the large tiles are for (vectorised, pipelined loads)."""
    if named_args["stride_ak"] != 1 or named_args["stride_wk"] != 1:
        return False
    ptrs_ok = all(named_args[p].data_ptr() % 16 == 0 for p in ("a_ptr", "w_ptr"))
    return ptrs_ok and named_args["stride_am"] % 8 == 0 and named_args["stride_wn"] % 16 == 0


def prune_configs(configs, named_args, **kwargs):
    """The list for the way w is read; 16-row tiles for decode (M <= 16), no tile taller than M needs, no short
    tiles for large M (where none is left, the shortest); for an unaligned launch only tiles that fit in registers
    without the pipeline (where none is left, the smallest)."""
    m = named_args["M"]
    words = bool(kwargs.get("WORDS"))
    keys = _WORD_KEYS if words else _BYTE_KEYS
    configs = [c for c in configs if _key(c) in keys] or list(configs)
    if m <= _DECODE_M:
        kept = [c for c in configs if c.kwargs["BLOCK_M"] == 16]
    else:
        tall = next_power_of_2(m)
        kept = [c for c in configs if 32 <= c.kwargs["BLOCK_M"] <= tall and (m < 1024 or c.kwargs["BLOCK_M"] >= 64)]
    if not kept:
        shortest = min(c.kwargs["BLOCK_M"] for c in configs)
        kept = [c for c in configs if c.kwargs["BLOCK_M"] == shortest]
    if not _aligned(named_args):
        fits = [c for c in kept if _elements_per_thread(c) <= _UNPIPELINED_ELEMENTS[words]]
        kept = fits or [min(kept, key=_elements_per_thread)]
    return kept
