"""The generated backward items against the planted backward bugs of tests/planted/backward_kernels.py
(tests/specs/planted_backward.toml makes each a backend): each is caught by the check that names its cause,
with its message, and the shipped backward passes every item."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from harness.correctness.args import case_seed
from harness.correctness.backward import BackwardContext, run_backward_checks
from harness.correctness.checks import CaseContext
from harness.correctness.registry import CheckFailure
from harness.spec.bind import bind
from harness.spec.imports import use_interpreter_if_no_gpu
from harness.spec.load import load
from harness.target.device import detect
from tests.e2e import REPO

SPEC = REPO / "tests" / "specs" / "planted_backward.toml"


@pytest.fixture(scope="module")
def spec():
    use_interpreter_if_no_gpu()
    return bind(load(SPEC))


def _run(spec, backend: str, mode: str = "kernel", grads: str = "case", tier: str = "ci", layout="contiguous",
         tokens: int = 83):
    case = next(c for c in spec.cases[tier] if c.layout == layout and c.values["tokens"] == tokens)
    device = detect()  # the GPU where there is one: its compiled kernels take no CPU tensors
    ctx = CaseContext(spec, backend, "fp32", case, case_seed(spec, "fp32", case), device.arch, device.torch_device)
    return run_backward_checks(BackwardContext(ctx, mode, grads))


@pytest.mark.parametrize("mode", ["autograd", "kernel"])
@pytest.mark.parametrize("grads", ["case", "expanded"])
def test_the_shipped_backward_passes_every_check(spec, mode, grads):
    outcome = _run(spec, "correct", mode, grads)
    want = ["call", "guards"] + (["poison"] if mode == "kernel" else []) + ["numerics", "inputs", "determinism"]
    assert outcome.checks == want


@pytest.mark.parametrize("backend, tokens, check, message", [
    # 1001 rows: a partial chunk of rows on a GPU too, where each of 83 rows is a chunk of its own
    ("drops_last_partial", 1001, "numerics", r"^numerics: grad_weight: "),
    ("ignores_weight", 83, "numerics", r"^numerics: grad_x: "),
    ("writes_grad_output", 83, "inputs", r"^inputs: grad_out \(the grad output, an input of the backward\) was "
                                         r"changed"),
    ("atomic", 83, "determinism", r"^determinism: grad_weight: a second backward on the same inputs differs in \d+ "
                                  r"elements"),
])
def test_each_planted_backward_is_caught_by_its_check(spec, backend, tokens, check, message):
    with pytest.raises(CheckFailure) as info:
        _run(spec, backend, tokens=tokens)
    assert info.value.check == check
    text = str(info.value)
    assert re.search(message, text), text
    # the context, as the forward's failures end
    assert f"[planted_backward backend={backend} pass=backward(kernel) grads=case dtype=fp32 case=ci:" in text


def test_a_forward_that_returns_differentiable_outputs_is_its_own_autograd(spec):
    """differentiable = true: the forward's impl, called by keyword as the forward is, is checked through autograd."""
    assert spec.backward.backends["differentiable"].keywords
    for grads in ("case", "expanded"):
        outcome = _run(spec, "differentiable", "autograd", grads)
        assert outcome.checks == ["call", "guards", "numerics", "inputs", "determinism"]


@pytest.mark.parametrize("backend, by", [
    ("grad_in_input", "the forward (called on inputs that require grad, before any backward)"),
    ("backward_overwrites_saved", "the backward"),
])
def test_an_input_overwritten_with_its_gradient_names_the_pass_that_wrote_it(spec, backend, by):
    with pytest.raises(CheckFailure) as info:
        _run(spec, backend, "autograd")
    assert info.value.check == "inputs"
    assert str(info.value).startswith(f"inputs: x (an input of the forward, saved for the backward) was changed by "
                                      f"{by} in "), str(info.value)


def test_a_waived_backward_determinism_lets_the_atomic_reduction_pass_with_its_reason(spec):
    import dataclasses

    waived = dataclasses.replace(spec, waivers={"backward.determinism": "atomic dweight, order of the adds"})
    outcome = _run(waived, "atomic")
    assert "determinism" not in outcome.checks
    assert "backward.determinism waived: atomic dweight, order of the adds" in outcome.notes


@pytest.mark.slow
def test_the_generated_items_fail_the_planted_backends_and_pass_the_shipped_one(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(SPEC, specs / SPEC.name)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--specs", str(specs),
                           "--kernel", "planted_backward", "-k", "bwd", "-rf", "--no-header"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    out = proc.stdout
    failed = set(re.findall(r"^FAILED \S+::(planted_backward\[bwd-(\w+)-(\w+)-fp32-[^\]]*\])", out, re.M))
    backends = {b for _, b, _ in failed}
    assert backends == {"drops_last_partial", "ignores_weight", "writes_grad_output", "atomic", "grad_in_input",
                        "backward_overwrites_saved"}, out[-3000:]
    assert not any(b == "correct" for _, b, _ in failed)
    # the zero-size item of a planted backend passes (each falls back to the shipped one at 0 rows)
    assert "planted_backward[bwd-atomic-kernel-fp32-tokens=0,hidden=256]" not in {n for n, _, _ in failed}
    assert "reproduce: python -m pytest '" in out and "planted_backward[bwd-ignores_weight-kernel-fp32-" in out
    assert re.search(r"planted_backward\[bwd-correct-autograd-fp32-tokens=83,hidden=256-expanded\]", out) or \
        " passed" in out
