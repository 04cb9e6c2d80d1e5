"""Providers that return their outputs (library peers that allocate) are checked and timed as they are."""

from __future__ import annotations

import pytest

from harness.bench.plan import Job
from harness.bench.run import verify
from harness.correctness.checks import ReferenceCache
from harness.spec.load import load as load_spec
from harness.target.device import detect
from harness.target.providers import Provider
from tests.e2e import write_spec

KERNELS = "tests.planted.broken_kernels:"


@pytest.fixture
def spec(tmp_path):
    return load_spec(write_spec(tmp_path, "scale", KERNELS + "scale"))


def _check(spec, impl: str) -> str:
    provider = Provider("peer", "peer", "peer", KERNELS + impl, True)
    case = spec.cases["ci"][0]
    return verify(Job(spec, case, "fp32", provider), provider.load(spec), detect(), ReferenceCache(), 0)


def test_returned_output_is_checked_instead_of_the_untouched_buffer(spec):
    assert _check(spec, "scale_returning") == ""  # `out` still holds its poison: the returned tensor counts


def test_returning_the_wrong_number_or_shape_is_reported(spec):
    with pytest.raises(TypeError, match="returned 2 outputs; scale writes out"):
        _check(spec, "scale_returning_two")
    assert _check(spec, "scale_returning_wrong") == "numerics: out: returned (16, 127), expected shape (16, 128)"


def test_writing_into_out_still_works_and_is_still_poison_checked(spec):
    assert _check(spec, "scale") == ""
    assert "elements never written" in _check(spec, "scale_skips_last_row")
