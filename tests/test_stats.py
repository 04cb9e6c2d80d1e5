"""Statistics of timing samples, checked against hand-computed values and the statistics module."""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tracemalloc
from dataclasses import fields

import numpy as np
import pytest

from harness.timing import stats as stats_mod
from harness.timing.engine import TimingConfig
from harness.timing.stats import Stats, StoppingRule, speedup, stats_frame, summarize


def test_summarize_on_a_hand_computed_sample():
    """1..10 with one low and one high outlier. Order statistics by linear interpolation between the
    sorted values at position q * (n - 1) = 11q: p5 at 0.55 (-50 + 0.55 * 51), p25 at 2.75, the median
    at 5.5, p75 at 8.25, p95 at 10.45 (10 + 0.45 * 90)."""
    s = summarize([7, 3, 100, 1, 10, 5, -50, 2, 9, 4, 8, 6])
    assert s.n == 12 and (s.min, s.max) == (-50.0, 100.0)
    assert [s.p5, s.p25, s.median, s.p75, s.p95] == pytest.approx([-21.95, 2.75, 5.5, 8.25, 50.5])
    assert s.iqr == pytest.approx(5.5)
    assert s.mean == pytest.approx(105 / 12)
    # squared deviations: sum of squares 385 + 10000 + 2500 = 12885, less 12 x 8.75**2 = 918.75
    assert s.std == pytest.approx(math.sqrt(11966.25 / 11))
    assert s.cv == pytest.approx(math.sqrt(11966.25 / 11) / 8.75)
    # fences at 2.75 - 8.25 = -5.5 and 8.25 + 8.25 = 16.5: -50 and 100 are outside, 1 and 10 inside
    assert (s.outliers_low, s.outliers_high) == (1, 1)


def test_summarize_agrees_with_the_statistics_module():
    """An independent implementation: statistics.quantiles(method="inclusive") cuts at 5% steps."""
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(100.0, 2.0, 500), [160.0, 170.0, 20.0]]).tolist()
    s = summarize(x)
    cuts = statistics.quantiles(x, n=20, method="inclusive")
    p5, p25, median, p75, p95 = cuts[0], cuts[4], cuts[9], cuts[14], cuts[18]
    assert [s.p5, s.p25, s.median, s.p75, s.p95] == pytest.approx([p5, p25, median, p75, p95], rel=1e-12)
    assert s.median == pytest.approx(statistics.median(x), rel=1e-12)
    assert s.mean == pytest.approx(statistics.fmean(x)) and s.std == pytest.approx(statistics.stdev(x))
    iqr = p75 - p25
    assert s.outliers_low == sum(v < p25 - 1.5 * iqr for v in x) >= 1
    assert s.outliers_high == sum(v > p75 + 1.5 * iqr for v in x) >= 2


def test_outliers_counted_not_dropped():
    x = list(range(1, 21)) + [100]
    s = summarize(x)
    assert s.n == 21 and s.max == 100 and s.outliers_high == 1 and s.outliers_low == 0


def test_bootstrap_interval_contains_median_and_is_deterministic():
    x = np.random.default_rng(2).lognormal(3.0, 0.3, 400)
    s = summarize(x, seed=7)
    assert s.median_ci_lo <= s.median <= s.median_ci_hi
    assert s.median_ci_lo < s.median_ci_hi
    assert summarize(x, seed=7) == s
    narrow = summarize(x, seed=7, confidence=0.5)
    assert s.median_ci_lo <= narrow.median_ci_lo <= narrow.median_ci_hi <= s.median_ci_hi


def test_bootstrap_large_sample_uses_bounded_blocks(monkeypatch):
    """Peak memory of the bootstrap follows the block size, not n_boot x n: with blocks of 200,000
    indices, 500 resamples of 20,000 samples (80 MB of indices at once) stay within a few MB."""
    monkeypatch.setattr(stats_mod, "_BLOCK_ELEMENTS", 200_000)
    x = np.random.default_rng(3).normal(50.0, 1.0, 20_000)
    tracemalloc.start()
    try:
        s = summarize(x, n_boot=500)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # one block's int64 indices, the float64 values they gather and np.median's partitioned copy: three
    # arrays of 8 bytes x 200,000; without blocks it would be 500 x 20,000 x 8 bytes = 80 MB each
    assert peak < 5 * 8 * 200_000, f"peak {peak / 1e6:.1f} MB"
    assert s.median_ci_lo <= s.median <= s.median_ci_hi
    assert s.median_ci_hi - s.median_ci_lo < 0.1


def test_empty_and_single_sample():
    empty = summarize([])
    assert empty.n == 0 and empty.outliers_low == 0 and empty.outliers_high == 0
    assert all(math.isnan(getattr(empty, f.name)) for f in fields(Stats)
               if f.name not in ("n", "outliers_low", "outliers_high"))
    one = summarize([42.0])
    assert (one.n, one.min, one.median, one.max, one.mean, one.iqr) == (1, 42.0, 42.0, 42.0, 42.0, 0.0)
    assert math.isnan(one.std) and math.isnan(one.cv) and math.isnan(one.median_ci_lo)
    assert json.loads(json.dumps(one.as_json()))["std"] is None


