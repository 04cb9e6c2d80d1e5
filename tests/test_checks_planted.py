"""Planted bugs for the numerics, poison and guards checks (tests/planted/check_kernels.py): each must fail the
generated tests with the right check and message, and the correct kernels must pass."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from harness.correctness.args import case_seed, make_args
from harness.correctness.poison import POISON
from harness.spec.imports import resolve_import
from harness.spec.model import DEFAULT_TOLERANCES, Tolerance
from harness.target.device import detect
from tests.e2e import planted_spec, run_all

SPECS = Path(__file__).resolve().parent / "specs"


def elementwise_only(spec):
    """The spec as the checks saw it before the normwise bound: the default tolerances, norm_rtol off."""
    return dataclasses.replace(spec, tolerances={d: Tolerance(*DEFAULT_TOLERANCES[d], reason="normwise bound off",
                                                              norm_rtol=math.inf) for d in spec.dtypes})


def test_correct_softmax_passes(tmp_path):
    assert run_all(planted_spec(tmp_path, "planted_softmax", "softmax")) == {}


def test_softmax_dropping_a_ragged_block_fails_normwise_in_every_dtype_and_passed_elementwise(tmp_path):
    """The online pass forgets the last, ragged block of a 34000-column row (1232 columns, 3.6% of the
    normaliser): every output is 3.7% high, yet every output is near 3e-5, where atol=1e-5 hides it."""
    spec = planted_spec(tmp_path, "planted_softmax", "softmax_drops_tail")
    failures = run_all(spec, tiers=("ci",))
    assert sorted(failures) == [(d, "numerics") for d in sorted(spec.dtypes)], failures
    for dtype in spec.dtypes:
        (message,) = failures[(dtype, "numerics")]
        assert "rows=2,cols=34000: numerics: out: 2 of 2 rows (last dimension, 34000 elements) over the normwise " \
               "bound: ||got - ref|| / ||ref|| = 0.03" in message, message
        assert "got " in message and "expected " in message and f"dtype={dtype}" in message
    assert run_all(elementwise_only(spec), tiers=("ci",)) == {}  # what the elementwise check alone saw


def test_softmax_dropping_one_element_fails_where_the_dtype_can_tell(tmp_path):
    """One element of 34000 left out of the normaliser moves every output by ~3e-5 relative: 16x the fp32
    bound; in fp16 and bf16 it is below a thirtieth of the outputs' own rounding, which nothing can see."""
    spec = planted_spec(tmp_path, "planted_softmax", "softmax_drops_last")
    failures = run_all(spec, tiers=("ci",))
    assert sorted(failures) == [("fp32", "numerics")], failures
    assert "over the normwise bound" in failures[("fp32", "numerics")][0]
    assert run_all(elementwise_only(spec), tiers=("ci",)) == {}


def test_write_past_a_padded_row_fails_guards(tmp_path):
    failures = run_all(planted_spec(tmp_path, "planted_softmax", "softmax_writes_past_row"), tiers=("edge",))
    assert {check for _, check in failures} == {"guards"}, failures
    messages = [m for (_, check), ms in failures.items() for m in ms]
    padded = [m for m in messages if m.startswith("rows=3,cols=33-padded:")]
    assert len(padded) == 3  # one per dtype
    for m in padded:  # row 0's column 33 is the first padding element
        assert "guards: x: 3 elements outside the tensor written; the first, at element offset 33 (" in m, m
        assert "is in the padding at the end of a row of its padded layout" in m and "instead of the pad pattern" in m
    contiguous = [m for m in messages if m.startswith("rows=3,cols=33:")]
    assert contiguous and all("at element offset 99 (" in m and "in the guard band after the tensor" in m
                              for m in contiguous), contiguous


def test_write_past_the_end_of_a_contiguous_output_fails_guards(tmp_path):
    failures = run_all(planted_spec(tmp_path, "planted_softmax", "softmax_writes_past_end"), tiers=("edge",))
    assert {check for _, check in failures} == {"guards"}, failures
    for (dtype, _), messages in failures.items():
        (m,) = [m for m in messages if m.startswith("rows=3,cols=200:")]
        size = {"fp32": 4, "fp16": 2, "bf16": 2}[dtype]
        assert (f"guards: out: 1 element outside the tensor written; the first, at element offset 600 "
                f"({600 * size} bytes) from its first element, is in the guard band after the tensor") in m, m


def test_copying_past_the_input_end_to_past_the_output_end_fails_guards(tmp_path, monkeypatch):
    # Read one past x's end, write it one past out's end: the bits of x's guard band land in out's. Each
    # tensor has its own pad pattern, so out's band no longer holds its own.
    spec = planted_spec(tmp_path, "planted_softmax", "softmax_copies_past_end")
    failures = run_all(spec, tiers=("edge",))
    assert {check for _, check in failures} == {"guards"}, failures
    for messages in failures.values():
        (m,) = [m for m in messages if m.startswith("rows=3,cols=200:")]
        assert "guards: out: 1 element outside the tensor written; the first, at element offset 600 (" in m, m
    # With one pattern shared by every tensor (how guards worked before), the same kernel went unseen.
    import harness.correctness.args as args_module
    from harness.correctness.poison import PAD

    monkeypatch.setattr(args_module, "pad_pattern", lambda i: PAD)
    assert not any(m.startswith("rows=3,cols=200:") for ms in run_all(spec, tiers=("edge",)).values() for m in ms)


def test_int8_kernel_writing_the_first_poison_passes(tmp_path):
    spec = planted_spec(tmp_path, "planted_quant", "trunc_int8")
    case = spec.cases["ci"][0]
    args = make_args(spec, case, "fp32", detect().torch_device, case_seed(spec, "fp32", case))
    resolve_import(spec.backends["triton"].impl)(**args.kwargs())
    assert (args.tensors["q"] == POISON[0][args.tensors["q"].dtype]).any()  # a value the old sentinel check failed
    assert run_all(spec) == {}


@pytest.mark.parametrize("impl, got_expected", [
    ("trunc_int8_off_by_one", "max abs err 1, "),
    ("trunc_int8_off_by_128", "max abs err 128, "),  # the int8 difference wraps to 0 in int8 arithmetic
])
def test_int8_mismatch_fails_with_index_got_and_expected(tmp_path, impl, got_expected):
    failures = run_all(planted_spec(tmp_path, "planted_quant", impl), tiers=("ci",))
    assert sorted(failures) == [("bf16", "numerics"), ("fp32", "numerics")], failures
    for (message,) in failures.values():
        assert "numerics: q: " in message and "outside atol=0 rtol=0" in message and got_expected in message
        assert "first bad index (" in message and "got " in message and "expected " in message


def test_unwritten_int8_elements_fail_poison_naming_both_sentinels(tmp_path):
    failures = run_all(planted_spec(tmp_path, "planted_quant", "trunc_int8_skips_last"), tiers=("ci",))
    assert sorted(failures) == [("bf16", "poison"), ("fp32", "poison")], failures
    (message,) = failures[("fp32", "poison")]
    assert ("poison: q: 16 of 8192 elements never written: each still held the poison of both runs (first run "
            "-91 (0xA5), second run 90 (0x5A)), first at index (0, 511)") in message, message
