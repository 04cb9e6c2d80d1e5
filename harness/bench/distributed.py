"""``bench`` for a ``[distributed]`` spec: each job checked, then timed, on every rank of a group.

A job's samples are the slowest rank's time per call after a barrier (:func:`harness.distributed.tasks.time_case`):
wall clocks under gloo on a CPU, device events under NCCL on GPUs. No roofline is judged: a collective's ceiling
is the link between the devices (bus bandwidth), not the memory ceilings the machine's probes measure.
One group per world size serves every job of that size; a job that raises, crashes or hangs on any rank fails
alone, as an ``error`` case, and the next job starts a fresh group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from harness.bench.plan import Job
from harness.bench.run import _base, _empty
from harness.results.model import CaseResult
from harness.spec.model import WORLD
from harness.target.device import Device

TASKS = "harness.distributed.tasks:"


def run_distributed_jobs(jobs: list[Job], device: Device, timing, seed_base: int = 0
                         ) -> Iterator[tuple[int, CaseResult]]:
    from harness.distributed.group import GroupError, project_group

    groups = {}
    try:
        for i, job in enumerate(jobs):
            world = int(job.case.values[WORLD])
            group = groups.setdefault(world, project_group(world, device.torch_device))
            try:
                yield i, _run(job, group, device, timing, seed_base)
            except GroupError as exc:
                yield i, _empty(_base(job, seed_base), "error", str(exc).partition("\n")[0][:400])
    finally:
        for group in groups.values():
            group.close()


def _run(job: Job, group, device: Device, timing, seed_base: int) -> CaseResult:
    from harness.distributed.group import missing_gpus
    from harness.timing.stats import summarize

    base = _base(job, seed_base)
    p = job.provider
    if not p.runnable:
        return _empty(base, "skipped", p.reason)
    if job.mode != "fwd":
        return _empty(base, "skipped", f"mode {job.mode}: a distributed spec is timed forward only")
    why = missing_gpus(int(job.case.values[WORLD]), device)
    if why:
        return _empty(base, "skipped", why)
    kwargs = dict(spec_path=job.spec.path, impl=p.impl, dtype=job.dtype, tier=job.case.tier,
                  case_id=job.case.id, seed=base["seed"], device=device.torch_device)
    checked = group.run(TASKS + "check_case", kwargs, job.spec.timeout_s)
    if checked.status != "ok":
        return _empty(base, "error", checked.summary[:400])
    wrong = [f"rank {v['rank']}: {problem}" for v in checked.values for problem in v["problems"]]
    if wrong:
        return _empty(base, "wrong", f"failed the correctness check before timing: {wrong[0]}"[:400])
    timed = group.run(TASKS + "time_case", {**kwargs, "min_time_s": timing.min_time_s,
                                            "min_samples": timing.min_samples, "max_samples": timing.max_samples},
                      max(job.spec.timeout_s, timing.timeout_s))
    if timed.status != "ok":
        return _empty(base, "error", timed.summary[:400])
    samples_us = tuple(s * 1e6 for s in timed.values[0])
    stats = summarize(samples_us, seed=base["seed"])
    method = "slowest-rank-events" if device.is_gpu else "slowest-rank-host-timer"
    return dataclasses.replace(_empty(base, "ok", ""), method=method, samples_us=samples_us, stats=stats.as_json(),
                               stop_reason=f"{len(samples_us)} samples, every rank after a barrier")
