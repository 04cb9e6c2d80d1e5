"""A benchmark job as a worker task: only plain data crosses the process boundary."""

from __future__ import annotations

import dataclasses

from harness.correctness.tasks import _find, _spec
from harness.workers.pool import Task

_REFERENCE = None  # the worker's cache of the upcast reference result, shared by consecutive providers


def run_bench_job(spec_path: str, provider_name: str, dtype: str, case_id: str, seed: int, timing: dict,
                  ceilings: dict | None = None, tier: str = "bench", mode: str = "fwd") -> dict:
    """One benchmark job, in the worker; returns ``results.to_json`` of its CaseResult."""
    global _REFERENCE
    from harness.bench.plan import Job
    from harness.bench.run import run_job
    from harness.correctness.checks import ReferenceCache
    from harness.results.model import to_json
    from harness.target.device import detect
    from harness.target.providers import providers_for
    from harness.target.resolve import resolve
    from harness.timing.ceilings import Ceilings
    from harness.timing.engine import TimingConfig

    spec, device = _spec(spec_path), detect()
    provider = _find(providers_for(spec, device, resolve(spec, device)), provider_name, "provider", "name")
    job = Job(spec, _find(spec.cases[tier], case_id, f"{tier} case"), dtype, provider, mode)
    _REFERENCE = _REFERENCE or ReferenceCache()
    result = run_job(job, device, Ceilings(**ceilings) if ceilings else None, TimingConfig(**timing),
                           _REFERENCE, seed)
    return to_json(result)


def bench_task(job, timing, ceilings, seed: int) -> Task:
    # The spec's timeout bounds the kernel; the timing budget bounds the sampling on top of it.
    return Task("harness.bench.tasks:run_bench_job",
                dict(spec_path=job.spec.path, provider_name=job.provider.name, dtype=job.dtype, case_id=job.case.id,
                     seed=seed, timing=dataclasses.asdict(timing), tier=job.case.tier, mode=job.mode,
                     ceilings=dataclasses.asdict(ceilings) if ceilings is not None else None),
                job.label, job.spec.timeout_s + timing.timeout_s)
