"""All-reduce (sum) for small messages, two ways, at the torch.distributed level: the algorithms vLLM's custom
all-reduce uses at decode sizes, written over the collectives and point-to-point calls every backend has, so
they run under gloo on a CPU as under NCCL.

- one-shot: every rank gathers every rank's whole buffer and sums them itself. One step of latency, but each
  rank receives (world - 1) whole buffers: for the smallest messages, where latency is all there is.
- two-shot: a reduce-scatter (rank j sums shard j of every rank's buffer) then an all-gather of the summed
  shards. Two steps, and each rank moves 2 (world - 1) / world of a buffer: the better one as messages grow.

Both sum in fp32 in rank order, so every rank gets the same bits, whatever the dtype (NCCL's ring reduces in
the input dtype, step by step). The GPU versions of these, over symmetric memory, are the next step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def all_reduce_ref(*, x, out):
    out.copy_(x)
    dist.all_reduce(out)


def _sum(parts: list[torch.Tensor], out: torch.Tensor) -> None:
    acc = torch.zeros(out.shape, dtype=torch.promote_types(out.dtype, torch.float32), device=out.device)
    for p in parts:  # rank order: the same bits on every rank
        acc += p
    out.copy_(acc.view(out.shape))


def one_shot(*, x, out):
    world = dist.get_world_size()
    if x.numel() == 0:
        return
    mine = x.contiguous()
    parts = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(parts, mine)
    _sum(parts, out)


def _shards(n: int, world: int) -> list[tuple[int, int]]:
    """Rank j's [start, end) of a flat buffer of n elements: as even as n allows."""
    base, extra = divmod(n, world)
    bounds, start = [], 0
    for j in range(world):
        end = start + base + (j < extra)
        bounds.append((start, end))
        start = end
    return bounds


def two_shot(*, x, out):
    world, rank = dist.get_world_size(), dist.get_rank()
    flat = x.contiguous().view(-1)
    n = flat.numel()
    if n == 0:
        return
    bounds = _shards(n, world)
    lo, hi = bounds[rank]
    # reduce-scatter: shard j of this rank's buffer goes to rank j; this rank gets its shard from every rank
    received = [flat[lo:hi].clone() if j == rank else torch.empty(hi - lo, dtype=flat.dtype, device=flat.device)
                for j in range(world)]
    ops = []
    for j in range(world):
        if j != rank:
            s, e = bounds[j]
            ops.append(dist.P2POp(dist.isend, flat[s:e].clone(), j))
            ops.append(dist.P2POp(dist.irecv, received[j], j))
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    mine = torch.empty(hi - lo, dtype=x.dtype, device=x.device)
    _sum(received, mine)
    # all-gather of the summed shards, padded to one length (all_gather wants equal sizes)
    width = bounds[0][1] - bounds[0][0]
    padded = torch.zeros(width, dtype=x.dtype, device=x.device)
    padded[:hi - lo] = mine
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded)
    whole = torch.cat([g[:e - s] for g, (s, e) in zip(gathered, bounds, strict=True)])
    out.copy_(whole.view(out.shape))
