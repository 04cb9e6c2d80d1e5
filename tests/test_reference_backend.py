"""The reference backend is tested where it can fail, and no more: on its own it is the oracle, so only
0-size cases, non-contiguous layouts and its inputs are checked; a spec's independent ``oracle`` makes every
check of every case apply to it. Planted references show each of those checks catching something."""

from __future__ import annotations

import pytest

from harness.correctness.args import case_seed
from harness.correctness.checks import (
    REFERENCE_CHECKS,
    CaseContext,
    CheckFailure,
    callables,
    checks_for,
    reference_can_fail,
    run_checks,
)
from harness.spec.load import load
from tests.e2e import write_spec

PLANTED = "tests.planted.broken_kernels:"


def _spec(tmp_path, reference: str, oracle: str = ""):
    path = write_spec(tmp_path, "scale", PLANTED + "scale")
    text = path.read_text().replace(f'reference = "{PLANTED}scale_ref"', f'reference = "{PLANTED}{reference}"'
                                    + (f'\noracle = "{PLANTED}{oracle}"' if oracle else ""))
    path.write_text(text)
    return load(path)


def _failures(spec, dtype="fp32") -> dict[str, str]:
    """case id -> the failing check, over every case the reference backend is tested at."""
    out = {}
    for case in (*spec.cases["edge"], *spec.cases["ci"]):
        if not reference_can_fail(spec, case):
            continue
        ctx = CaseContext(spec, "reference", dtype, case, case_seed(spec, dtype, case, 0), "cpu", "cpu")
        try:
            run_checks(ctx, *callables(spec, "reference"), only=checks_for(spec, "reference"))
        except CheckFailure as exc:
            out[case.id] = exc.check
        except Exception as exc:  # a crash is what a generated test reports as the kernel's error
            out[case.id] = type(exc).__name__
    return out


def test_without_an_oracle_only_the_cases_and_checks_that_can_fail(tmp_path):
    spec = _spec(tmp_path, "scale_ref")
    cases = (*spec.cases["edge"], *spec.cases["ci"])
    kept = [c for c in cases if reference_can_fail(spec, c)]
    assert checks_for(spec, "reference") == REFERENCE_CHECKS == {"zero-size", "layout", "inputs"}
    assert checks_for(spec, "triton") is None
    assert 0 < len(kept) < len(cases)
    for c in kept:
        env = spec.env(c)
        assert c.layout != "contiguous" or 0 in (env["rows"], env["cols"]), c.id
    assert _failures(spec) == {}


def test_a_reference_that_writes_its_input_or_crashes_at_zero_size_is_caught(tmp_path):
    found = _failures(_spec(tmp_path, "scale_writes_input"))
    assert found and set(found.values()) == {"inputs"}
    crashes = _failures(_spec(tmp_path, "scale_zero_size_crash"))
    assert crashes and all("=0" in case for case in crashes) and set(crashes.values()) == {"zero-size"}


def test_a_wrong_reference_passes_alone_and_fails_against_an_oracle(tmp_path):
    """Without an oracle the reference is its own yardstick (rounding through fp16 is invisible at fp32); with
    one, numerics sees it at every case that has elements."""
    assert _failures(_spec(tmp_path, "scale_sloppy")) == {}
    spec = _spec(tmp_path, "scale_sloppy", oracle="scale_ref")
    assert checks_for(spec, "reference") is None
    found = _failures(spec)
    every = [c.id for c in (*spec.cases["edge"], *spec.cases["ci"])]
    assert set(found.values()) == {"numerics"} and len(found) >= len(every) // 2


@pytest.mark.parametrize("layout", ["strided", "transposed"])
def test_the_reference_is_never_required_to_refuse_a_layout(tmp_path, layout):
    """The spec lists no layouts for the kernel: a backend must refuse them, the plain-torch reference need not."""
    spec = load(write_spec(tmp_path, "scale", PLANTED + "scale", layouts="[]"))
    case = next(c for c in spec.cases["edge"] if c.layout == layout)
    ctx = CaseContext(spec, "reference", "fp32", case, 0, "cpu", "cpu")
    assert run_checks(ctx, *callables(spec, "reference"), only=checks_for(spec, "reference"))
    with pytest.raises(CheckFailure, match="must raise a clear error"):
        run_checks(CaseContext(spec, "triton", "fp32", case, 0, "cpu", "cpu"), *callables(spec, "triton"))
