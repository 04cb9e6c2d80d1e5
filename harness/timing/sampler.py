"""The one sampler: how a single timed sample of a zero-argument callable is taken, on a GPU or a CPU.

The timing engine (:mod:`harness.timing.engine`: stopping rule, warm time, CUPTI) and the merge gate's
interleaved A/B timing (:mod:`harness.gate.interleave`) both take every sample here, so a sample means the
same thing in a benchmark and in a verdict.

A GPU sample: evict L2 by *reading* a buffer twice the device's L2 (a write flush leaves dirty lines the timed
kernel pays to write back), queue a spin kernel so the host's launches hide behind it, then run ``fn``
between CUDA events and subtract the cost of an empty event pair; or, with ``method="host"``, the host clock
around ``fn`` and a synchronize. A sample whose launch outlasted the spin may hold launch gaps: it is dropped
and the spin doubled. The SM clock is read with each sample so the caller can drop throttled ones. A CPU
sample is the host clock around ``fn``, after an optional read of twice the last-level cache.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

from harness.timing.clocks import NullClock, SmClockReader
from harness.timing.environment import llc_bytes

SPIN_MIN_US, SPIN_CAP_US = 20.0, 10_000.0
# Calls per host sample (harness.timing.launch): enough that the host clock's resolution and one call's jitter
# average out (about 1 ms of launches on a GPU, 2 ms on a CPU), but on a GPU never so many that the queued work
# fills CUDA's launch queue (about a thousand entries), where a launch would block on the GPU after all.
HOST_TARGET_US = {"gpu": 1000.0, "cpu": 2000.0}
HOST_CALLS = {"gpu": (4, 64), "cpu": (1, 200)}
GPU_METHODS = {"events": "cuda-events-minus-overhead", "host": "host-perf-counter+sync"}


def warmup(fn, sync, *, min_s: float, cap_s: float) -> tuple[list[float], list[float]]:
    """Call until >= 5 calls, ``min_s`` past the first, and the last 3 within 15% of each other.

    The first call carries JIT compilation and autotuning, however long; ``cap_s`` bounds only the
    wait for stability after it. Returns per-call (totals, host launch times), in seconds.
    """
    totals, launches, first_done = [], [], None
    while True:
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        sync()
        t2 = time.perf_counter()
        totals.append(t2 - t0)
        launches.append(t1 - t0)
        first_done = t2 if first_done is None else first_done
        last = totals[-3:]
        if len(totals) >= 5 and t2 - first_done >= min_s and max(last) <= 1.15 * min(last):
            return totals, launches
        if t2 - first_done >= cap_s or len(totals) >= 100_000:
            return totals, launches


def host_calls(per_call_us: float, kind: str) -> int:
    """Calls per host sample for a call of about ``per_call_us`` on a ``kind`` ("gpu" or "cpu") sampler."""
    lo, hi = HOST_CALLS[kind]
    return int(min(hi, max(lo, round(HOST_TARGET_US[kind] / max(per_call_us, 1e-3)))))


# The resolution CUDA documents for an event pair's elapsed time: two measures of the empty pair's cost agree, and a
# median after it is subtracted is possible, within this (or three MADs of the empty pairs, if more).
EVENT_RESOLUTION_US = 0.5


class OverheadMismeasured(RuntimeError):
    """The timed calls read clearly negative after the empty event pair's cost was subtracted, with that cost
    measured before and after them: the figure would be meaningless, so none is reported."""


def overhead_recheck(kept: list[float], overhead_us: float, empty_us: list[float],
                     remeasure: Callable[[], tuple[float, list[float]]]) -> tuple[float, dict | None]:
    """(the shift to add to every sample, a note for the record or None) for samples taken with ``overhead_us``
    subtracted, the median of the empty pairs ``empty_us``: the empty pair's cost is measured again after the samples
    (``remeasure() -> (median, samples)``). A GPU's empty event pair normally costs about a microsecond (the H200's:
    1.28 us), but on an H100 one measurement read it about 17 us high, and a kernel of about 5.5 us then read -11.7
    us (reports/h100/experiments/read-pattern/); a 100 us kernel would have read about 17 us short, unnoticed. Where
    the two measures disagree by more than their resolution, the smaller stands (interference only adds to an empty
    pair) and the samples are shifted to it; samples still clearly negative raise OverheadMismeasured."""
    again, again_samples = remeasure()
    tol = max(_tolerance(empty_us), _tolerance(again_samples))
    note, shift = None, 0.0
    if abs(again - overhead_us) > tol:
        shift = overhead_us - min(overhead_us, again)
        note = {"event_overhead_first_us": overhead_us, "event_overhead_again_us": again,
                "event_overhead_us": overhead_us - shift,
                "why": "the empty event pair's cost, measured before and after the samples, disagreed; the smaller "
                       "stands"}
    if kept and statistics.median(kept) + shift < -tol:
        raise OverheadMismeasured(
            f"events: the timed calls' median read {statistics.median(kept) + shift:.2f} us after subtracting an "
            f"empty event pair's cost, measured before and after them ({overhead_us:.2f} and {again:.2f} us): "
            "not a time; nothing reported")
    return shift, note


def _tolerance(empty_us: list[float]) -> float:
    if len(empty_us) < 2:
        return EVENT_RESOLUTION_US
    mid = statistics.median(empty_us)
    return max(EVENT_RESOLUTION_US, 3 * statistics.median(abs(e - mid) for e in empty_us))


def event_pair():
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def sleep_cycles_per_us(repeats: int = 3) -> float:
    """Cycles per microsecond of torch.cuda._sleep on the current device: the fastest of ``repeats`` 1M-cycle
    spins, so measure after warm-up, at working clocks."""
    start, end = event_pair()
    best = math.inf
    for _ in range(repeats):
        start.record()
        torch.cuda._sleep(1_000_000)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3)
    return 1_000_000 / best


class GpuSampler:
    """Read flush, spin kernel, event pair and the launch-gap guard of one CUDA device."""

    def __init__(self, dev: torch.device, *, cold: bool = True, method: str = "events"):
        if method not in GPU_METHODS:
            raise ValueError(f"method: expected one of {', '.join(GPU_METHODS)}, got {method!r}")
        self.dev, self.method, self.name = dev, method, GPU_METHODS[method]
        self.l2_bytes = int(torch.cuda.get_device_properties(dev).L2_cache_size)
        self.flush_bytes = 2 * self.l2_bytes if cold else 0
        self.buf = torch.zeros(self.flush_bytes // 4, dtype=torch.float32, device=dev) if cold else None
        self.acc = torch.zeros((), dtype=torch.float32, device=dev)
        self.spin_us, self.cycles_per_us = SPIN_MIN_US, 1000.0
        self.late_discarded, self.late_kept = 0, 0
        self.late_us: list[float] = []  # discarded samples, kept raw for the record
        self.overhead_us = 0.0
        self.empty_us: list[float] = []  # the empty event pairs overhead_us is the median of
        self.overhead_note: dict | None = None
        self.clock = SmClockReader(dev)
        self.start, self.end = event_pair()
        self.host_spin_us, self.host_late_discarded, self.host_late_kept = SPIN_MIN_US, 0, 0

    def sync(self) -> None:
        torch.cuda.synchronize(self.dev)

    def warm(self, fns, *, min_s: float = 0.1, cap_s: float = 2.0) -> list[list[float]]:
        """Warm every callable, then size the spin to hide the slowest launcher and measure the event pair's
        own cost. Returns each callable's warm-up call totals (seconds)."""
        totals, launches = [], []
        for fn in fns:
            t, launch = warmup(fn, self.sync, min_s=min_s, cap_s=cap_s)
            totals.append(t)
            launches.append(max(launch[-3:]))
        self.calibrate_spin(max(launches))
        if self.method == "events":
            self.overhead_us, self.empty_us = self.event_overhead()
        return totals

    def calibrate_spin(self, host_launch_s: float) -> None:
        self.cycles_per_us = sleep_cycles_per_us()
        self.size_spin(host_launch_s)

    def size_spin(self, host_launch_s: float) -> None:
        self.spin_us = min(SPIN_CAP_US, max(SPIN_MIN_US, 2e6 * host_launch_s + 20.0))

    def event_overhead(self, n: int = 30) -> tuple[float, list[float]]:
        """The fixed cost of an event pair around nothing, behind a spin: (median of ``n``, the ``n``), in
        microseconds."""
        empty = []
        for _ in range(n):
            self.spin()
            self.start.record()
            self.end.record()
            self.end.synchronize()
            empty.append(self.start.elapsed_time(self.end) * 1e3)
        return statistics.median(empty), empty

    def recheck_overhead(self, *series: list[float]) -> None:
        """Samples taken (the kept ones first, then any others taken the same way) checked against the empty
        pair's cost measured again (:func:`overhead_recheck`): shifted in place, and the sampler's cost updated,
        where the two measures disagreed."""
        if self.method != "events":
            return
        shift, note = overhead_recheck(series[0], self.overhead_us, self.empty_us, self.event_overhead)
        if note is None:
            return
        for values in (*series, self.late_us):
            values[:] = [v + shift for v in values]
        self.overhead_us, self.overhead_note = note["event_overhead_us"], note

    def flush(self) -> None:
        if self.buf is not None:
            torch.sum(self.buf, dim=0, out=self.acc)  # reads every byte, writes one scalar

    def spin(self) -> None:
        torch.cuda._sleep(int(self.spin_us * self.cycles_per_us))

    def discard_late(self, late: bool) -> bool:
        """``late``: the spin had ended before the host finished launching fn, so launch gaps may be
        in the sample. Drop it and double the spin; at the cap (fn synchronises inside) keep it."""
        if not late:
            return False
        if self.spin_us < SPIN_CAP_US:
            self.spin_us = min(SPIN_CAP_US, 2 * self.spin_us)
            self.late_discarded += 1
            return True
        self.late_kept += 1
        return False

    def sample(self, fn: Callable[[], object], before: Callable[[], object] | None = None
               ) -> tuple[float | None, float | None]:
        """(microseconds, SM clock MHz) of one cold call; None for a sample the launch-gap guard dropped.
        ``before`` runs first, outside the timed region (the outputs poisoned, so a call that writes nothing
        cannot pass the re-check of its timed outputs)."""
        if before is not None:
            before()
        self.flush()
        if self.method == "host":
            self.sync()
            t = time.perf_counter_ns()
            fn()
            self.sync()
            return (time.perf_counter_ns() - t) / 1e3, self.clock.read_mhz()
        self.spin()
        self.start.record()
        fn()
        self.end.record()
        late, clock = self.start.query(), self.clock.read_mhz()
        self.sync()
        value = self.start.elapsed_time(self.end) * 1e3 - self.overhead_us
        if self.discard_late(late):
            self.late_us.append(value)
            return None, clock
        return value, clock

    def host_time(self, fn: Callable[[], object], n: int) -> float:
        """Host microseconds per call of ``n`` back-to-back calls while a spin kernel keeps the GPU busy, so the
        figure is the launcher's own cost (Python, argument handling, the driver's launch), never time spent
        waiting for the GPU. Its own spin (the device samples' stays as sized): a sample in which the spin ended
        before the last call returned is redone with a longer one; at the cap it is kept (``fn`` synchronises,
        a ``.item()`` say, and that wait is the launcher's cost too)."""
        while True:
            self.sync()
            torch.cuda._sleep(int(self.host_spin_us * self.cycles_per_us))
            self.start.record()  # completes when the spin has ended
            t = time.perf_counter_ns()
            for _ in range(n):
                fn()
            per_call = (time.perf_counter_ns() - t) / 1e3 / n
            busy = not self.start.query()
            self.sync()
            if busy:
                return per_call
            if self.host_spin_us >= SPIN_CAP_US:
                self.host_late_kept += 1
                return per_call
            self.host_late_discarded += 1
            self.host_spin_us = min(SPIN_CAP_US, max(2 * self.host_spin_us, 2 * n * per_call + SPIN_MIN_US))

    def wall_time(self, fn: Callable[[], object]) -> float:
        """Synchronous eager wall microseconds of one call: the GPU idle, L2 flushed (when cold) and synchronised
        first, then the call and a synchronize, as a caller that waits for each result sees it (no spin)."""
        self.flush()
        self.sync()
        t = time.perf_counter_ns()
        fn()
        self.sync()
        return (time.perf_counter_ns() - t) / 1e3

    def params(self) -> dict:
        return {"flush": (f"read {self.flush_bytes} bytes (2x L2 of {self.l2_bytes}) with torch.sum before "
                          "each sample" if self.buf is not None else "none (warm L2)"),
                "flush_kind": "read" if self.buf is not None else "none", "flush_bytes": self.flush_bytes,
                "l2_bytes": self.l2_bytes, "spin_us": self.spin_us, "spin_cycles_per_us": self.cycles_per_us,
                "late_discarded": self.late_discarded, "late_discarded_us": self.late_us,
                "late_kept": self.late_kept, **({"event_overhead_us": self.overhead_us}
                                                if self.method == "events" else {}),
                **({"event_overhead_recheck": self.overhead_note} if self.overhead_note else {})}


