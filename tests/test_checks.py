"""The check registry and the parts of the checks: numerics bounds, poison patterns, guard bands, value sets,
reference precision. The planted kernels that prove them end to end are in tests/test_checks_planted.py."""

from __future__ import annotations

import dataclasses
import math
import types
from pathlib import Path

import pytest
import torch

import harness.correctness.checks  # noqa: F401 - registers every implementation
from harness.correctness import registry
from harness.correctness.args import case_seed, clone_args, make_args, reference_args, reference_dtype
from harness.correctness.checks import CaseContext, run_checks
from harness.correctness.guards import GUARD_BYTES, _guard_elements, allocate, violation
from harness.correctness.numerics import mismatch
from harness.correctness.poison import PAD, PADS, POISON, bits, poison, poisoned_mask
from harness.correctness.values import value_set
from harness.spec.checks import BY_NAME, CHECKS, markdown_table
from harness.spec.imports import resolve_import
from harness.spec.model import VALUE_SETS, Tolerance
from harness.target.device import detect
from tests.e2e import make_spec

CHECKS_DOC = Path(__file__).resolve().parents[1] / "docs" / "checks.md"
FLOATS = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


# --- the registry --------------------------------------------------------------------------------------

def test_every_row_has_one_implementation_and_every_implementation_a_row():
    assert set(registry.implementations()) == set(BY_NAME)
    assert [c.name for c, _ in registry.in_order()] == [c.name for c in sorted(CHECKS, key=lambda c: c.order)]
    assert len({c.order for c in CHECKS}) == len(CHECKS)


def test_registering_an_unknown_or_second_implementation_is_an_error():
    with pytest.raises(ValueError, match="no check 'speed'"):
        registry.check("speed")
    with pytest.raises(ValueError, match="implemented twice"):
        registry.check("poison")(lambda run: None)


def _impostor(first):
    def impostor(run):  # a pull request's function dressed as the harness's own
        return None
    impostor.__module__, impostor.__qualname__ = first.__module__, first.__qualname__
    return impostor


def test_the_same_function_of_a_module_imported_again_replaces_the_first():
    first, reads = registry.implementations()["poison"], registry._READS["poison"]

    # what importing first's module a second time makes: another function object of the same code
    again = types.FunctionType(first.__code__, first.__globals__, first.__name__, first.__defaults__,
                               first.__closure__)
    again.__qualname__ = first.__qualname__
    impostor = _impostor(first)
    with pytest.raises(ValueError, match="implemented twice"):  # the same names from another file
        registry.check("poison", reads=tuple(reads))(impostor)
    try:
        assert registry.check("poison", reads=tuple(reads))(again) is again
        assert registry.implementations()["poison"] is again
    finally:
        registry.check("poison", reads=tuple(reads))(first)
    assert registry.implementations()["poison"] is first and registry._READS["poison"] == reads


def test_docs_check_table_is_the_rendered_catalogue():
    text = CHECKS_DOC.read_text()
    section = text[text.index("\n## The checks\n"):]
    section = section[:section.index("\n## ", 1)]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    assert table == markdown_table(), "docs/checks.md: stale check table: paste harness.spec.checks.markdown_table()"


def _run(spec, dtype="fp32", tier="ci"):
    device = detect()
    case = spec.cases[tier][0]
    ctx = CaseContext(spec, "triton", dtype, case, case_seed(spec, dtype, case), device.arch, device.torch_device)
    return run_checks(ctx, resolve_import(spec.backends["triton"].impl), resolve_import(spec.reference))


def test_runner_runs_the_rows_in_order_and_skips_a_waived_one_with_a_note(tmp_path):
    spec = make_spec(tmp_path, "scale")
    outcome = _run(spec)
    rows = ["guards", "poison", "nan_inf", "numerics", "inputs", "determinism", "stale"]
    if detect().is_gpu:
        assert outcome.checks == rows + ["stream", "graph"]
    else:
        assert outcome.checks == rows
        assert {"stream: needs a CUDA device (skipped on cpu)", "graph: needs a CUDA device (skipped on cpu)"} <= \
            set(outcome.notes)  # the GPU-only checks are skipped on a CPU with the reason
    waived = dataclasses.replace(spec, waivers={"determinism": "atomics"})
    outcome = _run(waived)
    assert "determinism" not in outcome.checks and "determinism waived: atomics" in outcome.notes


