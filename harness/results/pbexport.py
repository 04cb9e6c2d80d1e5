"""Export results in pytest-benchmark's JSON format, so its tooling (``pytest-benchmark compare``,
``--benchmark-compare``, dashboards that read its files) can read a harness run.

pytest-benchmark stores times in seconds and computes its statistics itself, so each measured case
becomes one benchmark whose ``stats`` are pytest-benchmark's own (its quartile and outlier rules) over
the case's raw samples, with ``data`` holding those samples. Cases that were not measured (wrong,
error, skipped) are left out, as pytest-benchmark leaves out benchmarks that errored. Everything the
harness knows beyond that (provider, verdict, roofline, speedups, our statistics in µs) is kept in
``extra_info``; the run's provenance goes into ``machine_info`` and ``commit_info``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest_benchmark
from pytest_benchmark.stats import Stats

from harness.results.io import atomic_write_text
from harness.results.model import CaseResult, Results, to_json

SAMPLE_FIELDS = ("samples_us", "dropped_us", "warm_us")


def _stats_seconds(samples_us: tuple[float, ...]) -> dict:
    stats = Stats()
    for t in samples_us:
        stats.update(t * 1e-6)
    out = stats.as_dict()
    out["data"] = list(stats.data)
    out["iterations"] = 1  # every sample is one launch
    return out


def _extra_info(case: CaseResult) -> dict:
    info = {k: v for k, v in to_json(case).items() if k not in SAMPLE_FIELDS and k != "stats"}
    info.update({f"{k}.count": len(getattr(case, k)) for k in SAMPLE_FIELDS})
    info["stats_us"] = to_json(case)["stats"]
    return info


def _benchmark(case: CaseResult) -> dict:
    param = f"{case.provider}-{case.dtype}-{case.case_id}"
    name = f"{case.kernel}[{param}]"
    return {
        "group": f"{case.kernel} {case.dtype} {case.case_id}",  # providers of one case side by side
        "name": name,
        "fullname": f"specs/{case.kernel}.toml::{name}",
        "params": {**case.shape, "provider": case.provider, "dtype": case.dtype},
        "param": param,
        "extra_info": _extra_info(case),
        "options": {"timer": case.method},
        "stats": _stats_seconds(case.samples_us),
    }


def to_pytest_benchmark(results: Results) -> dict:
    """The run as one pytest-benchmark JSON document (times in seconds).

    Provenance comes from the keys harness.timing.environment.collect_environment writes; what it does
    not record (commit time, branch, project) is left empty rather than guessed.
    """
    env = results.environment
    doc = to_json(results)
    machine_info = {
        "node": env.get("hostname"),
        "machine": env.get("device"),
        "python_version": env.get("python"),
        "system": env.get("platform"),
        "environment": doc["environment"],
        "ceilings": doc["ceilings"],
    }
    commit_info = {
        "id": env.get("git_commit") or "unknown",
        "time": None,
        "author_time": None,
        "dirty": bool(env.get("git_dirty")),
        "project": env.get("repository") or "unknown",
        "branch": "(unknown)",
    }
    return {
        "machine_info": machine_info,
        "commit_info": commit_info,
        "benchmarks": [_benchmark(c) for c in results.cases if c.status == "ok" and c.samples_us],
        "datetime": env.get("date"),
        "version": pytest_benchmark.__version__,
    }


def write_pytest_benchmark(results: Results, path: str | os.PathLike) -> Path:
    """Write :func:`to_pytest_benchmark` to path atomically; ``pytest-benchmark compare PATH`` reads it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(to_pytest_benchmark(results), indent=1, allow_nan=False) + "\n")
    return path
