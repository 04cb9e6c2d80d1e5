"""Outputs declared ``grad = false``: a forward's saved statistics (specs/layernorm.toml's mean and rstd). A
destination-passing forward that writes them wrong is caught; a callable that returns its outputs may leave them
out, and they are then not compared; a spec that makes every output grad = false, or names a grad output of one,
is refused at load."""

from __future__ import annotations

import re

import pytest
import torch

from harness.correctness.args import case_seed
from harness.correctness.checks import CaseContext, run_checks
from harness.correctness.registry import CheckFailure
from harness.spec.bind import bind
from harness.spec.imports import resolve_import, use_interpreter_if_no_gpu
from harness.spec.load import SpecError, load
from kernels.layernorm import layernorm, layernorm_ref
from tests.e2e import REPO

SPEC = REPO / "specs" / "layernorm.toml"


@pytest.fixture(scope="module")
def spec():
    use_interpreter_if_no_gpu()
    return bind(load(SPEC))


def _run(spec, fn):
    case = next(c for c in spec.cases["ci"] if c.layout == "contiguous")
    ctx = CaseContext(spec, "triton", "fp32", case, case_seed(spec, "fp32", case), "cpu", "cpu")
    return run_checks(ctx, fn, resolve_import(spec.reference))


def test_the_shipped_forward_writes_statistics_that_pass_every_check(spec):
    assert "numerics" in _run(spec, layernorm).checks


def _rstd_off(**kw):  # planted: rstd one part in 10^4 too large, the output right
    layernorm(**kw)
    kw["rstd"].mul_(1 + 1e-4)


def _mean_unwritten(**kw):  # planted: the statistics never written
    layernorm(**{**kw, "mean": None, "rstd": None})


@pytest.mark.parametrize("fn, check, message", [
    (_rstd_off, "numerics", r"^numerics: rstd: "),
    (_mean_unwritten, "poison", r"^poison: mean: \d+ of \d+ elements never written"),
])
def test_a_wrong_statistic_is_caught(spec, fn, check, message):
    with pytest.raises(CheckFailure) as info:
        _run(spec, fn)
    assert info.value.check == check
    assert re.search(message, str(info.value)), str(info.value)


def _returns_output_alone(*, x, weight, bias, out, eps, has_bias, mean, rstd):
    y = torch.empty_like(out)
    layernorm_ref(x=x, weight=weight, bias=bias, out=y, eps=eps, has_bias=has_bias)
    return y


def _returns_wrong_output(**kw):  # planted: the statistics left out, the output wrong
    y = _returns_output_alone(**kw)
    return y * (1 + 1e-3)


def test_a_call_returning_its_output_alone_is_checked_on_that_output(spec):
    assert "numerics" in _run(spec, _returns_output_alone).checks
    with pytest.raises(CheckFailure, match=r"^numerics: out: "):
        _run(spec, _returns_wrong_output)


def test_a_call_returning_one_statistic_of_two_is_an_error(spec):
    def half(**kw):
        return _returns_output_alone(**kw), kw["mean"]

    with pytest.raises(Exception, match=r"returned 2 outputs; layernorm writes out, mean, rstd \(or out alone\)"):
        _run(spec, half)


def _problems(tmp_path, old: str, new: str) -> str:
    text = SPEC.read_text()
    assert old in text
    path = tmp_path / "layernorm.toml"
    path.write_text(text.replace(old, new))
    with pytest.raises(SpecError) as info:
        load(path)
    return str(info.value)


def test_every_output_grad_false_is_refused(tmp_path):
    text = _problems(tmp_path, '[outputs.out]\nshape = ["tokens", "hidden"]\n',
                     '[outputs.out]\nshape = ["tokens", "hidden"]\ngrad = false\n')
    assert "backward: every output is grad = false" in text


def test_grad_is_not_a_key_of_an_input(tmp_path):
    weight = '[inputs.weight]\nshape = ["hidden"]\n'
    text = _problems(tmp_path, weight, weight + "grad = false\n")
    assert "inputs.weight" in text and "grad" in text


def test_a_statistic_has_no_gradient_symbol(tmp_path):
    text = _problems(tmp_path, 'write_bytes = "bytes_grad_x + ', 'write_bytes = "bytes_grad_mean + bytes_grad_x + ')
    assert "undefined symbol 'bytes_grad_mean'" in text