def test_runner_drops_each_call_s_results_once_no_later_check_reads_them(tmp_path, monkeypatch):
    # What a huge case holds at each check: layernorm fp32 at 2**31 elements ran out of memory in the graph check
    # on the H200 while the contiguous copy's, the second run's and the reference's results were all still held.
    spec = make_spec(tmp_path, "scale")
    case = next(c for c in spec.cases["edge"] if c.layout != "contiguous" and 0 not in c.values.values())
    held = {}
    for name in ("stale", "stream", "graph"):
        real = registry._IMPLEMENTATIONS[name]

        def spy(run, name=name, real=real):
            held[name] = set(run.__dict__) & set(run.RESULTS)
            return real(run)
        monkeypatch.setitem(registry._IMPLEMENTATIONS, name, spy)
    ctx = CaseContext(spec, "triton", "fp32", case, 0, "cpu", "cpu")
    outcome = run_checks(ctx, resolve_import(spec.backends["triton"].impl), resolve_import(spec.reference))
    assert {"layout", "determinism", "numerics", "stale"} <= set(outcome.checks)
    assert held == {"stale": {"ref", "second", "second_args"}, "stream": {"ref"}, "graph": set()}


# --- numerics ------------------------------------------------------------------------------------------

EXACT = Tolerance(0.0, 0.0)


@pytest.mark.parametrize("dtype", INTS)
def test_integer_mismatch_is_computed_wide(dtype):
    expected = torch.tensor([[5, 7], [9, 11]], dtype=dtype)
    assert mismatch(expected.clone(), expected, EXACT) is None
    off = expected.clone()
    off[1, 0] += 1
    assert mismatch(off, expected, EXACT).endswith("first bad index (1, 0): got 10, expected 9")
    wrapped = (expected.to(torch.int64) + 128).to(dtype) if dtype == torch.int8 else expected + 128
    problem = mismatch(wrapped, expected, EXACT)
    assert "4 of 4 elements (100%) outside atol=0 rtol=0" in problem and "max abs err 128" in problem


def test_int64_difference_that_overflows_is_a_mismatch():
    big = torch.tensor([torch.iinfo(torch.int64).max, 0])
    small = torch.tensor([torch.iinfo(torch.int64).min, 0])
    assert "max abs err inf" in mismatch(big, small, EXACT)


def test_mismatch_budget():
    expected = torch.zeros(1000, dtype=torch.int8)
    budget = Tolerance(0.0, 0.0, "ties", max_mismatch=0.002, mismatch_atol=1.0)
    got = expected.clone()
    got[[3, 500]] = 1
    assert mismatch(got, expected, budget) is None  # 2 elements, off by one: within the budget
    got[7] = -1
    problem = mismatch(got, expected, budget)
    assert ("3 of 1000 elements (0.3%) outside atol=0 rtol=0; the mismatch budget allows 2 (0.002 of the "
            "elements), each at most 1 beyond that bound: 3 within it, 0 beyond it") in problem
    assert problem.endswith("first bad index (3,): got 1, expected 0")
    got = expected.clone()
    got[900] = 2  # one element, but beyond mismatch_atol: fails regardless
    problem = mismatch(got, expected, budget)
    assert "1 within it" not in problem and "0 within it, 1 beyond it" in problem
    assert problem.endswith("first index beyond the budget's bound (900,): got 2, expected 0")


