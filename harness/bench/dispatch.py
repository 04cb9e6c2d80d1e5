"""Running a plan's jobs: in this process, or in a worker pool where a crash or hang fails one job only."""

from __future__ import annotations

import sys
from collections.abc import Iterator

from harness.bench.plan import Job
from harness.bench.run import Reference, _base, _empty, run_job
from harness.results.model import CaseResult
from harness.target.device import Device


def run_jobs(jobs: list[Job], device: Device, ceilings, timing, seed_base: int = 0,
             pool=None) -> Iterator[tuple[int, CaseResult]]:
    """(index, result) of every job: in order in this process, or as they finish in ``pool``'s workers
    (``harness.workers.WorkerPool``: one per GPU), where a crash or hang fails that job only."""
    if pool is None:
        reference = Reference()
        for i, job in enumerate(jobs):
            yield i, run_job(job, device, ceilings, timing, reference, seed_base)
        return
    from harness.bench.tasks import bench_task
    from harness.results.load import case_from_json

    tasks = [bench_task(job, timing, ceilings, seed_base) for job in jobs]
    for i, outcome in pool.map_unordered(tasks):
        if outcome.status == "ok":
            yield i, case_from_json(outcome.value)
            continue
        print(f"{jobs[i].label}: {outcome.error}", file=sys.stderr, flush=True)  # the details; the case keeps one line
        what = outcome.summary if outcome.status == "error" else f"kernel {outcome.summary}"
        yield i, _empty(_base(jobs[i], seed_base), "error", f"{what} (in an isolated worker)"[:400])
