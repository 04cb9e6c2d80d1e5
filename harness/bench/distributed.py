"""``bench`` for a ``[distributed]`` spec: each job checked, then timed, on every rank of a group.

A job's samples are the slowest rank's time per call after a barrier (:func:`harness.distributed.tasks.time_case`):
wall clocks under gloo on a CPU, device events under NCCL on GPUs. A collective's ceiling is the link between the
ranks, not the memory ceilings the machine's probes measure: the roofline is the spec's bus bytes against the
all-reduce bus bandwidth measured on the same group (harness.distributed.ceiling), once per world size.
One group per world size serves every job of that size; a job that raises, crashes or hangs on any rank fails
alone, as an ``error`` case, and the next job starts a fresh group.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from harness.bench.modes import mode_env
from harness.bench.plan import Job
from harness.bench.run import _base, _empty
from harness.results.model import CaseResult
from harness.spec.model import WORLD
from harness.target.device import Device

TASKS = "harness.distributed.tasks:"


def run_distributed_jobs(jobs: list[Job], device: Device, timing, seed_base: int = 0, *, cache_dir=None,
                         refresh: bool = False) -> Iterator[tuple[int, CaseResult]]:
    from harness.distributed.group import GroupError, project_group

    groups, ceilings = {}, {}
    try:
        for i, job in enumerate(jobs):
            world = int(job.case.values[WORLD])
            group = groups.setdefault(world, project_group(world, device.torch_device))
            try:
                if world not in ceilings and job.spec.roofline is not None and _runnable(job, device):
                    ceilings[world] = _ceiling(group, cache_dir, refresh)
                yield i, _run(job, group, device, timing, seed_base, ceilings.get(world))
            except GroupError as exc:
                yield i, _empty(_base(job, seed_base), "error", str(exc).partition("\n")[0][:400])
    finally:
        for group in groups.values():
            group.close()


def _runnable(job: Job, device: Device) -> bool:
    from harness.distributed.group import missing_gpus

    return job.provider.runnable and not missing_gpus(int(job.case.values[WORLD]), device)


def _ceiling(group, cache_dir, refresh: bool):
    """The group's bus bandwidth, or None (said on stderr) where it could not be measured: rates, no %."""
    import sys

    from harness.distributed.ceiling import bus_ceiling

    try:
        ceiling = bus_ceiling(group, cache_dir=cache_dir, refresh=refresh)
    except RuntimeError as exc:
        print(f"ceilings: {exc}", file=sys.stderr, flush=True)
        return None
    print(f"ceilings: {ceiling.line}", file=sys.stderr, flush=True)
    return ceiling


def bus_roofline(spec, env: dict, median_us: float, ceiling, dtype: str, median_ci_us=None) -> dict:
    """harness.bench.roofline's fields for a collective: the spec's bytes are bus bytes and the one ceiling the
    measured bus bandwidth (no compute ceiling: a sum's flops never bound a collective)."""
    from harness.bench.roofline import roofline

    measured = None if ceiling is None else {"copy_gbps": ceiling.busbw_gbps, "bandwidth_gbps": {},
                                             "matmul_tflops": {}}
    roof = roofline(spec, env, median_us, measured, dtype, median_ci_us)
    return {**roof, "bound": "bus"} if roof.get("bound") else roof


def _run(job: Job, group, device: Device, timing, seed_base: int, ceiling=None) -> CaseResult:
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
    roof = bus_roofline(job.spec, mode_env(job.spec, job.case, job.dtype, "fwd"), stats.median, ceiling, job.dtype,
                        (stats.median_ci_lo, stats.median_ci_hi))
    if job.case.tier == "cpu" or not device.is_gpu:  # a target is a GPU link's: gloo on a host is not judged by it
        roof = {**roof, "target": None, "verdict": "n/a"}
    return dataclasses.replace(_empty(base, "ok", ""), method=method, samples_us=samples_us, stats=stats.as_json(),
                               stop_reason=f"{len(samples_us)} samples, every rank after a barrier", **roof)
