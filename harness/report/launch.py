"""Launch overhead in report.md: the host-time and synchronous-wall cells, and where launch overhead dominates.

The rule (docs/timing.md): a case is **launch-bound** when its synchronous wall time per call is at least
``LAUNCH_BOUND_RATIO`` times its device median, that is, when less than half of what an eager caller waits for
is the kernel. Both figures are medians of the same record; only GPU records have a wall time (on a CPU the
host time is the call itself, so nothing is launch-bound there and the line says so).
"""

from __future__ import annotations

from harness.report.cells import DASH, cell, code, num
from harness.report.plots import shape_label

LAUNCH_BOUND_RATIO = 2.0


def host_cell(c) -> str:
    return num(c.host_median_us) if c.host_median_us is not None else DASH


def wall_cell(c) -> str:
    if c.wall_median_us is not None:
        return num(c.wall_median_us)
    return "n/a" if c.host_median_us is not None else DASH  # measured host time, no wall: a CPU record


def launch_bound(c) -> bool:
    median = (c.stats or {}).get("median")
    return bool(c.wall_median_us is not None and median and c.wall_median_us >= LAUNCH_BOUND_RATIO * median)


def launch_line(cases) -> str:
    """One line for a kernel's section: at which shapes, for which providers, launch overhead dominates."""
    ok = [c for c in cases if c.status == "ok"]
    if not any(c.host_median_us is not None for c in ok):
        return ""
    if not any(c.wall_median_us is not None for c in ok):
        return ("Launch overhead: host time per call measured; no synchronous wall time on a CPU (a call is "
                "synchronous there), so no shape is judged launch-bound.")
    bound = [c for c in ok if launch_bound(c)]
    rule = f"synchronous wall ≥ {LAUNCH_BOUND_RATIO:g}x the device median"
    if not bound:
        return f"Launch overhead dominates at no shape ({rule})."
    by_shape: dict[str, list[str]] = {}
    for c in bound:
        ratio = c.wall_median_us / c.stats["median"]
        by_shape.setdefault(f"{shape_label(c.shape)} · {c.dtype} · {c.mode}", []).append(
            f"{code(c.provider)} {ratio:.1f}x")
    parts = [f"{cell(shape)} ({', '.join(who)})" for shape, who in by_shape.items()]
    return f"Launch overhead dominates ({rule}) at: " + "; ".join(parts) + "."


def how_measured(ok) -> str:
    """The sentence of "How this was measured" about the launch figures."""
    host = [c for c in ok if c.host_median_us is not None]
    if not host:
        return ""
    walls = sum(c.wall_median_us is not None for c in host)
    text = (f"Host µs per call ({len(host)} cases): back-to-back calls on the host clock while a spin kernel keeps "
            "the GPU busy, divided by the number of calls (on a CPU: the call's own wall time).")
    if walls:
        text += (f" Sync wall µs ({walls} cases): L2 flushed, one call, then a synchronize, as an eager caller sees "
                 "it.")
    return text
