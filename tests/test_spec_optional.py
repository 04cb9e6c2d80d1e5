"""The spec language's string literals, optional tensors and params (`present`) and whole-shape expressions,
on tests/specs/planted_optional.toml: validation (one line per problem, nothing imported), the arguments and
roofline of an absent tensor, the op's schema and checks, the matrix's launch records, and the generated tests
passing with the correct kernel and failing with each planted one."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.cli.main import main
from harness.spec import expr as ex
from harness.spec.load import load
from tests.e2e import REPO, fp32_items, outcomes, run_all

TEMPLATE = REPO / "tests" / "specs" / "planted_optional.toml"
MOD = "tests.planted.optional_kernels"


def write(directory: Path, impl: str = "loss", old: str = "", new: str = "") -> Path:
    text = TEMPLATE.read_text().replace("{impl}", f"{MOD}:{impl}")
    assert old in text, old
    path = directory / "planted_optional.toml"
    path.write_text(text.replace(old, new, 1) if old else text)
    return path


def spec_of(tmp_path: Path, impl: str = "loss"):
    return load(write(tmp_path, impl))


def case(spec, case_id: str):
    return next(c for cases in spec.cases.values() for c in cases if c.id == case_id)


# --- expressions ---------------------------------------------------------------------------------------------

def test_string_literals_are_compared_but_take_no_arithmetic():
    assert ex.parse("reduction == 'none'")({"reduction": "none"}) is True
    assert ex.parse("1 if mode != 'gemma' else 2")({"mode": "gemma"}) == 2
    assert ex.parse("'llama'")({}) == "llama"
    for source in ("'a' * 1000000000", "'%s' % rows", "rows + 'x'", "-'none'"):
        with pytest.raises(ex.ExprError, match="strings can only be compared|bad operand type"):
            ex.parse(source)({"rows": 3})


def test_list_literals_only_where_a_whole_shape_is_evaluated():
    shape = ex.parse("[BT, V] if reduction == 'none' else []", lists=True)
    assert shape({"BT": 3, "V": 5, "reduction": "none"}) == [3, 5]
    assert shape({"BT": 3, "V": 5, "reduction": "sum"}) == []
    assert ex.parse("[B] + ([H] if heads else [])", lists=True)({"B": 2, "H": 4, "heads": True}) == [2, 4]
    with pytest.raises(ex.ExprError, match="a list is allowed only as a whole shape"):
        ex.parse("[BT]")
    with pytest.raises(ex.ExprError, match="lists only concatenated with \\+"):
        ex.parse("[1] * 1000000000", lists=True)({})


# --- the model and the arguments ------------------------------------------------------------------------------

def test_the_spec_loads_its_optional_arguments_and_case_dependent_shape(tmp_path):
    spec = spec_of(tmp_path)
    w = next(t for t in spec.tensors if t.name == "w")
    loss = next(t for t in spec.tensors if t.name == "loss")
    assert w.present.source == "affine" and loss.shape == () and spec.param_present["scale"].source == "scale > 0"
    plain, none = spec.env(case(spec, "rows=5,cols=33")), spec.env(case(spec, "rows=5,cols=33,reduction=none"))
    assert loss.dims(plain) == () and loss.dims(none) == (5, 33)
    bare = spec.env(case(spec, "rows=5,cols=33,affine=false"))
    assert [t.name for t in spec.present(bare)] == ["x", "loss"]
    assert spec.param_values(plain) == {"reduction": "mean", "scale": None}
    assert spec.param_values(spec.env(case(spec, "rows=5,cols=33,scale=0.5")))["scale"] == 0.5


def test_an_absent_tensor_is_passed_as_none_and_nothing_else_touches_it(tmp_path):
    from harness.correctness.args import clone_args, full_env, make_args, meta_args, reference_args

    spec = spec_of(tmp_path)
    bare = case(spec, "rows=5,cols=33,affine=false")
    args = make_args(spec, bare, "bf16", "cpu", 3)
    assert set(args.tensors) == set(args.guards) == {"x", "loss"} and args.absent == ("w",)
    assert args.kwargs()["w"] is None and args.kwargs()["scale"] is None
    for copy in (clone_args(args), reference_args(spec, args, "bf16")):
        assert copy.absent == ("w",) and copy.kwargs()["w"] is None
    assert meta_args(spec, bare, "bf16")["w"] is None
    env = full_env(spec, bare, "bf16")
    assert (env["bytes_w"], env["numel_w"], env["bytes_x"]) == (0, 0, 5 * 33 * 2)
    assert spec.roofline.read_bytes(env) == 5 * 33 * 2
    assert full_env(spec, case(spec, "rows=5,cols=33"), "bf16")["bytes_w"] == 33 * 2


def test_loading_the_spec_imports_no_kernel_torch_or_triton(tmp_path):
    probe = ("import sys\nfrom harness.spec.load import load\n"
             f"spec = load({str(write(tmp_path))!r})\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'numpy', 'tests')))\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


# --- validation: one line per problem -------------------------------------------------------------------------

BAD = [
    ('present = "affine"', 'present = 3', 'inputs.w.present: expected a boolean or a string, got 3'),
    ('present = "affine"', 'present = "affine +"', "inputs.w.present: bad expression"),
    ('present = "affine"', 'present = "afine"', "inputs.w.present: undefined symbol 'afine' (did you mean 'affine'?)"),
    ('present = "affine"', 'present = "cols"',
     "inputs.w.present: 'cols' = 33 at case rows=5,cols=33: must be true or false"),
    ('present = "scale > 0"', 'present = "scale"',
     "params.scale.present: 'scale' = 0.0 at case rows=5,cols=33: must be true or false"),
    ('present = "scale > 0"', 'present = 1', "params.scale.present: expected a boolean or a string, got 1"),
    ('shape = "[rows, cols]', 'present = true\nshape = "[rows, cols]', "outputs.loss.present: unknown key"),
    ('shape = "[rows, cols] if reduction == \'none\' else []"', 'shape = "rows"',
     "outputs.loss.shape: 'rows': a shape must be a list of dimensions, got 5 (case rows=5,cols=33)"),
    ('shape = "[rows, cols] if reduction == \'none\' else []"', 'shape = "[rows, cols"',
     "outputs.loss.shape: bad expression: cannot parse"),
    ('[inputs.x]\nshape = ["rows", "cols"]', '[inputs.x]\nshape = "[rows, cols]"',
     "inputs.x.shape: expected a list of dimensions: a whole-shape expression is for outputs"),
    ('reduction = { expr = "reduction" }', 'reduction = { expr = "[reduction]" }',
     "params.reduction.expr: bad expression: '[reduction]': a list is allowed only as a whole shape"),
    ('symbols = { affine = true, scale = 0.0, reduction = "\'mean\'" }',
     'symbols = { affine = true, scale = 0.0, reduction = "mean" }',
     "cases.symbols.reduction: undefined symbol 'mean' (a string is written as a literal: \"'mean'\")"),
]


@pytest.mark.parametrize("old, new, expected", BAD, ids=[b[2][:48] for b in BAD])
def test_a_bad_new_key_is_one_line_naming_file_and_key(tmp_path, capsys, old, new, expected):
    path = write(tmp_path, old=old, new=new)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"{path}: ") and expected in err[0], err[0]


def test_a_string_symbol_in_arithmetic_is_a_problem_at_each_case(tmp_path, capsys):
    path = write(tmp_path, old='scale = { expr = "scale", present = "scale > 0" }',
                 new='scale = { expr = "scale * reduction" }')
    (tmp_path / "as_is").mkdir()
    spec_cases = len(load(write(tmp_path / "as_is")).cases["edge"]) + 1  # the edge cases and the ci case
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == spec_cases, err
    assert all(line.endswith("'scale * reduction': arithmetic on " + line.split("arithmetic on ")[1]) and
               "strings can only be compared" in line for line in err), err


# --- the op: Tensor?, float?, a 0-d or 2-d output ---------------------------------------------------------------

def test_the_op_schema_marks_the_optional_arguments_and_the_op_takes_none(tmp_path):
    from harness.correctness.ops import op_schema, register

    spec = spec_of(tmp_path)
    assert op_schema(spec) == "(Tensor x, Tensor? w, str reduction, float? scale) -> Tensor"
    op = register(spec, "triton")
    x = torch.rand(3, 4) + 0.5
    assert torch.allclose(op(x, None, "sum", None), x.sum()) and op(x, None, "sum", None).dim() == 0
    w = torch.rand(4)
    assert torch.allclose(op(x, w, "none", 2.0), x * w * 2)


def test_opcheck_and_compile_pass_with_optional_arguments(tmp_path):
    from harness.correctness.opchecks import op_cases, run_compile, run_opcheck
    from harness.target.device import detect

    spec = spec_of(tmp_path)
    device = detect()
    assert [c.id for c in op_cases(spec)] == ["rows=5,cols=7", "rows=16,cols=128"]
    assert run_opcheck(spec, "triton", "fp32", device.arch, device.torch_device)
    (note,) = run_compile(spec, "triton", "fp32", device.arch, device.torch_device, compiler="aot_eager")
    assert note.endswith("1 frame for rows = 5, 6, 7"), note


def test_the_matrix_records_the_launches_with_and_without_the_optional_tensor(tmp_path):
    from harness.aot.workflow import triton_launches
    from harness.correctness.args import meta_args

    spec = spec_of(tmp_path)
    records, errors = triton_launches(spec, spec.backends["triton"], meta_args)
    assert errors == []
    assert {r.constexprs["HAS_W"] for r in records} == {True, False}


def test_the_benchmarks_timed_re_check_leaves_an_absent_tensor_alone(tmp_path):
    """bench re-checks timed calls, some on new input values written into the same buffers: an absent input has
    no buffer to write."""
    import functools

    from harness.bench.recheck import ProbedCheck
    from harness.correctness.args import clone_args, make_args, reference_args
    from harness.correctness.checks import TimedCheck
    from tests.planted.optional_kernels import loss, loss_ref

    spec = spec_of(tmp_path)
    bare = case(spec, "rows=5,cols=33,affine=false")
    args = make_args(spec, bare, "fp32", "cpu", 1)
    ref_args = reference_args(spec, clone_args(args), "fp32")
    loss_ref(**ref_args.kwargs())
    check = ProbedCheck(TimedCheck(spec, "fp32", bare, args, {"loss": ref_args.tensors["loss"]}), loss_ref, "cpu", 1)
    call = check.wrap(functools.partial(loss, **args.kwargs()))
    for _ in range(4):
        check.before()
        call()
        check.verify()
    assert check.probes >= 1


# --- the generated checks ---------------------------------------------------------------------------------------

def _fp32_failures(spec) -> dict[str, set[str]]:
    return {check: {m.split(": ")[0] for m in messages} for (dtype, check), messages in run_all(spec).items()
            if dtype == "fp32"}


def _ids(spec, keep) -> set[str]:
    return {c.id for c in (*spec.cases["edge"], *spec.cases["ci"])
            if keep(spec.env(c), {t.name: t for t in spec.present(spec.env(c))})}


def _sized(env) -> bool:
    return env["rows"] > 0 and env["cols"] > 0


def test_the_correct_kernel_passes_every_generated_check(tmp_path):
    assert run_all(spec_of(tmp_path)) == {}


def test_a_kernel_dropping_the_optional_weight_fails_where_it_is_passed(tmp_path):
    spec = spec_of(tmp_path, "loss_ignores_w")
    assert _fp32_failures(spec) == {"numerics": _ids(spec, lambda env, passed: "w" in passed and _sized(env))}


def test_a_kernel_reading_an_absent_scale_as_zero_fails_where_it_is_absent(tmp_path):
    spec = spec_of(tmp_path, "loss_scale_none_is_zero")
    assert _fp32_failures(spec) == {"numerics": _ids(spec, lambda env, passed: env["scale"] == 0 and _sized(env))}


def test_a_kernel_summing_where_the_string_says_mean_fails_every_mean_case(tmp_path):
    spec = spec_of(tmp_path, "loss_mean_as_sum")
    failed = _fp32_failures(spec)
    assert failed["nan_inf"] == {"rows=0,cols=33"}  # the mean of nothing is NaN, a sum of nothing 0
    assert failed["numerics"] | failed["nan_inf"] == _ids(spec, lambda env, passed: env["reduction"] == "mean")


def test_a_reduced_loss_of_shape_1_fails_where_the_shape_expression_says_0_d(tmp_path):
    spec = spec_of(tmp_path, "loss_reduced_as_1")
    failures = run_all(spec)
    assert {k[1] for k in failures} == {"numerics"}
    messages = failures[("fp32", "numerics")]
    assert {m.split(": ")[0] for m in messages} == _ids(spec, lambda env, passed: env["reduction"] != "none")
    assert "numerics: loss: returned (1,), expected shape ()" in messages[0], messages[0]


@pytest.mark.slow
def test_the_generated_items_pass_with_the_correct_kernel_and_fail_with_a_planted_one(pytester, monkeypatch):
    """Collected by the plugin as any spec is: every case item and the op items pass; the planted kernel's
    failing items are its mean cases."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    specs = pytester.path / "specs"
    specs.mkdir()
    spec = load(write(specs))
    # the triton backend's compile item runs the optional input through torch.compile; the reference's would
    # be a second cold compile of the same op schema
    result = pytester.runpytest_subprocess("--specs", "specs", "--dtype", "fp32", "-p", "no:cacheprovider",
                                           "--deselect", "specs/planted_optional.toml::planted_optional"
                                           "[reference-fp32-compile]", timeout=600)
    assert outcomes(result) == {"passed": fp32_items(spec) - 1, "deselected": 1}, result.stdout.str()[-3000:]
    write(specs, "loss_mean_as_sum")
    result = pytester.runpytest_subprocess("--specs", "specs", "--dtype", "fp32", "-k", "triton and not opcheck "
                                           "and not compile", "-p", "no:cacheprovider", "-rf", timeout=600)
    failed = set(re.findall(r"^FAILED specs/planted_optional\.toml::planted_optional\[triton-fp32-(\S+)\]",
                            result.stdout.str(), re.M))
    assert failed == _ids(spec, lambda env, passed: env["reduction"] == "mean"), result.stdout.str()[-3000:]
