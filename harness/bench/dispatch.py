"""Running a plan's jobs: in this process, or in a worker pool where a crash or hang fails one job only.

Every provider of one (kernel, case, dtype) runs on one GPU: the speedups divide their medians, and two
cards of one model differ by more than the effects a speedup reports. In a pool the jobs of a case share
an affinity, so they go to the worker that took the first of them; each result records its GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Iterator

from harness.bench.plan import Job
from harness.bench.run import _base, _empty, run_job
from harness.correctness.checks import ReferenceCache
from harness.results.model import CaseResult
from harness.target.device import Device


def case_key(job: Job) -> str:
    """The group whose providers are compared with each other: one (kernel, case, dtype)."""
    return f"{job.spec.name}|{job.case.id}|{job.dtype}"


@functools.cache
def gpu_identity(torch_device: str) -> tuple[int | None, str | None]:
    """(index, UUID) of ``cuda:i`` as this process numbers the GPUs; (None, None) for the CPU."""
    if not torch_device.startswith("cuda"):
        return None, None
    index = int(torch_device.partition(":")[2] or 0)
    try:
        import torch

        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:  # no UUID from this torch or driver: the index alone still names the card
        return index, None
    return index, uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"  # nvidia-smi's spelling


def _on(result: CaseResult, torch_device: str) -> CaseResult:
    index, uuid = gpu_identity(torch_device)
    return dataclasses.replace(result, gpu_index=index, gpu_uuid=uuid)


def run_jobs(jobs: list[Job], device: Device, ceilings, timing, seed_base: int = 0,
             pool=None) -> Iterator[tuple[int, CaseResult]]:
    """(index, result) of every job: in order in this process, or as they finish in ``pool``'s workers
    (``harness.workers.WorkerPool``: one per GPU), where a crash or hang fails that job only. A distributed
    spec's jobs run in groups of rank processes of their own (harness.bench.distributed), never in the pool."""
    spread = [i for i, job in enumerate(jobs) if job.spec.distributed is not None]
    if spread:
        from harness.bench.distributed import run_distributed_jobs

        # the bus bandwidth is measured again with the machine's ceilings (bench --refresh-ceilings)
        fresh = ceilings is not None and not getattr(ceilings, "cached", True)
        for k, result in run_distributed_jobs([jobs[i] for i in spread], device, timing, seed_base, refresh=fresh):
            yield spread[k], result
        rest = [i for i in range(len(jobs)) if i not in set(spread)]
        for k, result in run_jobs([jobs[i] for i in rest], device, ceilings, timing, seed_base, pool):
            yield rest[k], result
        return
    if pool is None:
        reference = ReferenceCache()
        for i, job in enumerate(jobs):
            yield i, _on(run_job(job, device, ceilings, timing, reference, seed_base), device.torch_device)
        return
    from harness.bench.tasks import bench_task
    from harness.results.load import case_from_json

    tasks = [dataclasses.replace(bench_task(job, timing, ceilings, seed_base), affinity=case_key(job))
             for job in jobs]
    for i, outcome in pool.map_unordered(tasks):
        if outcome.status == "ok":
            yield i, _on(case_from_json(outcome.value), outcome.device)
            continue
        print(f"{jobs[i].label}: {outcome.error}", file=sys.stderr, flush=True)  # the details; the case keeps one line
        what = outcome.summary if outcome.status == "error" else f"kernel {outcome.summary}"
        failed = _empty(_base(jobs[i], seed_base), "error", f"{what} (in an isolated worker)"[:400])
        yield i, _on(failed, outcome.device) if outcome.device else failed
