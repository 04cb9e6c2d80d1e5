"""The candidate's speedup over every other provider of the same case, with a bootstrap interval."""

from __future__ import annotations

import dataclasses
import math

from harness.results.model import CaseResult


def attach_speedups(cases: list[CaseResult], seed: int = 0) -> list[CaseResult]:
    """The candidate's speedup against every other ok provider of the same kernel, case, dtype and mode."""
    from harness.timing.stats import speedup

    groups: dict[tuple, list[CaseResult]] = {}
    for c in cases:
        groups.setdefault((c.kernel, c.case_id, c.dtype, c.mode), []).append(c)
    out = []
    for c in cases:
        if c.role != "candidate" or c.status != "ok":
            out.append(c)
            continue
        ratios = {}
        for other in groups[(c.kernel, c.case_id, c.dtype, c.mode)]:
            if other is not c and other.status == "ok":
                r = speedup(other.samples_us, c.samples_us, seed=seed)
                if all(math.isfinite(v) for v in (r.ratio, r.lo, r.hi)):
                    ratios[other.provider] = {"ratio": r.ratio, "lo": r.lo, "hi": r.hi}
        out.append(dataclasses.replace(c, speedups=ratios))
    return out