class HostSampler:
    """The host clock around one call on a CPU, after an optional read of twice the last-level cache."""

    name = "host-perf-counter"

    def __init__(self, *, flush: bool = False):
        self.flush_bytes = 2 * llc_bytes() if flush else 0
        self._flush = torch.ones(self.flush_bytes // 8, dtype=torch.float64).sum if flush else None
        self.clock = NullClock("host timing on a CPU")
        self.late_discarded = 0

    def warm(self, fns, *, min_s: float = 0.0, cap_s: float = 1.0) -> list[list[float]]:
        return [warmup(fn, lambda: None, min_s=min_s, cap_s=cap_s)[0] for fn in fns]

    def sample(self, fn: Callable[[], object], before: Callable[[], object] | None = None
               ) -> tuple[float | None, float | None]:
        if before is not None:
            before()
        if self._flush is not None:
            self._flush()
        start = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - start) / 1e3, None

    def host_time(self, fn: Callable[[], object], n: int) -> float:
        """Microseconds per call of ``n`` back-to-back calls: on a CPU the host time is the call's wall time."""
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        return (time.perf_counter_ns() - start) / 1e3 / n

    def params(self) -> dict:
        if self._flush is None:
            return {"flush": "none"}
        return {"flush": f"read {self.flush_bytes} bytes (2x the last-level cache) before each sample",
                "flush_bytes": self.flush_bytes}


def sampler_for(device: torch.device | str, *, cold: bool = True, method: str = "events",
                cpu_flush: bool = False) -> GpuSampler | HostSampler:
    """The sampler of ``device``: :class:`GpuSampler` on ``cuda[:i]`` (call inside ``torch.cuda.device``),
    :class:`HostSampler` on the CPU."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return GpuSampler(dev, cold=cold, method=method)
    if dev.type != "cpu":
        raise ValueError(f"unsupported device {dev}")
    return HostSampler(flush=cold and cpu_flush)
