"""Timing engine: device-side samples of a zero-argument callable, cold L2, nvbench-style stopping.

Every sample comes from :mod:`harness.timing.sampler`, which the merge gate's interleaved timing uses too.
One GPU sample: evict L2 by *reading* a buffer twice the device's L2 (a write flush leaves dirty
lines that the timed kernel pays to write back), queue a spin kernel so the host's launches hide
behind it, then run ``fn``. The default method (``"auto"``, which means ``"events"``) brackets ``fn``
with CUDA events and subtracts the cost of an empty event pair. ``method="cupti"`` reads kernel
timestamps from CUPTI (torch.profiler) instead: a sample is the end of the last minus the start of the
first GPU activity ``fn`` launched. ``"graph"`` captures ``fn`` once in a CUDA graph and times its replay
the same way (flush and spin outside the graph, events around the replay): the launch path vLLM's decode
runs. ``"host"`` times ``fn`` plus a synchronize with the host clock. On a CPU the same loop runs with
``time.perf_counter_ns``. Beside the device samples every measurement carries the launch overhead
(harness/timing/launch.py): host time per call with the GPU kept busy, and the synchronous wall time per call.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch

from harness.timing.clocks import PROLOGUE_TAG, SAMPLE_TAG, is_throttled, sample_spans
from harness.timing.launch import LaunchTimes, measure_launch
from harness.timing.sampler import GpuSampler, HostSampler, event_pair
from harness.timing.stats import NOISE_WINDOW, StoppingRule

__all__ = ["Measurement", "StoppingRule", "TimingConfig", "measure", "sample_spans"]

METHODS = ("auto", "cupti", "events", "graph", "host")
GRAPH_METHOD = "cuda-graph-replay-events-minus-overhead"
_WARM_TARGET_US, _WARM_MAX_CALLS, _WARM_REPS = 2000.0, 200, 10


@dataclass(frozen=True)
class TimingConfig:
    min_samples: int = 10
    max_rsd: float = 0.005          # stop at relative std <= 0.5% ...
    min_time_s: float = 0.5         # ... once this much device time is accumulated
    timeout_s: float = 15.0         # wall-clock limit on a case's sampling (warm-up bounds its own; a first call
                                    # that compiles or autotunes never eats the samples' time)
    max_samples: int = 2000
    cold: bool = True               # flush L2 before each sample
    method: str = "auto"            # auto | cupti | events | graph | host
    launch: bool = True             # also measure host time and synchronous wall time per call
    throttle_fraction: float = 0.75
    cpu_flush: bool = False         # CPU only: also read 2x the last-level cache before each sample

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {self.method!r}")
        if not 1 <= self.min_samples <= self.max_samples:
            raise ValueError(f"need 1 <= min_samples <= max_samples, got {self.min_samples} and "
                             f"{self.max_samples}")


@dataclass(frozen=True)
class Measurement:
    samples_us: tuple[float, ...]    # every kept cold sample (raw, microseconds)
    dropped_us: tuple[float, ...]    # samples dropped as throttled
    warm_us: tuple[float, ...]       # hot per-call times (graph replay / back-to-back), no flush
    method: str                      # cupti-kernel-span | cuda-events-minus-overhead | host-perf-counter...
    method_params: dict
    stop_reason: str                 # "rsd" | "noise-stable" | "timeout" | "max-samples"
    sm_clock_mhz: tuple[float, ...]  # per kept sample, empty when not available
    device_time_s: float
    wall_time_s: float
    launch: LaunchTimes | None = None  # host and synchronous wall time per call; None when not measured


class TimedOutputs(Protocol):
    """What the caller checks of the timed calls themselves: ``before()`` runs before every cold sample, outside
    the timed region (it poisons the outputs); ``verify()`` after the 1st, 2nd, 4th, 8th, ... kept sample
    compares the outputs of the call just timed with the reference and raises when they differ."""

    def before(self) -> None: ...

    def verify(self) -> None: ...


def _verify_due(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0  # 1, 2, 4, 8, ...: a sample of the timed calls, log-many


def measure(fn: Callable[[], object], *, device: torch.device | str,
            config: TimingConfig = TimingConfig(), outputs: TimedOutputs | None = None) -> Measurement:
    """Time ``fn`` (a zero-argument callable that launches the work) on ``device``; with ``outputs``, a sample
    of the timed calls' outputs is checked again (a wrong one raises out of here)."""
    t0 = time.perf_counter()
    dev = torch.device(device)
    if dev.type == "cpu":
        if config.method not in ("auto", "host"):  # events, CUPTI and graphs are CUDA's
            raise ValueError(f"method {config.method!r} needs a CUDA device; on a CPU use 'auto' or 'host'")
        return _measure_cpu(fn, config, t0, outputs)
    if dev.type != "cuda":
        raise ValueError(f"unsupported device {dev}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"{dev} requested but CUDA is not available")
    dev = torch.device("cuda", torch.cuda.current_device() if dev.index is None else dev.index)
    with torch.cuda.device(dev):
        return _measure_cuda(fn, dev, config, t0, outputs)


# ----------------------------------------------------------------------------- shared

def _sample_loop(batch, cfg: TimingConfig, reader, t0: float, chunk: int, params: dict, outputs=None):
    """Run ``batch(count, deadline) -> [(value_us | None, clock_mhz | None)]`` until the rule stops; ``t0`` is
    when sampling began, after the warm-up: counted from the call's start, a first call that compiled and
    autotuned for longer than ``timeout_s`` left the case one sample (on an H100 several such single samples
    read 3-20x the same kernel's timing in a later case: reports/h100/README.md).

    A None value was discarded by the method itself (launch gap, no GPU activity found); a sample
    whose clock reading is below throttle_fraction x max goes to ``dropped`` and never feeds the rule.
    """
    rule = StoppingRule(cfg)
    kept, dropped, clocks, dropped_clocks = [], [], [], []
    reason, attempts = None, 0
    while reason is None:
        for value, clock in batch(max(1, min(chunk, cfg.max_samples - rule.n)), t0 + cfg.timeout_s):
            attempts += 1
            if value is None:
                continue
            if is_throttled(clock, reader.max_mhz, cfg.throttle_fraction):
                dropped.append(value)
                dropped_clocks.append(clock)
                continue
            kept.append(value)
            if reader.available:  # aligned with kept; NaN where one reading failed
                clocks.append(math.nan if clock is None else clock)
            rule.add(value)
            if outputs is not None and _verify_due(rule.n):
                outputs.verify()  # the outputs of the last call timed (a batch's last, with CUPTI)
            reason = reason or rule.verdict(0.0)  # convergence per sample; the wall clock per batch
        reason = reason or rule.verdict(time.perf_counter() - t0)
        if reason is None and attempts >= 4 * cfg.max_samples:  # nearly every sample was dropped
            reason = "max-samples"
    params.update(samples_attempted=attempts, dropped_throttled=len(dropped),
                  dropped_clock_mhz=dropped_clocks, rsd=rule.rsd if math.isfinite(rule.rsd) else None,
                  noise_estimates=rule.noise[-NOISE_WINDOW:],
                  sm_clock="nvml" if reader.available else f"unavailable: {reader.reason}",
                  sm_clock_max_mhz=reader.max_mhz, throttle_fraction=cfg.throttle_fraction)
    return kept, dropped, clocks, reason


def _finish(kept, dropped, clocks, reason, warm, method, params, t0, launch=None) -> Measurement:
    return Measurement(samples_us=tuple(kept), dropped_us=tuple(dropped), warm_us=tuple(warm), method=method,
                       method_params=params, stop_reason=reason, sm_clock_mhz=tuple(clocks),
                       device_time_s=sum(kept) * 1e-6, wall_time_s=time.perf_counter() - t0, launch=launch)


# ----------------------------------------------------------------------------- CPU

def _measure_cpu(fn, cfg: TimingConfig, t0: float, outputs=None) -> Measurement:
    sampler = HostSampler(flush=cfg.cold and cfg.cpu_flush)
    params: dict = sampler.params()
    (totals,) = sampler.warm([fn], min_s=0.0, cap_s=min(1.0, cfg.timeout_s / 4))
    params.update(warmup_calls=len(totals), warmup_s=sum(totals))

    def batch(count, deadline):
        out = []
        for _ in range(count):
            out.append(sampler.sample(fn, before))
            if time.perf_counter() >= deadline:
                break
        return out

    before = outputs.before if outputs is not None else None
    kept, dropped, clocks, reason = _sample_loop(batch, cfg, sampler.clock, time.perf_counter(), 1, params, outputs)
    k = _warm_calls(statistics.median(kept) if kept else 1.0, target_us=5000.0, cap=1000)
    warm, started = [], time.perf_counter()
    while len(warm) < 5 and (not warm or time.perf_counter() - started < 1.0):
        start = time.perf_counter_ns()
        for _ in range(k):
            fn()
        warm.append((time.perf_counter_ns() - start) / 1e3 / k)
    params.update(warm_method="back-to-back host calls", warm_k=k, warm_reps=len(warm))
    launch = measure_launch(fn, sampler) if cfg.launch else None
    return _finish(kept, dropped, clocks, reason, warm, sampler.name, params, t0, launch)


def _warm_calls(median_us: float, *, target_us: float, cap: int) -> int:
    return int(min(cap, max(1, round(target_us / max(median_us, 1e-3)))))


# ----------------------------------------------------------------------------- CUDA

def _measure_cuda(fn, dev, cfg: TimingConfig, t0: float, outputs=None) -> Measurement:
    method = cfg.method
    if method == "auto":
        # Measured on the H200 against Nsight Compute's gpu__time_duration (bench/gpu_timing_check.py):
        # events behind a spin, overhead subtracted, came within 0.5% at [16384, 4096] and 0.08 us at
        # [64, 4096]; CUPTI's kernel span reads 1 us short on the small case (it excludes the launch
        # front-end that ncu counts). So auto means events; cupti stays available by name.
        method = "events"
    cu = GpuSampler(dev, cold=cfg.cold, method="host" if method == "host" else "events")
    before = outputs.before if outputs is not None else None
    params: dict = {}
    (totals,) = cu.warm([fn], min_s=0.1, cap_s=min(5.0, cfg.timeout_s / 3))
    params.update(warmup_calls=len(totals), warmup_s=sum(totals))
    if method == "cupti":  # asked for by name: an unusable CUPTI is an error, never a silent switch
        try:
            batch, chunk, name = _cupti_batch(fn, cu, params, statistics.median(totals[-3:]), before)
        except _CuptiUnusable as exc:
            raise RuntimeError(f"cupti timing unusable: {exc}") from exc
    elif method == "graph":  # asked for by name too: a call that cannot be captured is an error
        replay, kind, note = _graph_launcher(fn, 1, cu)
        if kind != "cuda-graph-replay":
            raise RuntimeError(f"graph timing unusable: {note}")
        batch, chunk, name = _plain_batch(replay, cu, before), 1, GRAPH_METHOD
        params.update(graph="fn captured once; each sample: flush and spin outside the graph, events around "
                            "one replay, minus the empty pair's cost")
    else:
        batch, chunk, name = _plain_batch(fn, cu, before), 1, cu.name
    kept, dropped, clocks, reason = _sample_loop(batch, cfg, cu.clock, time.perf_counter(), chunk, params,
                                                 outputs)  # fmt: skip
    if method != "cupti":  # events (a graph's replays too) minus the empty pair's cost: is that cost believable?
        cu.recheck_overhead(kept, dropped)
    warm = _warm_cuda(fn, cu, statistics.median(kept) if kept else 1.0, params)
    params.update(cu.params())
    launch = measure_launch(fn, cu) if cfg.launch else None  # the eager call: what a caller without graphs pays
    return _finish(kept, dropped, clocks, reason, warm, name, params, t0, launch)


def _plain_batch(fn, cu: GpuSampler, before=None):
    """One sample at a time from the sampler: CUDA events behind a spin, or host time around a synchronize."""
    def batch(count, deadline):
        out = []
        for _ in range(count):
            out.append(cu.sample(fn, before))
            if time.perf_counter() >= deadline:
                break
        return out
    return batch


class _CuptiUnusable(RuntimeError):
    pass


def _cupti_batch(fn, cu: GpuSampler, params: dict, call_s: float, before=None):
    """Many samples per profiler session (a session has a fixed cost of tens of milliseconds)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    marker = torch.cuda.Event()
    routes: Counter = Counter()
    per_sample: Counter = Counter()

    def batch(count, deadline):
        dropped, clocks = [], []
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for j in range(count):
                with record_function(f"{PROLOGUE_TAG}{j}"):
                    if before is not None:
                        before()
                    cu.flush()
                    cu.spin()
                marker.record()
                with record_function(f"{SAMPLE_TAG}{j}"):
                    fn()
                late = marker.query()
                clocks.append(cu.clock.read_mhz())
                cu.sync()
                dropped.append(cu.discard_late(late))
                if time.perf_counter() >= deadline:
                    break
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                spans, info = sample_spans(json.load(f), len(clocks), cu.dev.index)
        routes.update(info["routes"])
        per_sample.update(info["events_per_sample"])
        params.update(profiler_sessions=params.get("profiler_sessions", 0) + 1, attribution=dict(routes),
                      gpu_events_per_sample=dict(per_sample),
                      gpu_annotation_max_diff_us=max(params.get("gpu_annotation_max_diff_us", 0.0),
                                                     info["gpu_annotation_max_diff_us"]))
        cu.late_us.extend(s for s, d in zip(spans, dropped, strict=True) if d and s is not None)
        return [(None if d else s, c) for s, d, c in zip(spans, dropped, clocks, strict=True)]

    try:
        batch(4, math.inf)  # discarded: the first session's set-up, and spin sizing under the profiler
    except Exception as exc:
        raise _CuptiUnusable(f"{type(exc).__name__}: {exc}") from exc
    if per_sample.get(0, 0) == sum(per_sample.values()):
        raise _CuptiUnusable(f"no GPU activity attributed to fn in the trace (attribution {dict(routes)})")
    routes.clear()
    per_sample.clear()
    chunk = int(min(128, max(16, 0.3 / (call_s + cu.spin_us * 1e-6 + 1e-4))))
    return batch, chunk, "cupti-kernel-span"


# ----------------------------------------------------------------------------- warm (hot) time

def _graph_launcher(fn, k: int, cu: GpuSampler):
    """Replay of a CUDA graph of k calls; k plain calls when capture fails (fn synchronises, say)."""
    try:
        side, main = torch.cuda.Stream(cu.dev), torch.cuda.current_stream(cu.dev)
        side.wait_stream(main)
        with torch.cuda.stream(side):
            fn()  # warm the capture stream's allocator pool first
        main.wait_stream(side)
        cu.sync()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(k):
                fn()
        graph.replay()
        cu.sync()
        return graph.replay, "cuda-graph-replay", ""
    except Exception as exc:
        try:
            cu.sync()
        except Exception:
            pass

        def launch():
            for _ in range(k):
                fn()
        return launch, "back-to-back-events", f"graph capture failed: {type(exc).__name__}: {exc}"[:300]


def _warm_cuda(fn, cu: GpuSampler, cold_median_us: float, params: dict) -> list[float]:
    """Hot time per call: k back-to-back calls (about 2 ms of work) behind a spin, events / k."""
    k = _warm_calls(cold_median_us, target_us=_WARM_TARGET_US, cap=_WARM_MAX_CALLS)
    launch, kind, note = _graph_launcher(fn, k, cu)
    t = time.perf_counter()
    launch()
    host_s = time.perf_counter() - t
    cu.sync()
    saved = cu.spin_us, cu.late_discarded, cu.late_kept
    cu.size_spin(host_s)
    start, end = event_pair()
    out, tries, deadline = [], 0, time.perf_counter() + 2.0
    while len(out) < _WARM_REPS and tries < 4 * _WARM_REPS:
        if len(out) >= 3 and time.perf_counter() > deadline:  # at least 3 repetitions, then 2 s at most
            break
        tries += 1
        cu.spin()
        start.record()
        launch()
        end.record()
        late = start.query()
        cu.sync()
        if not cu.discard_late(late):
            out.append(start.elapsed_time(end) * 1e3 / k)
    params.update(warm_method=kind, warm_k=k, warm_reps=len(out), warm_spin_us=cu.spin_us,
                  warm_includes_event_pair=True, **({"warm_note": note} if note else {}))
    cu.spin_us, cu.late_discarded, cu.late_kept = saved
    return out
