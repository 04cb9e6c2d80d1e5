"""Launch overhead, beside device time: the host time per call and the synchronous eager wall time per call.

Device samples queue their launches behind a spin kernel, so the host's cost of a call never lands in them:
right for the kernel, blind to a launcher that adds 50 us of Python or a ``.item()``. This module measures that
cost with the one sampler (harness/timing/sampler.py), which the gate's interleaved host timing uses too:

- **host time per call**: ``n`` back-to-back calls on the host clock while a spin keeps the GPU busy (no launch
  waits for the GPU), divided by ``n``; one figure per repeat, the record keeps them all.
- **synchronous wall time per call**: the L2 flushed, one call, then a synchronize; what an eager caller who
  waits for each result sees. One figure per repeat.

On a CPU a call is synchronous: its host time is its wall time, and a separate synchronous wall figure would be
the same measurement again, so it is recorded as not applicable, with the reason, never as a number.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.timing.sampler import host_calls

HOST_REPS, WALL_REPS = 15, 15   # repeats of each figure: enough for a median and a spread ...
MIN_REPS, CAP_S = 3, 1.0        # ... at least 3, and each figure stops after about a second
CPU_WALL_NA = "n/a on a CPU: a call is synchronous, so its wall time is the host time per call"


@dataclass(frozen=True)
class LaunchTimes:
    host_us: tuple[float, ...]       # host microseconds per call, one per repeat
    wall_us: tuple[float, ...]       # synchronous eager wall microseconds per call, one per repeat; () when n/a
    params: dict = field(default_factory=dict)   # how each was taken, and why one is n/a

    @property
    def host_median_us(self) -> float | None:
        return statistics.median(self.host_us) if self.host_us else None

    @property
    def wall_median_us(self) -> float | None:
        return statistics.median(self.wall_us) if self.wall_us else None


def _repeat(take: Callable[[], float], reps: int) -> list[float]:
    out, start = [], time.perf_counter()
    while len(out) < reps and (len(out) < MIN_REPS or time.perf_counter() - start < CAP_S):
        out.append(take())
    return out


def estimate_us(fn: Callable[[], object], sync: Callable[[], object]) -> float:
    """One call's host time (launch only, the GPU idle), to size ``n``: a warm callable, so no compile."""
    sync()
    t = time.perf_counter_ns()
    fn()
    us = (time.perf_counter_ns() - t) / 1e3
    sync()
    return us


def measure_launch(fn: Callable[[], object], sampler, *, reps: int = HOST_REPS,
                   wall_reps: int = WALL_REPS) -> LaunchTimes:
    """Both figures of a warmed-up ``fn`` with ``sampler`` (a GpuSampler inside its device, or a HostSampler)."""
    gpu = hasattr(sampler, "wall_time")
    sync = sampler.sync if gpu else (lambda: None)
    n = host_calls(estimate_us(fn, sync), "gpu" if gpu else "cpu")
    if gpu:
        saved = sampler.host_late_discarded, sampler.host_late_kept
    host = _repeat(lambda: sampler.host_time(fn, n), reps)
    params = {"host_method": (f"{n} back-to-back calls on the host clock behind a spin kernel (GPU kept busy) / "
                              f"{n}" if gpu else f"{n} back-to-back calls on the host clock / {n}"),
              "host_calls": n, "host_reps": len(host)}
    if not gpu:
        return LaunchTimes(tuple(host), (), {**params, "wall_method": CPU_WALL_NA})
    params.update(host_spin_us=sampler.host_spin_us,
                  host_late_discarded=sampler.host_late_discarded - saved[0],
                  host_late_kept=sampler.host_late_kept - saved[1])
    wall = _repeat(lambda: sampler.wall_time(fn), wall_reps)
    flush = "L2 read-flushed, " if sampler.buf is not None else ""
    params.update(wall_method=f"{flush}synchronize, one call, synchronize (no spin), host clock",
                  wall_reps=len(wall))
    return LaunchTimes(tuple(host), tuple(wall), params)
