"""Planning a benchmark: which provider of which kernel is timed for which case and dtype, and why not."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.results.model import ArchRow, Waiver
from harness.spec.model import Case, Spec
from harness.spec.waivers import bench_waiver, spec_waivers
from harness.target.device import Device
from harness.target.providers import Provider, providers_for
from harness.target.resolve import BackendStatus, resolve


@dataclass(frozen=True)
class Job:
    spec: Spec
    case: Case
    dtype: str
    provider: Provider
    mode: str = "fwd"  # harness.bench.modes.MODES: the pass timed

    @property
    def label(self) -> str:
        mode = "" if self.mode == "fwd" else f" {self.mode}"
        return f"{self.spec.name} {self.dtype} {self.case.id}{mode} {self.provider.name}"


def plan(specs: list[Spec], device: Device, dtypes=(), providers=(), tier: str = "bench",
         skip: dict[str, str] | None = None, modes: tuple[str, ...] = (),
         targets: bool = False) -> tuple[list[Job], list[ArchRow], list[Waiver]]:
    """Every (provider, case, dtype, mode) to time at ``tier``'s cases; ``skip``: providers left out of this run
    by policy, name -> reason (listed with the waivers); ``modes``: those asked for (harness.bench.modes; () every
    mode a spec supports). A provider without the mode's pass is left out of it, listed with its reason.
    ``targets``: only the jobs the specs' [[targets]] compare (:func:`targeted`)."""
    from harness.bench.modes import no_backward, spec_modes, unsupported_reason

    jobs, arch_rows, waivers = [], [], []
    skip = {k: v for k, v in (skip or {}).items() if k not in providers}  # asked for by name: timed
    for spec in specs:
        statuses = resolve(spec, device)
        arch_rows += arch_matrix_rows(statuses)
        waivers += spec_waivers(spec)
        provs = [p for p in providers_for(spec, device, statuses) if (not providers or p.name in providers)
                 and bench_waiver(spec.waivers, p.name) is None]  # spec_waivers lists it, with the reason
        for p in provs:
            if not p.runnable:
                waivers.append(Waiver(spec.name, f"provider {p.name} not benchmarked", p.reason))
            elif p.name in skip:
                waivers.append(Waiver(spec.name, f"provider {p.name} not benchmarked", skip[p.name]))
        provs = [p for p in provs if not (p.runnable and p.name in skip)]
        spec_mode = spec_modes(spec, tuple(modes))
        waivers += [Waiver(spec.name, f"mode {m} not benchmarked", unsupported_reason(spec, m))
                    for m in modes if m not in spec_mode]
        by_mode = {}
        for m in spec_mode:
            by_mode[m] = [p for p in provs if not no_backward(spec, p, m)]
            waivers += [Waiver(spec.name, f"provider {p.name} not benchmarked in mode {m}", no_backward(spec, p, m))
                        for p in provs if no_backward(spec, p, m)]
        candidate = next((p.name for p in provs if p.role == "candidate"), None)
        # modes inside a case and dtype: a case's providers of one mode run back to back, sharing one reference
        for case in spec.cases[tier]:
            for dtype in spec.dtypes:
                if dtypes and dtype not in dtypes:
                    continue
                mine = [Job(spec, case, dtype, p, m) for m in spec_mode for p in by_mode[m]]
                jobs += [j for j in mine if targeted(j, candidate)] if targets else mine
    return jobs, arch_rows, waivers


def targeted(job: Job, candidate: str | None) -> bool:
    """Whether one of the spec's [[targets]] compares this job: its case, dtype and mode, and either side of it
    (the target's provider, else the run's ``candidate``, or the one it is held against)."""
    from harness.spec.targets import names

    return any(names(t, job.case.values, job.dtype, job.mode) and job.provider.name in (t.provider or candidate,
                                                                                        t.against)
               for t in job.spec.targets)


def arch_matrix_rows(statuses: list[BackendStatus]) -> list[ArchRow]:
    """One row per backend, in resolution order (the spec's fallback order first).

    The selected backend "ran" when it is the first of the fallback order, else it is a "fallback" whose
    reason names each backend it fell back past and why that one could not run.
    """
    ran = next((s.backend for s in statuses if s.selected), None)
    rows = []
    for i, s in enumerate(statuses):
        if s.selected and i == 0:
            rows.append(ArchRow(s.kernel, s.arch, s.backend, "ran", ""))
        elif s.selected:
            past = "; ".join(f"{p.backend}: {p.reason}" for p in statuses[:i])
            rows.append(ArchRow(s.kernel, s.arch, s.backend, "fallback", past))
        elif not s.runnable:
            rows.append(ArchRow(s.kernel, s.arch, s.backend, "unavailable",
                                f"{s.reason}; fell back to {ran}" if ran else s.reason))
        else:
            rows.append(ArchRow(s.kernel, s.arch, s.backend, "skipped", f"available, but {ran} comes first"))
    return rows


def default_out_dir(device: Device) -> Path:
    """``<reports>/<device>/``, ``[tool.kernel-harness] reports`` (default ``build/reports``, relative to the
    project's root, shown relative to where the command runs): a scratch folder that .gitignore ignores, so a
    plain ``bench`` leaves ``git status`` clean. A report meant to be committed (reports/h200/) is written there
    on purpose with ``--out``."""
    from harness.config import load_config, shown

    slug = "".join(ch if ch.isalnum() else "-" for ch in device.name.lower()).strip("-")
    slug = slug.replace("nvidia-", "") or device.arch
    return Path(shown(load_config().reports)) / ("cpu" if device.arch == "cpu" else slug)
