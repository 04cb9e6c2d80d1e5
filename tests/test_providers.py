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


def test_torch_compile_is_compiled_afresh_for_each_job_past_dynamo_s_recompile_limit(monkeypatch):
    """Dynamo runs a code object eagerly once it has 8 guards, with only a warning: the 9th shape of one
    reference (or the 9th case through the backward's one wrapper) was timed eager and called torch.compile.
    Each job's compile starts from an empty cache; with the old shared cache the count stops at 8."""
    import torch

    from harness.target.providers import compiled

    monkeypatch.setattr(torch._dynamo.config, "fail_on_recompile_limit_hit", False)  # restored after the test
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def reference(x):  # one code object, as a spec's reference is
        return (x * 2).sin()

    for n in range(2, 13):
        fn = compiled(reference, backend=counting)
        assert torch.allclose(fn(torch.ones(n)), torch.ones(n).mul(2).sin())
    assert len(graphs) == 11
    assert torch._dynamo.config.fail_on_recompile_limit_hit  # a limit hit within one job raises, never runs eager
    torch._dynamo.reset()
