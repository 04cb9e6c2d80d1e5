"""Planted-bug kernels: each must be caught by the generated check that targets its bug."""

from __future__ import annotations

import pytest

from harness.correctness.args import case_seed
from harness.correctness.checks import CaseContext, CheckFailure, run_checks
from harness.spec.imports import resolve_import
from harness.target.device import detect
from tests.e2e import make_spec
from tests.planted import broken_kernels


def run_all(spec, dtypes=("fp32", "bf16")) -> dict[str, list[str]]:
    """Run every edge + ci case; map each failing check to its messages (and 'error' to crashes)."""
    device = detect()
    fn, ref = resolve_import(spec.backends["triton"].impl), resolve_import(spec.reference)
    failures: dict[str, list[str]] = {}
    for dtype in dtypes:
        for case in spec.cases["edge"] + spec.cases["ci"]:
            broken_kernels._WORKSPACE.clear()
            ctx = CaseContext(spec, "triton", dtype, case, case_seed(spec, dtype, case), device.arch,
                              device.torch_device)
            try:
                run_checks(ctx, fn, ref)
            except CheckFailure as exc:
                failures.setdefault(exc.check, []).append(f"{case.id}: {exc}")
            except Exception as exc:  # noqa: BLE001 - a crash is an outcome here
                failures.setdefault("error", []).append(f"{case.id}: {type(exc).__name__}: {exc}")
    return failures


def test_correct_kernel_passes_every_check(tmp_path):
    assert run_all(make_spec(tmp_path, "scale")) == {}


@pytest.mark.parametrize("impl, check, fragment", [
    ("scale_off_by_one", "poison", "never written"),
    ("scale_skips_last_row", "poison", "never written"),
    ("scale_assumes_contiguous", "layout", "different result than its contiguous copy"),
    ("scale_writes_input", "inputs", "x is not declared inplace"),
    ("scale_stale_workspace", "determinism", "second run on the same inputs differs"),
    ("scale_nan_on_negative", "nan_inf", "NaN/Inf values where the reference is finite"),
    ("scale_sloppy", "numerics", "outside atol="),
])
def test_planted_bug_is_caught(tmp_path, impl, check, fragment):
    failures = run_all(make_spec(tmp_path, impl))
    assert check in failures, f"{impl}: expected the {check} check to fail, got {sorted(failures)}"
    assert any(fragment in m for m in failures[check]), failures[check][:3]


def test_failure_message_names_errors_seed_and_spec(tmp_path):
    failures = run_all(make_spec(tmp_path, "scale_sloppy"), dtypes=("fp32",))
    message = failures["numerics"][0]
    for fragment in ("max abs err", "max rel err", "elements (", "first bad index", "seed=", "scale.toml",
                     "arch=", "dtype=fp32"):
        assert fragment in message, (fragment, message)


def test_zero_size_crash_is_reported_by_the_zero_size_check(tmp_path):
    failures = run_all(make_spec(tmp_path, "scale_zero_size_crash"))
    assert set(failures) == {"zero-size"} and all("rows=0" in m for m in failures["zero-size"])
    assert all("crashed on 0-size inputs: ZeroDivisionError" in m for m in failures["zero-size"])


def test_a_triton_launch_with_an_empty_grid_is_harmless_and_noted(tmp_path):
    """Triton's launcher returns before the driver sees an empty grid: a note, not a failure."""
    from harness.correctness.args import case_seed
    from harness.correctness.checks import CaseContext, callables, run_checks

    spec = make_spec(tmp_path, "scale_launches_empty_grid")
    assert run_all(spec) == {}
    case = next(c for c in spec.cases["edge"] if "rows=0" in c.id)
    ctx = CaseContext(spec, "triton", "fp32", case, case_seed(spec, "fp32", case), "cpu", "cpu")
    notes = run_checks(ctx, *callables(spec, "triton")).notes
    assert any("with an empty grid (0,): harmless" in n for n in notes), notes


def test_a_waived_zero_size_crash_ends_the_case_with_the_note(tmp_path):
    import dataclasses

    from harness.correctness.args import case_seed
    from harness.correctness.checks import CaseContext, callables, run_checks

    spec = dataclasses.replace(make_spec(tmp_path, "scale_zero_size_crash"),
                               waivers={"zero-size": "refuses empty batches by design"})
    case = next(c for c in spec.cases["edge"] if "rows=0" in c.id)
    ctx = CaseContext(spec, "triton", "fp32", case, case_seed(spec, "fp32", case), "cpu", "cpu")
    outcome = run_checks(ctx, *callables(spec, "triton"))
    assert "zero-size waived: refuses empty batches by design" in outcome.notes and outcome.checks == ["guards"]


def test_contiguous_only_kernel_that_refuses_clearly_passes(tmp_path):
    spec = make_spec(tmp_path, "scale_contiguous_only", layouts="[]")
    assert run_all(spec) == {}


def test_contiguous_only_kernel_that_computes_garbage_fails(tmp_path):
    spec = make_spec(tmp_path, "scale_assumes_contiguous", layouts="[]")
    failures = run_all(spec)
    assert any("must raise a clear error" in m for m in failures["layout"])
