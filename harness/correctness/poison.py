"""Poison and pad patterns, and the check that every output element was written.

Outputs are pre-filled with a poison before a call: floats with a quiet NaN whose payload no arithmetic makes
(GPUs emit canonical NaNs), integers with a sentinel. A sentinel is a value a kernel may legitimately write
(a quantiser writes int8 -90 often), and so, in principle, is any NaN payload; so a second run pre-fills
the outputs with another pattern, and an element is unwritten only if it holds each run's own poison:
a written value is the same in both runs and cannot be both. The second run is the determinism check's run,
or, when determinism is waived, made only when the first run left candidates.

Storage around a tensor (guard bands, the padding of a non-contiguous view) holds the pad pattern, which
differs from both poisons, so a read outside a view is not mistaken for an unwritten output.
"""

from __future__ import annotations

import torch

from harness.correctness.registry import NOT_APPLICABLE, CheckFailure, check

_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
         torch.bfloat16: torch.int16, torch.bool: torch.uint8, torch.float8_e4m3fn: torch.uint8,
         torch.float8_e5m2: torch.uint8}
# FP8 has few NaN encodings: e4m3 (no inf) only S.1111.111, e5m2 S.11111.{01,10,11}. The two poisons are the two
# signs of one NaN, and the pads use the rest where there is a rest; an FP8 pad is still a NaN, which is what
# makes a read past an input's end visible in the output it feeds.
_FP8_POISON = ({torch.float8_e4m3fn: 0x7F, torch.float8_e5m2: 0x7F},
               {torch.float8_e4m3fn: 0xFF, torch.float8_e5m2: 0xFF})
_FP8_PADS = ({torch.float8_e4m3fn: 0x7F, torch.float8_e5m2: 0x7D}, {torch.float8_e4m3fn: 0xFF, torch.float8_e5m2: 0xFE},
             {torch.float8_e4m3fn: 0x7F, torch.float8_e5m2: 0x7E}, {torch.float8_e4m3fn: 0xFF, torch.float8_e5m2: 0xFD})


def _signed(v: int, nbits: int) -> int:
    return v - (1 << nbits) if v >= 1 << (nbits - 1) else v


def _ints(byte: int) -> dict[torch.dtype, int]:
    """The integer dtypes filled with ``byte`` in every byte."""
    return {torch.int64: _signed(int.from_bytes(bytes([byte]) * 8, "little"), 64),
            torch.int32: _signed(int.from_bytes(bytes([byte]) * 4, "little"), 32),
            torch.int16: _signed(int.from_bytes(bytes([byte]) * 2, "little"), 16),
            torch.int8: _signed(byte, 8), torch.uint8: byte}


# Quiet NaNs (the quiet bit set, so no conversion changes them), stored through an integer view so the
# exact bits survive; integers: bytes 0xA5 / 0x5A, which are different values in every integer dtype.
POISON = (
    {torch.float64: 0x7FF8A5A5A5A5A5A5, torch.float32: 0x7FC5A5A5, torch.float16: 0x7E5A, torch.bfloat16: 0x7FDA,
     **_ints(0xA5), torch.bool: 1, **_FP8_POISON[0]},
    {torch.float64: 0x7FFA5A5A5A5A5A5A, torch.float32: 0x7FDA5A5A, torch.float16: 0x7EA5, torch.bfloat16: 0x7FE5,
     **_ints(0x5A), torch.bool: 0, **_FP8_POISON[1]},
)
PAD = {torch.float64: 0x7FF8C3C3C3C3C3C3, torch.float32: 0x7FC3C3C3, torch.float16: 0x7E3C, torch.bfloat16: 0x7FC3,
       **_ints(0xC3), torch.bool: 1, **_FP8_PADS[0]}
