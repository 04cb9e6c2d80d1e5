"""Profiling one kernel: its candidate at its headline bench case under ncu, read back, set against the
roofline model and diagnosed, as one ProfileRecord (a failure is a record too, with its reason)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from harness.bench.roofline import roofline
from harness.correctness.args import full_env
from harness.profile import ncu
from harness.profile.diagnose import diagnose_case, diagnose_launch
from harness.profile.parse import ParseError, launches
from harness.results.profile import Launch, ProfileRecord
from harness.spec.model import Case, Spec
from harness.target.device import Device
from harness.target.providers import providers_for
from harness.target.resolve import resolve


@dataclass(frozen=True)
class Target:
    spec: Spec
    spec_path: str
    case: Case
    dtype: str
    provider: str

    @property
    def label(self) -> str:
        return f"{self.spec.name} {self.provider} {self.dtype} {self.case.id}"


def headline_case(spec: Spec) -> Case | None:
    """The bench case marked ``headline = true``, else the first bench case."""
    bench = spec.cases.get("bench", ())
    return next((c for c in bench if c.headline), bench[0] if bench else None)


def pick_dtype(spec: Spec, wanted: str) -> str:
    return wanted if wanted in spec.dtypes else spec.dtypes[0]


def candidate(spec: Spec, device: Device) -> str:
    """The provider the benchmark times as the candidate here: the first runnable backend in fallback order,
    else the reference (bench.plan and target.providers decide it; this only reads their answer)."""
    provs = providers_for(spec, device, resolve(spec, device))
    return next(p.name for p in provs if p.role == "candidate")


def _sum(values) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def build_record(t: Target, found: tuple[Launch, ...], ceilings, command: str) -> ProfileRecord:
    """Sum the launches, place the call on the roofline (the measured ceilings, when given) and diagnose."""
    duration = _sum(la.duration_us for la in found)
    moved = _sum(_sum((la.dram_read_bytes, la.dram_write_bytes)) for la in found)
    env = full_env(t.spec, t.case, t.dtype)
    roof = roofline(t.spec, env, duration, ceilings, t.dtype) if duration else {}
    model = roof.get("bytes")
    ratio = moved / model if moved is not None and model else None
    pct = roof.get("pct_roofline")
    floor = pct * duration / 100 if pct is not None and duration else None
    case = {"pct_roofline": pct, "target": roof.get("target"), "bound": roof.get("bound"), "bytes_ratio": ratio}
    return ProfileRecord(
        kernel=t.spec.name, provider=t.provider, dtype=t.dtype, case_id=t.case.id, shape=t.case.values,
        status="ok", reason="", launches=tuple(diagnose_launch(la, **case) for la in found), duration_us=duration,
        dram_bytes=moved, model_bytes=model, bytes_ratio=ratio, roofline_floor_us=floor, pct_roofline=pct,
        bound=roof.get("bound"), target=roof.get("target"), findings=diagnose_case(ratio), command=command)


def failed_record(t: Target, status: str, reason: str, command: str = "") -> ProfileRecord:
    return ProfileRecord(
        kernel=t.spec.name, provider=t.provider, dtype=t.dtype, case_id=t.case.id, shape=t.case.values,
        status=status, reason=reason, launches=(), duration_us=None, dram_bytes=None, model_bytes=None,
        bytes_ratio=None, roofline_floor_us=None, pct_roofline=None, bound=None, target=None, findings=(),
        command=command)


def profile_kernel(ncu_path: str, t: Target, out_dir: Path, ceilings, *, seed: int = 0, timeout: float = 600.0,
                   extra=()) -> tuple[ProfileRecord, str]:
    """(the record, ncu's whole output); the report file ``<kernel>.ncu-rep`` stays in ``out_dir`` for the
    Nsight Compute GUI."""
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / f"{t.spec.name}.ncu-rep"
    report.unlink(missing_ok=True)  # a stale report must not pass for this run's
    target = ncu.target_argv(t.spec_path, t.case.id, t.dtype, t.provider, seed)
    argv = ncu.profile_argv(ncu_path, str(report), target, extra=extra)
    outcome = ncu.run(argv, timeout)
    if ncu.unknown_metric(outcome):  # a name this chip or ncu version lacks: the sections alone still work
        argv = ncu.profile_argv(ncu_path, str(report), target, metrics=False, extra=extra)
        outcome = ncu.run(argv, timeout)
    command = shlex.join(argv)
    log = outcome.output
    if bad := ncu.failure(outcome, report.exists()):
        return failed_record(t, *bad, command), log
    imported = ncu.run(ncu.import_argv(ncu_path, str(report)), timeout)
    log += imported.output if imported.rc else ""
    if imported.rc != 0:
        return failed_record(t, "error", f"ncu --import exited {imported.rc}", command), log
    try:
        found = launches(imported.output)
    except ParseError as exc:
        return failed_record(t, "error", f"reading ncu's raw page: {exc}", command), log
    if not found:
        return failed_record(t, "error", "ncu profiled no launch inside the profiled range", command), log
    return build_record(t, found, ceilings, command), log
