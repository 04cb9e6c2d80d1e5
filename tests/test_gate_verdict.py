"""The merge gate's verdict on synthetic samples: the four verdicts, the floor, pairing, thresholds, interleaving."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from harness.gate.calibration import (
    POLICY_MIN_EFFECT,
    CalibrationError,
    default_threshold,
    derive,
    for_spec,
    load_noise,
    with_options,
)
from harness.gate.interleave import BlockConfig, measure_ab
from harness.gate.model import IN_PROCESS, STORED, Threshold
from harness.gate.verdict import MIN_BLOCKS, Decision, classify, decide, exit_code, ratio_interval, split_blocks

RULE = Threshold(0.03, 0.0, "test")


def blocks(median: float, rsd: float, n_blocks: int = 10, per_block: int = 12, seed: int = 0, drift=None):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_blocks):
        scale = 1.0 if drift is None else drift[i]
        out.append(tuple(median * scale * (1 + rsd * rng.standard_normal(per_block))))
    return out


@pytest.mark.parametrize("lo,hi,verdict", [
    (1.05, 1.08, "SLOWER"),        # whole interval above 1 + e
    (0.90, 0.95, "FASTER"),        # whole interval below 1 / (1 + e)
    (0.99, 1.02, "SAME"),          # whole interval inside the band
    (1.01, 1.05, "INCONCLUSIVE"),  # straddles the upper edge
    (0.95, 1.05, "INCONCLUSIVE"),  # wider than the band
    (float("nan"), 1.0, "INCONCLUSIVE"),
])
def test_classify(lo, hi, verdict):
    assert classify(lo, hi, 0.03) == verdict


def test_the_band_is_symmetric_in_log_space():
    assert classify(0.9710, 0.99, 0.03) == "SAME"        # 1 / 1.03 = 0.97087, not 0.97
    assert classify(0.9705, 0.99, 0.03) == "INCONCLUSIVE"
    assert classify(0.90, 0.9710, 0.03) == "INCONCLUSIVE"
    assert classify(0.90, 0.9705, 0.03) == "FASTER"


def test_four_verdicts_from_samples():
    base = blocks(100.0, 0.01, seed=1)
    assert decide(base, blocks(100.0, 0.01, seed=2), RULE, paired=True).verdict == "SAME"
    assert decide(base, blocks(110.0, 0.01, seed=2), RULE, paired=True).verdict == "SLOWER"
    assert decide(base, blocks(90.0, 0.01, seed=2), RULE, paired=True).verdict == "FASTER"
    noisy = decide(blocks(100.0, 0.2, seed=1), blocks(103.0, 0.2, seed=2), RULE, paired=True)
    assert noisy.verdict == "INCONCLUSIVE" and noisy.lo < 1.03 < noisy.hi


def test_decision_fields():
    d = decide(blocks(100.0, 0.01, seed=1), blocks(110.0, 0.01, seed=2), RULE, paired=True)
    assert d.ratio == pytest.approx(1.10, rel=0.01) and d.lo < d.ratio < d.hi
    assert d.base_median_us == pytest.approx(100.0, rel=0.01) and d.blocks == 10 and d.effect == 0.03


def test_absolute_floor_for_short_kernels():
    base, pr = blocks(2.0, 0.005, seed=1), blocks(2.1, 0.005, seed=2)   # +5 %: 0.1 us on a 2 us kernel
    assert decide(base, pr, RULE, paired=True).verdict == "SLOWER"
    floored = Threshold(0.03, 0.25, "test")                              # 0.25 us of 2 us: e = 12.5 %
    d = decide(base, pr, floored, paired=True)
    assert d.effect == pytest.approx(0.125, rel=0.01) and d.verdict == "SAME"
    # The floor does not touch a long kernel: 0.25 us of 100 us is below the relative 3 %.
    assert decide(blocks(100.0, 0.005, seed=1), blocks(105.0, 0.005, seed=2), floored, paired=True).verdict == "SLOWER"


def test_noise_raises_the_effect():
    assert Threshold(0.03, 0.1, "t").effect(10.0) == pytest.approx(0.03)
    assert Threshold(0.03, 0.1, "t").effect(2.0) == pytest.approx(0.05)
    assert Threshold(0.03, 0.1, "t").effect(2.0, noise=0.08) == pytest.approx(0.08)
    d = decide(blocks(100.0, 0.005, seed=1), blocks(105.0, 0.005, seed=2), RULE, paired=True, noise=0.08)
    assert d.verdict == "SAME"


def test_pairing_cancels_drift_shared_by_a_block_pair():
    drift = [1.0, 1.3, 0.8, 1.2, 0.9, 1.25, 0.85, 1.1, 0.95, 1.15]   # the machine's speed, block by block
    base, pr = blocks(100.0, 0.002, seed=1, drift=drift), blocks(100.0, 0.002, seed=2, drift=drift)
    paired = ratio_interval(base, pr, paired=True)
    unpaired = ratio_interval(base, pr, paired=False)
    assert paired[2] - paired[1] < 0.02 < unpaired[2] - unpaired[1]
    assert decide(base, pr, RULE, paired=True).verdict == "SAME"
    assert decide(base, pr, RULE, paired=False).verdict == "INCONCLUSIVE"


def test_too_few_blocks_is_inconclusive_and_empty_blocks_drop_their_pair():
    few = MIN_BLOCKS - 1
    d = decide(blocks(100.0, 0.001, few), blocks(150.0, 0.001, few, seed=3), RULE, paired=True)
    assert d.verdict == "INCONCLUSIVE" and d.ratio == pytest.approx(1.5, rel=0.01)
    base = blocks(100.0, 0.001, MIN_BLOCKS + 1)
    pr = blocks(150.0, 0.001, MIN_BLOCKS + 1, seed=3)
    pr[0] = pr[1] = ()  # every sample of two blocks dropped as throttled
    assert decide(base, pr, RULE, paired=True).verdict == "INCONCLUSIVE"
    with pytest.raises(ValueError, match="paired blocks"):
        ratio_interval(base, pr[:-1], paired=True)


def test_same_samples_same_interval():
    base, pr = blocks(100.0, 0.05, seed=1), blocks(101.0, 0.05, seed=2)
    assert ratio_interval(base, pr, paired=True, seed=7) == ratio_interval(base, pr, paired=True, seed=7)


def test_exit_codes_and_split_blocks():
    assert exit_code(["SAME", "FASTER", "INCONCLUSIVE", "NOT-COMPARED"]) == 0
    for bad in ("SLOWER", "WRONG", "ERROR"):
        assert exit_code(["SAME", bad]) == 1
    with pytest.raises(ValueError, match="unknown verdicts"):
        exit_code(["MAYBE"])
    parts = split_blocks(list(range(100)), 10)
    assert len(parts) == 10 and sum(parts, []) == list(range(100))
    assert len(split_blocks(list(range(9)), 10)) == 2   # at least 4 samples a block


# ----------------------------------------------------------------------------- thresholds

def test_default_threshold_policy_and_calibration_file(tmp_path):
    missing = tmp_path / "none.json"
    t = default_threshold(IN_PROCESS, missing)
    assert (t.relative, t.floor_us) == (POLICY_MIN_EFFECT, 0.0) and "not calibrated" in t.source
    assert "no cross-run calibration" in default_threshold(STORED, missing).source
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"in_process": {"min_effect": 0.01, "floor_us": 0.12},
                                "cross_run": {"min_effect": 0.09, "floor_us": 0.4},
                                "provenance": {"summary": "H200 test"}}))
    t = default_threshold(IN_PROCESS, path)
    assert (t.relative, t.floor_us) == (POLICY_MIN_EFFECT, 0.12) and "H200 test" in t.source  # never below policy
    assert (default_threshold(STORED, path).relative, default_threshold(STORED, path).floor_us) == (0.09, 0.4)
    path.write_text(json.dumps({"in_process": {"min_effect": "3%", "floor_us": 0.1}}))
    with pytest.raises(CalibrationError, match=r"calibration.json: in_process.min_effect: expected a number"):
        default_threshold(IN_PROCESS, path)


def test_spec_rule_and_options_override():
    spec = SimpleNamespace(name="rmsnorm", gate=SimpleNamespace(min_effect=None, floor_us=0.5, reason="jittery"))
    t = for_spec(RULE, spec)
    assert (t.relative, t.floor_us) == (0.03, 0.5) and "jittery" in t.source
    assert for_spec(RULE, SimpleNamespace(name="x")) is RULE   # a spec model without gate rules
    assert with_options(RULE, 0.1, None) == Threshold(0.1, 0.0, "command-line option")


def test_noise_file(tmp_path):
    path = tmp_path / "noise.json"
    path.write_text(json.dumps({"cases": [{"kernel": "k", "case_id": "n=1", "dtype": "bf16", "spread": 0.02}]}))
    assert load_noise(path) == {("k", "n=1", "bf16"): 0.02}
    path.write_text(json.dumps({"cases": [{"kernel": "k", "case_id": 1, "dtype": "bf16", "spread": 0.02}]}))
    with pytest.raises(CalibrationError, match=r"noise.json: cases\[0\].case_id: expected a string"):
        load_noise(path)


def test_derive_from_aa_trials():
    trials = [(100.0, 1.012), (100.0, 0.985), (3.0, 1.05), (3.5, 0.97), (50.0, 1.0)]
    d = derive(trials, quantile=1.0)  # the largest deviation: every trial inside its case's effect
    assert d["measured_relative"] == pytest.approx(0.015) and d["min_effect"] == POLICY_MIN_EFFECT
    assert d["floor_us"] == pytest.approx(0.15)
    for m, r in trials:
        assert abs(r - 1) <= Threshold(d["min_effect"], d["floor_us"], "").effect(m) + 1e-12
    many = [(100.0, 1 + 0.001 * i) for i in range(100)] + [(100.0, 1.5)]   # one freak trial
    d = derive(many)
    assert d["max_relative"] == pytest.approx(0.5) and d["measured_relative"] < 0.1


# ----------------------------------------------------------------------------- interleaving (host timer)

def test_measure_ab_alternates_abba_and_stops_when_decided():
    calls, seen = [], []
    # The judge's verdicts are scripted, so where sampling stops does not hang on host-timer noise: still
    # INCONCLUSIVE after the first 6 block pairs (sampling must go on, 2 pairs more), then decided at 8.
    script = (Decision("INCONCLUSIVE", 1.0, float("nan"), float("nan"), 0.5, 1.0, 1.0, 6),
              Decision("SAME", 1.0, 0.9, 1.1, 0.5, 1.0, 1.0, 8))

    def judge(b, p):
        seen.append((len(b), len(p)))
        return script[len(seen) - 1]   # a third call (sampling on after SAME) is an IndexError

    cfg = BlockConfig(blocks=6, samples=3, more_blocks=2, max_blocks=10, budget_s=5.0)
    run = measure_ab(lambda: calls.append("A"), lambda: calls.append("B"), "cpu", cfg, judge)
    timed = "".join(calls)[-(8 * 2 * 3):]   # after the warm-up calls
    assert timed == ("AAABBB" + "BBBAAA") * 4   # ABBA, the 2 pairs added included
    assert seen == [(6, 6), (8, 8)]             # judged after the first blocks, and again after the extension
    assert len(run.base_blocks) == len(run.pr_blocks) == 8 and all(len(b) == 3 for b in run.base_blocks)
    assert run.stop == "decided" and run.decision is script[1]   # stopped at the first verdict not INCONCLUSIVE


def test_measure_ab_extends_an_inconclusive_case_up_to_its_limits():
    def never(b, p):
        return Decision("INCONCLUSIVE", 1.0, float("nan"), float("nan"), 0.03, 1.0, 1.0, len(b))

    cfg = BlockConfig(blocks=6, samples=2, more_blocks=2, max_blocks=10, budget_s=5.0)
    run = measure_ab(lambda: None, lambda: None, "cpu", cfg, never)
    assert run.stop == "max-blocks" and len(run.base_blocks) == 10
    slow = BlockConfig(blocks=6, samples=2, more_blocks=2, max_blocks=60, budget_s=0.0)
    run = measure_ab(lambda: None, lambda: None, "cpu", slow, never)
    assert run.stop == "budget" and len(run.base_blocks) == 1


def test_block_config_checks():
    with pytest.raises(ValueError):
        BlockConfig(blocks=MIN_BLOCKS - 1)
    with pytest.raises(ValueError):
        BlockConfig(method="cupti")
