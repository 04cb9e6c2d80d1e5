"""Every loosened tolerance and waived check of a spec, with its reason, for test output and reports."""

from __future__ import annotations

from dataclasses import dataclass

from harness.spec.model import Spec


@dataclass(frozen=True)
class Waiver:
    """A loosened tolerance, waived check or skip, with its reason (test summaries and results files alike)."""

    kernel: str
    what: str
    reason: str


def spec_waivers(spec: Spec) -> list[Waiver]:
    lines = [Waiver(spec.name, f"tolerance {d} rtol={t.rtol:g} atol={t.atol:g}", t.reason)
             for d, t in spec.tolerances.items() if t.loosened]
    lines += [Waiver(spec.name, f"check {c} waived", r) for c, r in spec.waivers.items()]
    return lines
