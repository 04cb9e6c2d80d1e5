"""Timing two callables on one device in alternating blocks: base, PR, PR, base, base, PR, ...

Back-to-back separate runs of the same code drift by more than the effects a gate must see (on an H200,
up to 12 % at [64, 4096]); inside one process, blocks that alternate in ABBA order keep each pair of
blocks moments apart, so drift cancels in the pair's ratio. Each sample is taken by the timing engine's own
sampler (harness/timing/sampler.py): L2 evicted by a read flush, launches queued behind a spin kernel so
host overhead never lands in a sample, CUDA events around the call minus the cost of an empty event pair;
samples below the throttle clock are dropped. On a CPU the host clock times each call. Both sides' samples have
the same empty pair's cost subtracted, so a cost mismeasured (on an H100 one measure read it about 17 us above
its cost: a kernel of about 5.5 us read -11.7) shortens both by the same microseconds and moves their ratio: 30 us
against 33 us, each 17 us short, reads 1.23, not 1.10, and a 10 % regression at a 20 us kernel 1.67. That cost is
measured again before every verdict (:meth:`_Timer.recheck`).

Host time per call is interleaved the same way, after the device blocks (:func:`measure_host_ab`): a host
sample is the sampler's ``host_time``, tens of back-to-back calls on the host clock while a spin keeps the
GPU busy, divided by their number, so a launcher that adds Python or a ``.item()`` is seen even where the
device time is the same. The same ABBA schedule, with its own block counts and budget.

Sampling goes on, a few block pairs at a time, while the verdict is INCONCLUSIVE and the case's budget
allows; the caller's ``judge`` gives the verdict (harness/gate/verdict.py), so this module holds no rule.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness.gate.verdict import MIN_BLOCKS, Decision


@dataclass(frozen=True)
class BlockConfig:
    blocks: int = 10            # block pairs before the first verdict
    samples: int = 12           # samples per block and side
    more_blocks: int = 6        # block pairs added per round while INCONCLUSIVE (even: keeps ABBA balanced)
    max_blocks: int = 64
    budget_s: float = 10.0      # sampling wall time per case (a pair in progress finishes)
    cold: bool = True           # evict L2 before every sample
    method: str = "events"      # "events" or "host" (host clock around the call and a synchronize)
    throttle_fraction: float = 0.75
    host_blocks: int = 8        # host time per call: block pairs before the first verdict (0: not judged)
    host_samples: int = 3       # host samples per block and side, each the mean of tens of calls
    host_budget_s: float = 3.0  # host sampling wall time per case

    def __post_init__(self):
        if self.blocks < MIN_BLOCKS or self.samples < 1 or self.more_blocks < 1:
            raise ValueError(f"need blocks >= {MIN_BLOCKS}, samples >= 1 and more_blocks >= 1")
        if self.host_blocks and (self.host_blocks < MIN_BLOCKS or self.host_samples < 1):
            raise ValueError(f"need host_blocks = 0 or >= {MIN_BLOCKS}, and host_samples >= 1")
        if self.method not in ("events", "host"):
            raise ValueError(f"method: expected events or host, got {self.method!r}")


@dataclass(frozen=True)
class ABRun:
    base_blocks: tuple[tuple[float, ...], ...]   # microseconds, block i of each side timed together
    pr_blocks: tuple[tuple[float, ...], ...]
    decision: Decision
    stop: str                   # decided | budget | max-blocks
    dropped: int                # samples dropped as throttled, both sides
    late_discarded: int         # samples redone because the host fell behind the spin
    method: str
    wall_s: float
    event_overhead_recheck: dict | None = None  # the sampler's note where the empty pair's cost was remeasured


class _Timer:
    """Blocks of samples of one callable from the timing engine's own sampler (harness.timing.sampler), with
    throttled samples dropped as the engine drops them."""

    def __init__(self, sampler, cfg: BlockConfig, fns):
        from harness.timing.clocks import is_throttled

        self.sampler, self.cfg, self.is_throttled = sampler, cfg, is_throttled
        sampler.warm(fns)  # both sides warm before either is timed; the spin must hide the slower launcher
        self.method, self.dropped = sampler.name, 0

    @property
    def late(self) -> int:
        return self.sampler.late_discarded

    def block(self, fn, n: int, outputs=None) -> list[float]:
        """``n`` samples of ``fn``; with ``outputs`` (harness.timing.engine.TimedOutputs) poisoned before each
        and the block's last call checked against the reference."""
        out, attempts = [], 0
        before = outputs.before if outputs is not None else None
        while len(out) < n and attempts < 4 * n:  # a block of throttled samples stays short, not endless
            attempts += 1
            value, clock = self.sampler.sample(fn, before)
            if value is None:
                continue
            if self.is_throttled(clock, self.sampler.clock.max_mhz, self.cfg.throttle_fraction):
                self.dropped += 1
                continue
            out.append(value)
        if outputs is not None and attempts:  # also after dropped samples: their calls ran, and a probe of new
            outputs.verify()                  # input values must be checked and undone before the other side runs
        return out

    def recheck(self, base: list[tuple[float, ...]], pr: list[tuple[float, ...]]) -> dict | None:
        """Both sides' blocks checked against the empty event pair's cost measured again
        (harness.timing.sampler.overhead_recheck), shifted in place where the two measures disagreed; the side
        with the smaller median goes first, as the one a mismeasured cost would take below zero (then
        OverheadMismeasured). Returns the sampler's note where this check shifted them, else None. A no-op unless
        the samples are events."""
        if getattr(self.sampler, "method", None) != "events":
            return None
        earlier = self.sampler.overhead_note
        values = [[v for b in blocks for v in b] for blocks in (base, pr)]
        first, second = sorted(values, key=lambda v: statistics.median(v) if v else math.inf)
        self.sampler.recheck_overhead(first, second)
        for blocks, flat in zip((base, pr), values, strict=True):
            it = iter(flat)
            blocks[:] = [tuple(next(it) for _ in b) for b in blocks]
        return self.sampler.overhead_note if self.sampler.overhead_note is not earlier else None


