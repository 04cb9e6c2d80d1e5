"""Every loosened tolerance and waived check of a spec, with its reason, for test output and reports."""

from __future__ import annotations

from dataclasses import dataclass

from harness.spec.archs import BENCH_WAIVER
from harness.spec.model import Spec


@dataclass(frozen=True)
class Waiver:
    """A loosened tolerance, waived check or skip, with its reason (test summaries and results files alike)."""

    kernel: str
    what: str
    reason: str


def spec_waivers(spec: Spec) -> list[Waiver]:
    lines = [Waiver(spec.name, f"tolerance {d} {t.describe()}", t.reason)
             for d, t in spec.tolerances.items() if t.loosened]
    lines += [Waiver(spec.name, f"tolerance of {t.name} {t.tolerance.describe()}", t.tolerance.reason)
              for t in spec.tensors if t.tolerance is not None and t.tolerance.loosened]
    lines += [Waiver(spec.name, f"provider {c.removeprefix(BENCH_WAIVER)} not benchmarked" if c.startswith(BENCH_WAIVER)
                     else f"check {c} waived", r) for c, r in spec.waivers.items()]
    if spec.gate is not None:
        lines.append(Waiver(spec.name, f"gate minimum effect {spec.gate.min_effect} floor {spec.gate.floor_us} us",
                            spec.gate.reason))
    return lines