def test_normwise_bound_fails_where_atol_hides_a_relative_error():
    expected = torch.full((4, 34000), 1 / 34000, dtype=torch.float64)
    got = (expected * (1 + 1e-3)).to(torch.float32)
    tol = Tolerance(1.3e-6, 1e-5)
    assert mismatch(got, expected, dataclasses.replace(tol, norm_rtol=math.inf)) is None  # elementwise: fine
    problem = mismatch(got, expected, tol)
    assert problem.startswith("4 of 4 rows (last dimension, 34000 elements) over the normwise bound: "
                              "||got - ref|| / ||ref|| = 0.001 > norm_rtol=1.907e-06, the float32 default in row (0,)")
    assert problem.endswith("its largest error at index (0, 0): got 2.944118e-05, expected 2.941176e-05")


@pytest.mark.parametrize("dtype,units", [(torch.float64, 16), (torch.float32, 16), (torch.float16, 2),
                                         (torch.bfloat16, 2)], ids=["fp64", "fp32", "fp16", "bf16"])
def test_normwise_defaults_are_a_few_units_of_the_dtype(dtype, units):
    # Rows of ones, every element off by d ulps of the result's dtype (1 + d eps is exact in it): the normwise
    # relative error is d units. atol = 1 lets every element through, so the default normwise bound alone judges:
    # half of it passes, one and a half times it fails, and the message names that dtype's default.
    eps = torch.finfo(dtype).eps
    expected = torch.ones(3, 64, dtype=torch.float64)
    loose = Tolerance(rtol=0.0, atol=1.0)
    assert mismatch((expected + units // 2 * eps).to(dtype), expected, loose) is None
    problem = mismatch((expected + (units + units // 2) * eps).to(dtype), expected, loose)
    name = str(dtype).removeprefix("torch.")
    assert problem is not None and problem.startswith("3 of 3 rows (last dimension, 64 elements) over the normwise")
    assert f"= {1.5 * units * eps:.4g} > norm_rtol={units * eps:.4g}, the {name} default in row (0,)" in problem


def test_normwise_rounding_alone_passes_even_in_subnormals():
    torch.manual_seed(0)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for n in (1, 2, 7, 4096, 262144):  # fp16 softmax outputs of 2**18 columns are subnormal
            expected = torch.softmax(torch.randn(3, n, dtype=torch.float64), -1)
            assert mismatch(expected.to(dtype), expected, Tolerance(1.6e-2, 1e-5)) is None, (dtype, n)


def test_zero_reference_rows_and_matching_non_finite_values_are_left_alone():
    expected = torch.tensor([[0.0, 0.0], [1.0, float("nan")], [float("inf"), 2.0]], dtype=torch.float64)
    got = torch.tensor([[1e-9, 0.0], [1.0, float("nan")], [float("inf"), 2.0]])
    assert mismatch(got, expected, Tolerance(1.3e-6, 1e-5)) is None
    got[2, 0] = -math.inf
    assert mismatch(got, expected, Tolerance(1.3e-6, 1e-5)).endswith("first bad index (2, 0): got -inf, expected inf")


def test_a_reference_past_the_result_dtypes_range_expects_its_infinity():
    """An fp16 sum of half a million broadcast grad outputs is -972015 in fp32 and -inf in fp16 (the H200's
    layernorm dbias): the kernel's -inf is right, a finite value there is wrong, and a -inf where the reference
    fits the range is still caught."""
    expected = torch.tensor([[-972015.0, 3.0, 70000.0]], dtype=torch.float64)
    got = torch.tensor([[-math.inf, 3.0, math.inf]], dtype=torch.float16)
    assert mismatch(got, expected, Tolerance(1e-3, 1e-5)) is None
    finite = got.clone()
    finite[0, 0] = -65504.0
    assert "first bad index (0, 0): got -65504, expected -inf" in mismatch(finite, expected, Tolerance(1e-3, 1e-5))
    wrong = got.clone()
    wrong[0, 1] = math.inf
    assert mismatch(wrong, expected, Tolerance(1e-3, 1e-5)) is not None


# --- poison and guards ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS + INTS + (torch.bool,))
def test_poisons_and_pad_are_distinct_and_survive(dtype):
    x = torch.empty(5, dtype=dtype)
    for which in (0, 1):
        poison(x, which)
        assert poisoned_mask(x, which).all() and not poisoned_mask(x, 1 - which).any()
        if dtype.is_floating_point:  # quiet NaNs: the mantissa's top bit set, so no conversion changes them
            assert torch.isnan(x).all()
            quiet_bit = {torch.float64: 51, torch.float32: 22, torch.float16: 9, torch.bfloat16: 6}[dtype]
            assert all(p[dtype] >> quiet_bit & 1 for p in (*POISON, *PADS))
            canonical = {torch.float64: (0x7FF8000000000000, 0x7FFFFFFFFFFFFFFF),
                         torch.float32: (0x7FC00000, 0x7FFFFFFF), torch.float16: (0x7E00, 0x7FFF),
                         torch.bfloat16: (0x7FC0, 0x7FFF)}[dtype]
            assert not {p[dtype] for p in PADS} & set(canonical)  # arithmetic's own NaNs never look like a pad
    if dtype != torch.bool:
        assert PAD == PADS[0]
        assert len({POISON[0][dtype], POISON[1][dtype], *(p[dtype] for p in PADS)}) == 2 + len(PADS)


@pytest.mark.parametrize("layout", ["contiguous", "padded", "strided", "transposed"])
def test_guarded_tensor_is_aligned_laid_out_and_watched(layout):
    view, guard = allocate((5, 33), torch.float32, "cpu", layout)
    assert view.data_ptr() % 64 == 0 and guard.layout == layout
    assert view.is_contiguous() == (layout == "contiguous")
    view.fill_(1.0)
    assert violation("x", guard) is None
    storage = guard.base[guard.offset:]
    storage[guard.span] = 2.0  # one element past the end
    assert violation("x", guard).startswith("x: 1 element outside the tensor written; the first, at element offset "
                                            f"{guard.span} ({4 * guard.span} bytes) from its first element, is in "
                                            "the guard band after the tensor")
    guard.base[guard.offset - 2] = 3.0
    assert "the first, at element offset -2 (-8 bytes) from its first element, is in the guard band before" in \
        violation("x", guard)


def test_no_guard_bands_under_compute_sanitizer(monkeypatch):
    """harness sanitize turns the CUDA caching allocator off so memcheck sees each tensor's ends: a guard band
    would hide a one-element overread from it."""
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    assert _guard_elements(torch.float32, "cuda:0") == 0
    assert _guard_elements(torch.float32, "cpu") == GUARD_BYTES // 4
    monkeypatch.delenv("PYTORCH_NO_CUDA_MEMORY_CACHING")
    assert _guard_elements(torch.bfloat16, "cuda:0") == GUARD_BYTES // 2


def test_padding_write_is_reported_at_its_offset():
    view, guard = allocate((4, 10), torch.int8, "cpu", "strided")
    guard.base[guard.offset + 2 * 10 + 5] = 0  # row 1, the gap after its element 2
    assert ("at element offset 25 (25 bytes) from its first element, is in a gap between two elements of a row of "
            "its strided layout (its storage: offsets 0..79) and holds 0 (0x00) instead of the pad pattern "
            "-61 (0xC3)") in violation("q", guard)


def test_copies_keep_layouts_and_get_their_own_guards(tmp_path):
    spec = make_spec(tmp_path, "scale")
    case = next(c for c in spec.cases["edge"] if c.layout == "padded")
    args = make_args(spec, case, "bf16", "cpu", 1)
    copy = clone_args(args)
    for name, x in args.tensors.items():
        assert copy.tensors[name].stride() == x.stride() and torch.equal(bits(copy.tensors[name]), bits(x))
        assert copy.guards[name].base.data_ptr() != args.guards[name].base.data_ptr()
    assert all(t.is_contiguous() for t in clone_args(args, layout="contiguous").tensors.values())


# --- value sets and reference precision ---------------------------------------------------------------

def _input(tmp_path):
    spec = make_spec(tmp_path, "scale")
    return next(t for t in spec.tensors if t.name == "x"), spec


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_value_sets_are_what_their_descriptions_say(tmp_path, name, dtype):
    t, _ = _input(tmp_path)
    base = torch.randn(7, 300, generator=torch.Generator().manual_seed(0)).to(dtype)
    x = value_set(name, t, base, {}, 123)
    assert torch.equal(x, value_set(name, t, base, {}, 123)) and x.dtype == dtype and x.shape == base.shape
    assert not torch.equal(x, value_set(name, t, base, {}, 124)) or name == "zero_rows"
    x64 = x.to(torch.float64)
    if name == "zero_rows":
        assert (x64[0::3] == 0).all() and (x64[1::3] != 0).any() and torch.equal(x[1::3], base[1::3])
    elif name == "ties":
        assert (x64.abs() <= 127).all() and (x64.abs().amax(-1) == 127).all()
        assert ((x64 * 2) % 2 == 1).sum() == x.numel() - 7  # half-integers, but the one 127 of each row
    elif name == "outliers":
        assert ((x64.abs() - 100).abs() < 1e-6 * 100 + 1).sum() >= x.numel() // 64
        assert (x64.abs() > 50).sum() == x.numel() // 64
    elif name == "large":
        scale = 1e2 if dtype == torch.float16 else 1e4
        assert torch.isfinite(x64).all() and 0.5 * scale < float(x64.std()) < 2 * scale


def test_a_value_set_replaces_only_the_inputs_that_list_it(tmp_path):
    _, spec = _input(tmp_path)
    tensors = tuple(dataclasses.replace(t, specials=("ties",)) if t.name == "x" else t for t in spec.tensors)
    spec = dataclasses.replace(spec, tensors=tensors)
    case = spec.cases["ci"][0]
    plain = make_args(spec, case, "fp32", "cpu", 5)
    ties = make_args(spec, dataclasses.replace(case, value_set="ties"), "fp32", "cpu", 5)
    assert torch.equal(plain.tensors["w"], ties.tensors["w"])
    assert (ties.tensors["x"].abs().amax(-1) == 127).all()


@pytest.mark.parametrize("precision, case_dtype, dtype, expected", [
    ("upcast", "bf16", torch.bfloat16, torch.float32), ("upcast", "fp32", torch.float32, torch.float64),
    ("upcast", "bf16", torch.float32, torch.float32), ("upcast", "fp64", torch.float64, torch.float64),
    ("input", "bf16", torch.bfloat16, torch.bfloat16), ("input", "bf16", torch.float32, torch.float32),
    ("fp64", "fp16", torch.float16, torch.float64), ("fp32", "fp32", torch.float32, torch.float32),
    ("upcast", "bf16", torch.int8, torch.int8), ("fp64", "fp32", torch.int64, torch.int64),
])
def test_reference_dtype(precision, case_dtype, dtype, expected):
    assert reference_dtype(dtype, case_dtype, precision) == expected


def test_reference_runs_at_the_spec_precision_in_checks_and_bench(tmp_path):
    from harness.correctness.checks import CaseContext, CaseRun, ReferenceCache, callables

    spec = dataclasses.replace(make_spec(tmp_path, "scale"), reference_precision="input")
    case = spec.cases["ci"][0]
    args = make_args(spec, case, "bf16", "cpu", 0)
    assert {x.dtype for x in reference_args(spec, args, "bf16").tensors.values()} == {torch.bfloat16}

    def ref_dtype(s, cache=None):
        ctx = CaseContext(s, "reference", "bf16", case, 0, "cpu", "cpu")
        return CaseRun(ctx, *callables(s, "reference"), cache).ref["out"].dtype

    assert ref_dtype(spec) == torch.bfloat16
    upcast = dataclasses.replace(spec, reference_precision="upcast")
    cache = ReferenceCache()  # bench's path: one reference call shared by a case's providers
    assert ref_dtype(upcast, cache) == torch.float32 == ref_dtype(upcast, cache)

