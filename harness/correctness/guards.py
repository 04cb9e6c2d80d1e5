"""Guard bands: every tensor the harness hands a kernel sits inside a larger allocation whose rest must not change.

A tensor's buffer is ``[guard | storage | guard]``: the storage is the tensor's own elements plus, for a
non-contiguous view, the padding between them (padded rows, the skipped elements of a strided view); the
guards are 4 KiB each side. Everything but the tensor's own elements holds the pad pattern
(:data:`harness.correctness.poison.PAD`), and after every call of the kernel it must still: a write one
element past a row or past the end of a tensor lands in memory the harness owns (so the Triton interpreter
on the CPU writes it harmlessly too) and is reported with the tensor's name and the first offset written.

Under compute-sanitizer (``harness sanitize`` turns PyTorch's CUDA caching allocator off, so that every tensor
is its own allocation) the guard bands are left out on CUDA: one would put a one-element overread inside
the allocation, out of memcheck's sight, and there memcheck watches both reads and writes at the tensor's ends.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from harness.correctness.poison import PAD, bits, describe_bits, fill
from harness.correctness.registry import CheckFailure, check

GUARD_BYTES = 4096  # each side; a multiple of every alignment a kernel may assume, so the tensor stays aligned
PAD_ELEMENTS = 3  # per padded row: keeps padded rows unaligned to 16 bytes
LAYOUTS = ("contiguous", "padded", "strided", "transposed")


@dataclass(frozen=True)
class Guard:
    """Where a tensor sits in its allocation: ``base[offset : offset + span]`` is its storage."""

    base: torch.Tensor               # the whole allocation, flat
    offset: int                      # elements of the guard before the storage
    span: int                        # elements of the storage: the tensor's own plus its padding
    layout: str                      # the layout the tensor was given (what a copy must reproduce)
    pads: tuple[torch.Tensor, ...]   # views of the padding inside the storage
    pattern: dict = None             # the pad pattern by dtype (poison.pad_pattern); None: poison.PAD

    @property
    def pad(self) -> int:
        return (self.pattern or PAD)[self.base.dtype]


def effective_layout(shape, layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}")
    if len(shape) == 0 or (layout in ("padded", "transposed") and len(shape) < 2):
        return "contiguous"  # a scalar has no strides to vary, a vector no rows to pad or swap
    return layout


def _guard_elements(dtype: torch.dtype, device) -> int:
    if torch.device(device).type == "cuda" and os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1":
        return 0  # compute-sanitizer's run: memcheck sees each tensor's ends (module docstring)
    return GUARD_BYTES // torch.empty((), dtype=dtype).element_size()


def allocate(shape, dtype: torch.dtype, device, layout: str = "contiguous",
             pattern: dict | None = None) -> tuple[torch.Tensor, Guard]:
    """A tensor of ``shape`` in ``layout`` between guard bands; all but its own (uninitialised) elements holds
    the pad pattern (``pattern``, default :data:`PAD`)."""
    pattern = pattern or PAD
    shape = [int(n) for n in shape]
    layout = effective_layout(shape, layout)
    if layout == "padded":
        storage_shape = shape[:-1] + [shape[-1] + PAD_ELEMENTS]
    elif layout == "strided":
        storage_shape = shape[:-1] + [2 * shape[-1]]
    elif layout == "transposed":
        storage_shape = shape[:-2] + [shape[-1], shape[-2]]
    else:
        storage_shape = shape
    span = 1
    for n in storage_shape:
        span *= n
    offset = _guard_elements(dtype, device)
    base = torch.empty(2 * offset + span, dtype=dtype, device=device)
    fill(base[:offset], pattern)
    fill(base[offset + span:], pattern)
    storage = base[offset:offset + span].view(storage_shape)
    pads: tuple[torch.Tensor, ...] = ()
    if layout == "padded":
        view, pads = storage[..., :shape[-1]], (storage[..., shape[-1]:],)
    elif layout == "strided":
        view, pads = storage[..., ::2], (storage[..., 1::2],)
    elif layout == "transposed":
        view = storage.transpose(-1, -2)
    else:
        view = storage
    for p in pads:
        fill(p, pattern)
    return view, Guard(base, offset, span, layout, pads, pattern)


def _region(changed: torch.Tensor, region: torch.Tensor, start: int) -> tuple[int, int, int] | None:
    """(count, offset of the first changed element from the storage's start, its bits), or None."""
    if not changed.any():
        return None
    idx = tuple(int(i) for i in torch.nonzero(changed)[0].tolist())
    offset = start + sum(i * s for i, s in zip(idx, region.stride(), strict=True))
    return int(changed.sum()), offset, int(bits(region)[idx])


_PADDING = {"padded": "in the padding at the end of a row", "strided": "in a gap between two elements of a row"}


def violation(name: str, guard: Guard) -> str | None:
    """None when everything around ``name``'s elements still holds the pad pattern, else where it does not."""
    base, o, dtype = guard.base, guard.offset, guard.base.dtype
    pad = guard.pad
    found = []  # (count, offset from the tensor's first storage element, bits, where)
    front = _region(bits(base[:o]) != pad, base[:o], -o)
    if front:
        found.append((*front, "in the guard band before the tensor"))
    for p in guard.pads:
        hit = _region(bits(p) != pad, p, p.storage_offset() - base.storage_offset() - o)
        if hit:
            found.append((*hit, f"{_PADDING[guard.layout]} of its {guard.layout} layout"))
    back = _region(bits(base[o + guard.span:]) != pad, base[o + guard.span:], guard.span)
    if back:
        found.append((*back, "in the guard band after the tensor"))
    if not found:
        return None
    count = sum(f[0] for f in found)
    _, first, value, where = min(found, key=lambda f: f[1])
    storage = f"offsets 0..{guard.span - 1}" if guard.span else "no elements"
    return (f"{name}: {count} element{'s' if count != 1 else ''} outside the tensor written; the first, at element "
            f"offset {first} ({first * base.element_size()} bytes) from its first element, is {where} (its "
            f"storage: {storage}) and holds {describe_bits(dtype, value)} instead of the pad pattern "
            f"{describe_bits(dtype, pad)}")


def verify(args, run: str = "") -> None:
    """Raise the guards failure for the first tensor of ``args`` whose surroundings were written."""
    for name, guard in args.guards.items():
        problem = violation(name, guard)
        if problem:
            raise CheckFailure("guards", problem + (f" ({run})" if run else ""))


@check("guards")
def check_guards(run) -> None:
    verify(run.args)  # the main run; the contiguous-copy and second runs are verified as they are made
    return None
