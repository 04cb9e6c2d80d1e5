"""Statistics of timing samples, checked against numpy on known data."""

from __future__ import annotations

import json
import math
from dataclasses import fields

import numpy as np
import pytest

from harness.timing.engine import TimingConfig
from harness.timing.stats import Stats, StoppingRule, speedup, stats_frame, summarize


def test_summarize_matches_numpy():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.normal(100.0, 2.0, 500), [160.0, 170.0, 20.0]])
    s = summarize(x)
    q = np.percentile(x, [5, 25, 50, 75, 95])
    assert s.n == x.size
    assert (s.min, s.max) == (x.min(), x.max())
    assert np.allclose([s.p5, s.p25, s.median, s.p75, s.p95], q)
    assert s.mean == pytest.approx(x.mean())
    assert s.std == pytest.approx(x.std(ddof=1))
    assert s.cv == pytest.approx(x.std(ddof=1) / x.mean())
    assert s.iqr == pytest.approx(q[3] - q[1])
    assert s.outliers_low == int((x < q[1] - 1.5 * (q[3] - q[1])).sum()) >= 1
    assert s.outliers_high == int((x > q[3] + 1.5 * (q[3] - q[1])).sum()) >= 2


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


def test_bootstrap_large_sample_uses_bounded_blocks():
    x = np.random.default_rng(3).normal(50.0, 1.0, 20_000)
    s = summarize(x, n_boot=500)
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