# One pad pattern per tensor of a call (cycling through these): a kernel that overruns an input's end and
# writes what it read past an output's end copies the input's pattern there, which the output's own pattern
# then exposes. With one shared pattern that read-and-write overrun left every guard band as it was. The
# float salts stay clear of the quiet bit (no conversion changes the NaN) and of the canonical NaNs that
# arithmetic produces; the integer bytes differ from the poison bytes 0xA5 / 0x5A.
_FLOAT_SALTS = (0x00, 0x05, 0x0A, 0x0F, 0x14, 0x1E, 0x21, 0x2A)
_INT_BYTES = (0xC3, 0x3C, 0x96, 0x69, 0xB4, 0x4B, 0xD2, 0x2D)
PADS = tuple(
    {torch.float64: PAD[torch.float64] ^ salt, torch.float32: PAD[torch.float32] ^ salt,
     torch.float16: PAD[torch.float16] ^ salt, torch.bfloat16: PAD[torch.bfloat16] ^ salt,
     **_ints(byte), torch.bool: 1, **_FP8_PADS[i % len(_FP8_PADS)]}
    for i, (salt, byte) in enumerate(zip(_FLOAT_SALTS, _INT_BYTES, strict=True))
)
assert PADS[0] == PAD


def pad_pattern(index: int) -> dict[torch.dtype, int]:
    """The guard-band pattern of the ``index``-th tensor of a call."""
    return PADS[index % len(PADS)]


def bits(x: torch.Tensor) -> torch.Tensor:
    """``x`` viewed as integers of its width (any strides): bitwise comparisons, NaN payloads included."""
    return x.view(_BITS.get(x.dtype, x.dtype))


def fill(x: torch.Tensor, pattern: dict[torch.dtype, int]) -> torch.Tensor:
    bits(x).fill_(pattern[x.dtype])
    return x


def poison(x: torch.Tensor, which: int = 0) -> torch.Tensor:
    """Fill ``x`` with poison number ``which`` (0: the first run's, 1: the second run's)."""
    return fill(x, POISON[which])


def holds(x: torch.Tensor, pattern: dict[torch.dtype, int]) -> torch.Tensor:
    """True where ``x`` holds ``pattern``'s bits."""
    return bits(x) == pattern[x.dtype]


def poisoned_mask(x: torch.Tensor, which: int = 0) -> torch.Tensor:
    """True where ``x`` still holds poison number ``which``."""
    return holds(x, POISON[which])


def describe_bits(dtype: torch.dtype, value: int) -> str:
    """A stored pattern or value as a person reads it: NaN bits in hex, integers as numbers and bytes."""
    if dtype.is_floating_point:
        width = 2 * torch.empty((), dtype=dtype).element_size()
        return f"0x{value & ((1 << (4 * width)) - 1):0{width}X}"
    if dtype == torch.bool:
        return str(bool(value))
    width = 2 * torch.empty((), dtype=dtype).element_size()
    return f"{value} (0x{value & ((1 << (4 * width)) - 1):0{width}X})"


def first_index(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.nonzero(mask)[0].tolist())


@check("poison", reads=("second",))
def check_poison(run):
    # a statistic (grad = false) that a call returning its outputs left out is not compared, so not here either
    outputs = [t for t in run.compared if t.output and t.name not in run.returned]
    if not outputs:
        return NOT_APPLICABLE  # every output came back from the call: there is no buffer that could be unwritten
    candidates = {t.name: poisoned_mask(run.got[t.name], 0) for t in outputs}
    if not any(bool(m.any()) for m in candidates.values()):
        return None  # every output element holds something other than the poison: written
    second = run.second  # outputs pre-filled with the other poison
    for t in outputs:
        got = run.got[t.name]
        unwritten = candidates[t.name] & poisoned_mask(second[t.name], 1)
        if unwritten.any():
            first = first_index(unwritten)
            raise CheckFailure("poison", f"{t.name}: {int(unwritten.sum())} of {unwritten.numel()} elements never "
                                         f"written: each still held the poison of both runs (first run "
                                         f"{describe_bits(got.dtype, POISON[0][got.dtype])}, second run "
                                         f"{describe_bits(got.dtype, POISON[1][got.dtype])}), first at index "
                                         f"{first}")
    return None
