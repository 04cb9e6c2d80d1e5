"""Planning a benchmark: which provider of which kernel is timed for which case and dtype, and why not."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.results.model import ArchRow, Waiver
from harness.spec.model import Case, Spec
from harness.spec.waivers import spec_waivers
from harness.target.device import Device
from harness.target.providers import Provider, providers_for
from harness.target.resolve import BackendStatus, resolve


@dataclass(frozen=True)
class Job:
    spec: Spec
    case: Case
    dtype: str
    provider: Provider

    @property
    def label(self) -> str:
        return f"{self.spec.name} {self.dtype} {self.case.id} {self.provider.name}"


def plan(specs: list[Spec], device: Device, dtypes=(), providers=()) -> tuple[list[Job], list[ArchRow], list[Waiver]]:
    jobs, arch_rows, waivers = [], [], []
    for spec in specs:
        statuses = resolve(spec, device)
        arch_rows += arch_matrix_rows(statuses)
        waivers += spec_waivers(spec)
        provs = [p for p in providers_for(spec, device, statuses) if not providers or p.name in providers]
        for p in provs:
            if not p.runnable:
                waivers.append(Waiver(spec.name, f"provider {p.name} not benchmarked", p.reason))
        for case in spec.cases["bench"]:
            for dtype in spec.dtypes:
                if dtypes and dtype not in dtypes:
                    continue
                jobs += [Job(spec, case, dtype, p) for p in provs]
    return jobs, arch_rows, waivers


def arch_matrix_rows(statuses: list[BackendStatus]) -> list[ArchRow]:
    ran = next((s.backend for s in statuses if s.selected), None)
    rows = []
    for s in statuses:
        if s.selected:
            rows.append(ArchRow(s.kernel, s.arch, s.backend, "ran", ""))
        elif not s.runnable:
            rows.append(ArchRow(s.kernel, s.arch, s.backend, "unavailable",
                                f"{s.reason}; fell back to {ran}" if ran else s.reason))
        else:
            rows.append(ArchRow(s.kernel, s.arch, s.backend, "skipped", f"available, but {ran} comes first"))
    return rows


def default_out_dir(device: Device) -> Path:
    slug = "".join(ch if ch.isalnum() else "-" for ch in device.name.lower()).strip("-")
    slug = slug.replace("nvidia-", "") or device.arch
    return Path("reports") / ("cpu" if device.arch == "cpu" else slug)