def test_speedup_of_identical_distributions_is_one():
    rng = np.random.default_rng(4)
    a, b = rng.normal(100.0, 3.0, 300), rng.normal(100.0, 3.0, 300)
    r = speedup(a, b)
    assert r.ratio == pytest.approx(1.0, abs=0.02)
    assert r.lo <= 1.0 <= r.hi
    same = speedup(a, a)
    assert same.ratio == 1.0 and same.lo <= 1.0 <= same.hi


def test_speedup_of_a_faster_candidate():
    rng = np.random.default_rng(5)
    r = speedup(rng.normal(200.0, 4.0, 200), rng.normal(100.0, 2.0, 200))
    assert r.ratio == pytest.approx(2.0, rel=0.02)
    assert 1.0 < r.lo <= r.ratio <= r.hi


def test_speedup_degenerate_inputs():
    assert all(math.isnan(v) for v in (speedup([], [1.0]).ratio, speedup([1.0], []).ratio))
    single = speedup([4.0], [2.0])
    assert single.ratio == 2.0 and math.isnan(single.lo) and math.isnan(single.hi)


def test_stats_frame_one_row_per_label():
    data = {"triton": [1.0, 2.0, 3.0], "eager": [10.0, 11.0], "none": []}
    frame = stats_frame(data)
    assert list(frame.index) == ["triton", "eager", "none"] and frame.index.name == "label"
    assert list(frame.columns) == [f.name for f in fields(Stats)]
    assert frame.loc["triton", "median"] == 2.0
    assert frame.loc["eager", "n"] == 2 and frame.loc["none", "n"] == 0


def test_importing_the_timing_code_does_not_import_pandas():
    """Every worker imports the engine and its statistics; only stats_frame needs pandas, so only it imports it."""
    code = ("import sys, harness.timing.engine, harness.timing.stats as s; assert 'pandas' not in sys.modules; "
            "s.stats_frame({'a': [1.0]}); assert 'pandas' in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


# ----------------------------------------------------------------------------- the stopping rule

def _feed(rule: StoppingRule, values, wall_s: float = 0.0) -> str | None:
    for v in values:
        rule.add(float(v))
        reason = rule.verdict(wall_s)
        if reason:
            return reason
    return None


def test_rule_stops_on_rsd_only_after_min_time_and_min_samples():
    rule = StoppingRule(TimingConfig(min_samples=10, min_time_s=0.0195, max_rsd=0.005))
    assert _feed(rule, [1000.0] * 100) == "rsd"
    assert rule.n == 20  # 20 x 1 ms passes min_time_s; constant samples have rsd 0
    rule = StoppingRule(TimingConfig(min_samples=30, min_time_s=0.0))
    assert _feed(rule, [5.0] * 100) == "rsd" and rule.n == 30


def test_rule_stops_when_noise_estimate_stabilises():
    cfg = TimingConfig(min_samples=10, min_time_s=1e9, max_samples=100_000)
    rule = StoppingRule(cfg)
    x = np.random.default_rng(6).normal(2.0, 0.1, 100_000)  # 5% noise: never reaches 0.5%
    assert _feed(rule, x) == "noise-stable"
    assert 16 * 8 <= rule.n < 20_000 and rule.n % 16 == 0
    last = rule.noise[-8:]
    assert (max(last) - min(last)) / last[-1] <= 0.05


def test_rule_needs_a_full_window_of_noise_estimates():
    rule = StoppingRule(TimingConfig(min_samples=10, min_time_s=1e9, max_samples=10_000), every=16, window=8)
    _feed(rule, [1.0, 2.0] * 63)  # 126 samples: 7 estimates, identical but not yet a full window
    assert len(rule.noise) == 7 and not rule.noise_stable() and rule.verdict(0.0) is None
    assert _feed(rule, [1.0, 2.0]) == "noise-stable" and rule.n == 128


def test_rule_max_samples_and_timeout():
    rule = StoppingRule(TimingConfig(min_samples=10, max_samples=50, min_time_s=1e9))
    assert _feed(rule, np.random.default_rng(7).normal(10.0, 1.0, 1000)) == "max-samples" and rule.n == 50
    rule = StoppingRule(TimingConfig(min_samples=10, timeout_s=1.0))
    rule.add(3.0)
    assert rule.verdict(0.5) is None and rule.verdict(1.0) == "timeout"  # even below min_samples
    converged = StoppingRule(TimingConfig(min_samples=2, min_time_s=0.0, timeout_s=1.0))
    _feed(converged, [7.0, 7.0], wall_s=0.0)
    assert converged.verdict(5.0) == "rsd"  # converged beats timed out
