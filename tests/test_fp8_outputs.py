"""Every generated check handles an FP8 output (a quantiser's e4m3 q beside its fp32 scales): the correct kernel
passes, each planted bug is caught by the check that names it, and nothing crashes the harness (torch has no
isfinite for FP8: the nan_inf check used to raise NotImplementedError)."""

from __future__ import annotations

import pytest

from tests.e2e import planted_spec, run_all


def _spec(tmp_path, impl):
    return planted_spec(tmp_path, "planted_fp8_out", impl)


def test_the_correct_quantiser_passes_every_check(tmp_path):
    assert run_all(_spec(tmp_path, "quant"), backend="torch") == {}


def _by_check(failures: dict) -> dict:
    out = {}
    for (_dtype, check), messages in failures.items():
        out.setdefault(check, []).extend(messages)
    return out


@pytest.mark.parametrize("impl, check, fragment", [
    ("quant_skips_last_row", "poison", "never written"),
    ("quant_nan_scale", "nan_inf", "NaN/Inf values where the reference is finite"),
    ("quant_fnuz_max", "numerics", "outside atol="),
    ("quant_noisy", "determinism", "second run on the same inputs differs"),
])
def test_fp8_planted_bugs_are_caught(tmp_path, impl, check, fragment):
    failures = _by_check(run_all(_spec(tmp_path, impl), backend="torch"))
    assert check in failures, f"{impl}: expected {check}, got {sorted(failures)}"
    assert any(fragment in m for m in failures[check]), failures[check][:2]
    assert "error" not in failures, failures.get("error", [])[:2]  # no harness crash on FP8
