"""Split-K summed in the same launch, shared by the GEMMs that split K (kernels/matmul.py, kernels/int4_matmul.py,
kernels/int4_gemv.py).

Where the output tiles alone give too few programs to fill the GPU, each program takes one range of K and writes
its fp32 partial tile to a workspace ``[split, ...]``; it then takes a ticket from its tile's counter. The program
drawing the last ticket sums every split's partial in split order (``split_k_total``: one unrolled load per
split, all in flight at once), finishes the tile (epilogue, one rounding) and resets the counter for the next
launch. Which program finishes last does not change the sum: the result is deterministic and bitwise repeatable,
with no second launch and no floating-point atomics. The workspace and counters (``scratch``) are kept per device
and stream, so launches on two streams never share them; every launch leaves the counters at zero.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime import driver

SPLIT_MAX = 16  # the most K ranges one launch splits into: the unrolled sum's bound

# Per (device, stream): the fp32 partials and the per-tile counters (zeroed once; each launch leaves them zero).
_SCRATCH: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def scratch(device: torch.device, partials: int, tiles: int) -> tuple[torch.Tensor, torch.Tensor]:
    """At least ``partials`` fp32 elements of workspace and ``tiles`` zeroed int32 counters for a launch on
    ``device``'s current stream (grown, never shrunk; a grown counter array starts at zero again)."""
    # the raw handle, as Triton's driver asks for it: torch.cuda.current_stream builds a Stream object per call,
    # a tenth of int4's launcher's host time under cProfile on the H100
    stream = driver.active.get_current_stream(device.index if device.index is not None
                                              else torch.cuda.current_device()) if device.type == "cuda" else 0
    key = (device, stream)
    ws, cnt = _SCRATCH.get(key, (None, None))
    if ws is None or ws.numel() < partials:
        ws = torch.empty(max(partials, 1 << 16), dtype=torch.float32, device=device)
    if cnt is None or cnt.numel() < tiles:
        cnt = torch.zeros(max(tiles, 1 << 10), dtype=torch.int32, device=device)
    _SCRATCH[key] = (ws, cnt)
    return ws, cnt


_UNUSED: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


def unused(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A workspace and counters for a launch that does not split: of the same dtypes as ``scratch``'s (so it is
    the same specialisation), never touched, and without ``scratch``'s per-call stream lookup."""
    pair = _UNUSED.get(device)
    if pair is None:
        pair = _UNUSED[device] = (torch.empty(1, dtype=torch.float32, device=device),
                                  torch.zeros(1, dtype=torch.int32, device=device))  # fmt: skip
    return pair


@triton.jit
def split_k_total(part_ptrs, stride_split, mask, cnt_ptr, tile, split, SPLIT_TILES: tl.constexpr,
                  IN_FLIGHT: tl.constexpr = True):  # fmt: skip
    """Called by every split of a tile once its fp32 partial is stored at ``part_ptrs + pid_k * stride_split``:
    (whether this program drew the tile's last ticket, and then the sum of the ``split`` partials in split order).
    The last program also resets the tile's counter; the caller finishes the tile where ``last`` holds.

    IN_FLIGHT unrolls the sum over SPLIT_TILES (the bound on ``split``) so every load is in flight at once: for
    small tiles. Large tiles load one partial at a time (the unrolled loads of a 128 x 128 tile spilled)."""
    tl.debug_barrier()  # every thread's partial written before the ticket releases them
    ticket = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
    last = ticket == split - 1
    total = tl.zeros(part_ptrs.shape, dtype=tl.float32)
    if last:
        tl.debug_barrier()
        if IN_FLIGHT:
            for i in tl.static_range(SPLIT_TILES):
                # (a runtime-shaped comparison: the interpreter rejects a constexpr-only mask)
                in_range = (tl.zeros(part_ptrs.shape, dtype=tl.int32) + i) < split
                total += tl.load(part_ptrs + i * stride_split, mask=mask & in_range, other=0.0,
                                 cache_modifier=".cg")  # fmt: skip
        else:
            for i in range(0, split):
                total += tl.load(part_ptrs + i * stride_split, mask=mask, other=0.0, cache_modifier=".cg")
        tl.atomic_xchg(cnt_ptr + tile, 0)  # the next launch draws from 0 again
    return last, total