class _HostTimer:
    """The :class:`_Timer` interface over host time per call: a block is ``n`` host samples of ``calls`` calls."""

    def __init__(self, timer: _Timer, calls: int):
        self.sampler, self.calls, self.dropped, self.late = timer.sampler, calls, 0, 0
        self.method = f"host time per call ({calls} calls a sample" + (
            ", GPU kept busy by a spin)" if hasattr(timer.sampler, "wall_time") else ")")

    def block(self, fn, n: int, outputs=None) -> list[float]:
        return [self.sampler.host_time(fn, self.calls) for _ in range(n)]

    def recheck(self, base, pr) -> None:  # host clock: no event pair's cost was subtracted
        return None


def measure_host_ab(base_fn, pr_fn, device: str, cfg: BlockConfig, judge, timer) -> ABRun:
    """Host time per call of both sides in ABBA block pairs, on the warmed-up ``timer`` of :func:`make_timer`:
    the same number of calls per sample on both sides (enough for the slower launcher's 1 ms, or 2 ms on a CPU)."""
    import torch

    from harness.timing.launch import estimate_us
    from harness.timing.sampler import host_calls

    t0 = time.perf_counter()
    dev = torch.device(device)
    gpu = dev.type == "cuda"
    with torch.cuda.device(dev) if gpu else contextlib.nullcontext():
        sync = timer.sampler.sync if gpu else (lambda: None)
        calls = host_calls(max(estimate_us(base_fn, sync), estimate_us(pr_fn, sync)), "gpu" if gpu else "cpu")
        host_cfg = BlockConfig(blocks=cfg.host_blocks, samples=cfg.host_samples, more_blocks=cfg.more_blocks,
                               max_blocks=cfg.max_blocks, budget_s=cfg.host_budget_s, host_blocks=0)
        return _loop(_HostTimer(timer, calls), base_fn, pr_fn, host_cfg, judge, t0)


def make_timer(base_fn, pr_fn, device: str, cfg: BlockConfig):
    """Both callables warmed up, and (on a GPU) the flush buffer, spin and event overhead ready: reusable
    for repeated measurements of the same two callables (bench/gate_quality.py repeats each case)."""
    import torch

    from harness.timing.sampler import sampler_for

    dev = torch.device(device)
    with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():
        return _Timer(sampler_for(dev, cold=cfg.cold, method=cfg.method), cfg, (base_fn, pr_fn))


def measure_ab(base_fn: Callable[[], object], pr_fn: Callable[[], object], device: str, cfg: BlockConfig,
               judge: Callable[[list, list], Decision], timer=None, outputs=(None, None)) -> ABRun:
    """Block pairs until ``judge`` (blocks -> Decision) is not INCONCLUSIVE, or the budget or block cap ends it.
    ``outputs``: (base, PR) re-checks of the timed calls (harness.timing.engine.TimedOutputs, or None)."""
    import torch

    t0 = time.perf_counter()
    timer = timer or make_timer(base_fn, pr_fn, device, cfg)
    dev = torch.device(device)
    with torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext():
        return _loop(timer, base_fn, pr_fn, cfg, judge, t0, outputs)


def _loop(timer, base_fn, pr_fn, cfg: BlockConfig, judge, t0: float, outputs=(None, None)) -> ABRun:
    base: list[tuple[float, ...]] = []
    pr: list[tuple[float, ...]] = []
    dropped0, late0 = timer.dropped, timer.late
    sampling = time.perf_counter()
    target, stop, note = cfg.blocks, "", None
    while not stop:
        while len(base) < target:
            first_base = len(base) % 2 == 0  # ABBA: each side goes first in every other block pair
            first, second = (base_fn, pr_fn) if first_base else (pr_fn, base_fn)
            checks = outputs if first_base else outputs[::-1]
            a = timer.block(first, cfg.samples, checks[0])
            b = timer.block(second, cfg.samples, checks[1])
            base.append(tuple(a if first_base else b))
            pr.append(tuple(b if first_base else a))
            if time.perf_counter() - sampling > cfg.budget_s:
                break  # a slow kernel: judged on what the budget bought (below MIN_BLOCKS: inconclusive)
        note = timer.recheck(base, pr) or note
        decision = judge(base, pr)
        elapsed = time.perf_counter() - sampling
        per_pair = elapsed / len(base)
        if decision.verdict != "INCONCLUSIVE":
            stop = "decided"
        elif len(base) >= cfg.max_blocks:
            stop = "max-blocks"
        elif elapsed + per_pair * cfg.more_blocks > cfg.budget_s or len(base) < target:
            stop = "budget"
        else:
            target = min(cfg.max_blocks, len(base) + cfg.more_blocks)
    return ABRun(tuple(base), tuple(pr), decision, stop, timer.dropped - dropped0, timer.late - late0,
                 timer.method, time.perf_counter() - t0, note)
