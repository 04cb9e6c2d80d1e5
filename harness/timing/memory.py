"""Peak device memory of one call, above what was allocated before it.

CUDA's caching allocator keeps the high-water mark of allocated bytes (``max_memory_allocated``): reset it,
make one call, read it, and subtract what was allocated before the call. That is what the call itself needs on
top of its arguments (and, for a backward, on top of the forward's saved graph). A CPU has no such counter
that means the same thing (the process's RSS counts the allocator's free lists and Python's heap), so a CPU
records None, never an estimate.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def peak_bytes(fn: Callable[[], object], device: str) -> int | None:
    """Bytes ``fn`` needed at its peak beyond what was allocated before it; None off CUDA."""
    if not str(device).startswith("cuda"):
        return None
    dev = torch.device(device)
    torch.cuda.synchronize(dev)
    before = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    fn()
    torch.cuda.synchronize(dev)
    return max(0, torch.cuda.max_memory_allocated(dev) - before)
