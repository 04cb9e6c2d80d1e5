"""The empty event pair's cost, measured again after the samples (harness.timing.sampler.overhead_recheck).

On an H100 one measurement read an empty event pair at about 17 us, and every sample of a 6 us kernel, with that
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

TRUE_PAIR_US = 1.6  # an empty pair's cost on an H100 or H200, about


def _pairs(median: float, n: int = 30, jitter: float = 0.05, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [median + rng.uniform(-jitter, jitter) for _ in range(n)]


def _samples(true_us: float, overhead_us: float, n: int = 40, seed: int = 1) -> list[float]:
    """Samples of a kernel of ``true_us`` as the sampler takes them: the raw event span minus ``overhead_us``."""
    rng = random.Random(seed)
    return [true_us + TRUE_PAIR_US + rng.gauss(0, 0.05) - overhead_us for _ in range(n)]


def _remeasure(median: float):
    return lambda: (median, _pairs(median, seed=2))


MISMEASURED_US = TRUE_PAIR_US + 6.0 + 11.7  # what made a 6 us kernel read -11.7 us


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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: the engine's event path")
def test_the_engine_reports_the_kernel_not_the_mismeasured_pair(monkeypatch):
    from harness.timing.engine import TimingConfig, measure

    real = GpuSampler.event_overhead
    calls = []

    def planted(self, n: int = 30):
        median, pairs = real(self, n)
        calls.append(median)
        return (median + 15.0, [p + 15.0 for p in pairs]) if len(calls) == 1 else (median, pairs)

    monkeypatch.setattr(GpuSampler, "event_overhead", planted)
    x = torch.randn(1 << 20, device="cuda")
    m = measure(lambda: x.mul_(1.0), device="cuda", config=TimingConfig(min_samples=10, timeout_s=1.0))
    assert len(calls) == 2 and min(m.samples_us) > 0
    assert m.method_params["event_overhead_recheck"]["event_overhead_first_us"] == pytest.approx(calls[0] + 15.0)
