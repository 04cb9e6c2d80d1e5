"""All-reduce kernels that go wrong on one rank of the group: rank 1 leaves out its own contribution, raises,
exits the process, or never returns, while rank 0 does its part and waits for rank 1 in the collective.

tests/specs/planted_distributed.toml makes each a backend; tests/test_distributed.py asserts that the generated
items fail each one naming rank 1, and that the items after it still run.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

RAISE_MESSAGE = "planted failure: rank 1 gives up before the collective"


def _gathered(x: torch.Tensor) -> list[torch.Tensor]:
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, x.contiguous())
    return parts


def correct(*, x, out):
    out.copy_(torch.stack(_gathered(x)).sum(0))


def skips_own_on_rank1(*, x, out):
    """Sums every rank's buffer but, on rank 1, its own: the other ranks get the right sum."""
    parts = _gathered(x)
    rank = dist.get_rank()
    out.copy_(torch.stack([p for j, p in enumerate(parts) if j != 1 or rank != 1]).sum(0))


def raises_on_rank1(*, x, out):
    if dist.get_rank() == 1:
        raise RuntimeError(RAISE_MESSAGE)
    correct(x=x, out=out)


def exits_on_rank1(*, x, out):
    if dist.get_rank() == 1:
        os._exit(3)
    correct(x=x, out=out)


def hangs_on_rank1(*, x, out):
    if dist.get_rank() == 1:
        while True:  # a spin on a flag nobody sets
            time.sleep(0.05)
    correct(x=x, out=out)
