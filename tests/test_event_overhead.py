"""The empty event pair's cost, measured again after the samples (harness.timing.sampler.overhead_recheck), by the
engine and by the gate's interleaved blocks (harness.gate.interleave._Timer.recheck).

On an H100 one measurement read an empty event pair about 17 us above its cost, and a kernel of about 5.5 us, with that
subtracted, read -11.7 us (reports/h100/experiments/read-pattern/). The planted measures below are that case, a long
kernel the same error would have shortened unnoticed, and the honest cases the check must leave alone.
"""

from __future__ import annotations

import random
import statistics
from types import SimpleNamespace

import pytest
import torch

from harness.timing.sampler import EVENT_RESOLUTION_US, GpuSampler, OverheadMismeasured, overhead_recheck

TRUE_PAIR_US = 1.28  # an empty pair's cost on the H200 (reports/h200/logs/gpu_timing_check.json)


def _pairs(median: float, n: int = 30, jitter: float = 0.05, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [median + rng.uniform(-jitter, jitter) for _ in range(n)]


def _samples(true_us: float, overhead_us: float, n: int = 40, seed: int = 1) -> list[float]:
    """Samples of a kernel of ``true_us`` as the sampler takes them: the raw event span minus ``overhead_us``."""
    rng = random.Random(seed)
    return [true_us + TRUE_PAIR_US + rng.gauss(0, 0.05) - overhead_us for _ in range(n)]


def _remeasure(median: float):
    return lambda: (median, _pairs(median, seed=2))


MISMEASURED_US = TRUE_PAIR_US + 6.0 + 11.7  # planted: a 6 us kernel reads -11.7 us, as the H100's did


def test_the_h100_case_is_shifted_to_the_second_measure():
    first = MISMEASURED_US
    kept = _samples(6.0, first)
    assert statistics.median(kept) == pytest.approx(-11.7, abs=0.1)  # what the probe printed
    shift, note = overhead_recheck(kept, first, _pairs(first), _remeasure(TRUE_PAIR_US))
    assert note is not None and note["event_overhead_us"] == pytest.approx(TRUE_PAIR_US)
    assert statistics.median(kept) + shift == pytest.approx(6.0, abs=0.1)


def test_a_long_kernel_shortened_by_the_same_error_is_caught_too():
    first = 17.6
    kept = _samples(100.0, first)
    assert statistics.median(kept) > 80  # positive: a check of the sign alone would pass it
    shift, note = overhead_recheck(kept, first, _pairs(first), _remeasure(TRUE_PAIR_US))
    assert note is not None and statistics.median(kept) + shift == pytest.approx(100.0, abs=0.1)


def test_a_second_measure_that_is_the_inflated_one_changes_nothing():
    kept = _samples(6.0, TRUE_PAIR_US)
    shift, note = overhead_recheck(kept, TRUE_PAIR_US, _pairs(TRUE_PAIR_US), _remeasure(17.6))
    assert shift == 0.0 and note["event_overhead_us"] == TRUE_PAIR_US


def test_agreeing_measures_leave_the_samples_alone():
    kept = _samples(6.0, TRUE_PAIR_US)
    again = TRUE_PAIR_US + 0.3  # within the events' resolution
    assert overhead_recheck(kept, TRUE_PAIR_US, _pairs(TRUE_PAIR_US), _remeasure(again)) == (0.0, None)


def test_a_call_that_launches_nothing_may_read_a_little_below_zero():
    kept = _samples(0.0, TRUE_PAIR_US + 0.2)  # median about -0.2: noise around nothing, not an error
    assert overhead_recheck(kept, TRUE_PAIR_US + 0.2, _pairs(TRUE_PAIR_US), _remeasure(TRUE_PAIR_US)) == (0.0, None)


def test_samples_negative_under_both_measures_are_refused():
    first = 17.6
    kept = _samples(6.0, first)
    with pytest.raises(OverheadMismeasured, match=r"measured before and after them \(17\.60 and 17\.\d\d us\)"):
        overhead_recheck(kept, first, _pairs(first), _remeasure(17.7))


def test_the_tolerance_is_the_resolution_or_the_pairs_spread():
    wide = _pairs(TRUE_PAIR_US, jitter=2.0)  # a noisy machine: its pairs' own spread is the tolerance
    kept = _samples(6.0, TRUE_PAIR_US)
    assert overhead_recheck(kept, TRUE_PAIR_US, wide, _remeasure(TRUE_PAIR_US + 3 * EVENT_RESOLUTION_US)) == (0.0,
                                                                                                              None)


def test_the_sampler_shifts_every_series_it_took_and_keeps_the_note():
    first = 17.6
    fake = SimpleNamespace(method="events", overhead_us=first, empty_us=_pairs(first), overhead_note=None,
                           late_us=[-3.0], event_overhead=_remeasure(TRUE_PAIR_US))
    kept, dropped = _samples(6.0, first), [-12.0]
    GpuSampler.recheck_overhead(fake, kept, dropped)
    shift = first - TRUE_PAIR_US
    assert statistics.median(kept) == pytest.approx(6.0, abs=0.1)
    assert dropped == [-12.0 + shift] and fake.late_us == [-3.0 + shift]
    assert fake.overhead_us == pytest.approx(TRUE_PAIR_US) and fake.overhead_note["event_overhead_first_us"] == first


def test_host_timing_on_a_gpu_has_no_event_pair_to_check():
    fake = SimpleNamespace(method="host", event_overhead=lambda: pytest.fail("no event pair to measure"))
    kept = [5.0]
    GpuSampler.recheck_overhead(fake, kept, [])
    assert kept == [5.0]


GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the event path")


@pytest.fixture
def first_measure_inflated(monkeypatch):
    """The sampler's first measure of the empty pair read 15 us high, as the H100's did; later ones are true.
    Yields the list of true medians measured."""
    real = GpuSampler.event_overhead
    calls = []

    def planted(self, n: int = 30):
        median, pairs = real(self, n)
        calls.append(median)
        return (median + 15.0, [p + 15.0 for p in pairs]) if len(calls) == 1 else (median, pairs)

    monkeypatch.setattr(GpuSampler, "event_overhead", planted)
    return calls


@GPU
def test_the_engine_reports_the_kernel_not_the_mismeasured_pair(first_measure_inflated):
    from harness.timing.engine import TimingConfig, measure

    calls = first_measure_inflated
    x = torch.randn(1 << 20, device="cuda")
    m = measure(lambda: x.mul_(1.0), device="cuda", config=TimingConfig(min_samples=10, timeout_s=1.0))
    assert len(calls) == 2 and min(m.samples_us) > 0
    assert m.method_params["event_overhead_recheck"]["event_overhead_first_us"] == pytest.approx(calls[0] + 15.0)


@GPU
def test_the_gates_blocks_are_shifted_on_the_gpu_too(first_measure_inflated):
    from harness.gate.interleave import BlockConfig, measure_ab
    from harness.gate.model import Threshold
    from harness.gate.verdict import decide

    calls = first_measure_inflated
    x = torch.randn(1 << 20, device="cuda")
    cfg = BlockConfig(blocks=6, samples=4, host_blocks=0, budget_s=2.0)
    rule = Threshold(relative=0.03, floor_us=0.0, source="test")
    run = measure_ab(lambda: x.mul_(1.0), lambda: x.mul_(1.0), "cuda", cfg,
                     lambda b, p: decide(b, p, rule, paired=True))
    assert run.event_overhead_recheck["event_overhead_first_us"] == pytest.approx(calls[0] + 15.0)
    assert min(v for b in (*run.base_blocks, *run.pr_blocks) for v in b) > 0


class _PlantedEvents:
    """The GpuSampler surface the gate's timer uses, on the host: a sample is the planted kernel time plus the true
    empty pair's cost, minus the cost this sampler believes (``first`` until a re-measure, which reads ``again``)."""

    method, name, late_discarded = "events", "cuda-events-minus-overhead", 0
    clock = SimpleNamespace(max_mhz=None)
    recheck_overhead = GpuSampler.recheck_overhead

    def __init__(self, first: float, again: float, times: dict):
        self.overhead_us, self.empty_us, self.overhead_note, self.late_us = first, _pairs(first), None, []
        self.again, self.times, self.rng = again, times, random.Random(3)

    def warm(self, fns):
        pass

    def event_overhead(self, n: int = 30):
        return self.again, _pairs(self.again, n, seed=2)

    def sample(self, fn, before=None):
        return self.times[fn] + TRUE_PAIR_US + self.rng.gauss(0, 0.05) - self.overhead_us, None


def _gate(base_us: float, pr_us: float, first: float, again: float):
    from harness.gate.interleave import BlockConfig, _Timer, measure_ab
    from harness.gate.model import Threshold
    from harness.gate.verdict import decide

    def base():
        pass

    def pr():
        pass

    cfg = BlockConfig(blocks=8, samples=6, host_blocks=0)
    rule = Threshold(relative=0.03, floor_us=0.0, source="test")
    timer = _Timer(_PlantedEvents(first, again, {base: base_us, pr: pr_us}), cfg, (base, pr))
    return measure_ab(base, pr, "cpu", cfg, lambda b, p: decide(b, p, rule, paired=True), timer=timer)


def test_the_gate_judges_a_10_percent_regression_at_its_size_not_the_mismeasured_one():
    run = _gate(30.0, 33.0, MISMEASURED_US, TRUE_PAIR_US)  # 17.7 us off: 12.3 against 15.3 read 1.24x
    assert run.decision.verdict == "SLOWER" and run.decision.ratio == pytest.approx(1.10, abs=0.01)
    assert run.event_overhead_recheck["event_overhead_first_us"] == MISMEASURED_US
    assert run.event_overhead_recheck["event_overhead_us"] == pytest.approx(TRUE_PAIR_US)


def test_a_change_below_the_threshold_is_not_blown_up_into_a_regression():
    run = _gate(30.0, 30.6, MISMEASURED_US, TRUE_PAIR_US)  # 2 %: 17.7 us short on both sides it read 4.9 %
    assert run.decision.verdict == "SAME", run.decision


def test_the_gate_refuses_samples_negative_under_both_measures():
    with pytest.raises(OverheadMismeasured):
        _gate(6.0, 6.0, MISMEASURED_US, MISMEASURED_US + 0.1)


def test_an_honest_measure_leaves_the_gates_samples_and_reason_alone():
    run = _gate(30.0, 33.0, TRUE_PAIR_US, TRUE_PAIR_US + 0.2)
    assert run.event_overhead_recheck is None and run.decision.ratio == pytest.approx(1.10, abs=0.01)
