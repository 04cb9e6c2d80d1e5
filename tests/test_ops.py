"""The kernel as a PyTorch op (harness.correctness.ops, opchecks; harness.plugin.op_items): the schema, the
output allocation and the fake derived from the spec, the `[kernel] op` key, and planted bugs each caught by
opcheck's sub-test or the compile check that targets it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from harness.correctness.opchecks import op_cases, run_compile, run_opcheck
from harness.correctness.ops import OpRegistrationError, allocate, op_schema, register
from harness.correctness.registry import CheckFailure
from harness.spec.checks import OP_CHECKS, WAIVABLE
from harness.spec.load import load as load_spec
from harness.spec.schema import SpecError
from harness.target.device import detect

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "tests" / "specs" / "planted_op.toml"
GOOD = "tests.planted.broken_kernels:scale"


def write_planted(directory: Path, impl: str = GOOD, op: str = "", extra: str = "", old: str = "",
                  new: str = "") -> Path:
    text = TEMPLATE.read_text().replace("{impl}", impl).replace("{op}", f'op = "{op}"' if op else "")
    assert old in text
    path = directory / "planted_op.toml"
    path.write_text(text.replace(old, new) + extra if old else text + extra)
    return path


def planted(tmp_path: Path, **kw):
    from harness.spec.bind import bind

    return bind(load_spec(write_planted(tmp_path, **kw)))


def _run(check, spec, backend="triton", dtype="fp32", **kw):
    device = detect()
    return check(spec, backend, dtype, device.arch, device.torch_device, **kw)


# --- the schema, shapes and registration derived from the spec -------------------------------------------

def test_schema_follows_the_spec_inputs_params_inplace_and_outputs():
    schemas = {n: op_schema(load_spec(REPO / "specs" / f"{n}.toml")) for n in
               ("rmsnorm", "fused_add_rmsnorm", "rope", "dynamic_int8_quant", "silu_and_mul")}
    assert schemas == {
        "rmsnorm": "(Tensor x, Tensor weight, float eps) -> Tensor",
        "fused_add_rmsnorm": "(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()",
        "rope": "(Tensor positions, Tensor(a!) query, Tensor(b!) key, Tensor cos_sin_cache, int head_size, "
                "bool is_neox) -> ()",
        "dynamic_int8_quant": "(Tensor x) -> (Tensor, Tensor)",
        "silu_and_mul": "(Tensor x) -> Tensor",
    }


def test_outputs_are_allocated_from_the_input_shapes_solving_linear_dimensions():
    silu = load_spec(REPO / "specs" / "silu_and_mul.toml")
    (out,) = allocate(silu, {"x": torch.empty(3, 14, dtype=torch.bfloat16)}).values()
    assert (tuple(out.shape), out.dtype) == ((3, 7), torch.bfloat16)  # x is [tokens, 2 * d], out [tokens, d]
    quant = load_spec(REPO / "specs" / "dynamic_int8_quant.toml")
    q, scale = allocate(quant, {"x": torch.empty(5, 9, dtype=torch.float16)}).values()
    assert (tuple(q.shape), q.dtype, tuple(scale.shape), scale.dtype) == ((5, 9), torch.int8, (5, 1), torch.float32)
    with pytest.raises(RuntimeError, match="x dimension 1 is 7, not 2 \\* d"):
        allocate(silu, {"x": torch.empty(3, 7)})


def test_registration_is_idempotent_and_a_changed_spec_registers_again(tmp_path):
    spec = planted(tmp_path)
    op = register(spec, "triton")
    assert register(spec, "triton") is op and str(op) == "kernel_harness.planted_op_triton.default"
    changed = planted(tmp_path, impl="tests.planted.op_kernels:scale_writes_x")
    assert register(changed, "triton") is not op


def test_an_output_shape_the_inputs_do_not_determine_is_a_one_line_error(tmp_path):
    spec = planted(tmp_path, old='[outputs.out]\nshape = ["rows", "cols"]',
                   new='[outputs.out]\nshape = ["rows", "cols + pad"]',
                   extra="\n[cases]\nsymbols = { pad = 0 }\n\n[[cases.ci]]\nrows = 4\ncols = 8\npad = 2\n")
    with pytest.raises(OpRegistrationError) as err:
        register(spec, "triton")
    assert str(err.value) == (f"{spec.path}: outputs.out.shape: derived [4, 8] from the input shapes, the case "
                              "rows=4,cols=8,pad=2 says [4, 10]")


def test_op_cases_are_small_contiguous_and_at_least_two_in_every_size(tmp_path):
    assert [c.id for c in op_cases(planted(tmp_path))] == ["rows=5,cols=7", "rows=16,cols=128"]


# --- the checks on correct and planted kernels -------------------------------------------------------------

def test_correct_kernel_passes_opcheck_and_compile_with_one_frame_for_three_sizes(tmp_path):
    spec = planted(tmp_path)
    assert "test_schema, test_autograd_registration, test_faketensor, test_aot_dispatch_dynamic" in \
        _run(run_opcheck, spec)[0]
    (note,) = _run(run_compile, spec, dtype="bf16", compiler="aot_eager")
    assert note.endswith("1 frame for rows = 5, 6, 7"), note


def test_writing_an_input_declared_read_only_fails_opcheck_naming_test_schema(tmp_path):
    spec = planted(tmp_path, impl="tests.planted.op_kernels:scale_writes_x")
    with pytest.raises(CheckFailure) as err:
        _run(run_opcheck, spec)
    lines = str(err.value).splitlines()
    assert lines[0] == "opcheck: test_schema: RuntimeError: Argument x is not defined as mutable but was mutated"
    assert re.fullmatch(r"\[planted_op backend=triton dtype=fp32 case=edge:rows=5,cols=7 seed=\d+ arch=\S+ "
                        r"spec=\S+planted_op\.toml\]", lines[-1]), lines


def test_the_kernels_own_op_is_checked_and_a_wrong_fake_fails_test_faketensor(tmp_path):
    assert _run(run_opcheck, planted(tmp_path, op="tests.planted.op_kernels:scale_op"), backend="op")
    spec = planted(tmp_path, op="tests.planted.op_kernels:scale_op_wrong_fake")
    with pytest.raises(CheckFailure) as err:
        _run(run_opcheck, spec, backend="op")
    first = str(err.value).splitlines()[0]
    assert first.startswith("opcheck: test_faketensor: ") and "test_schema" not in first, first


def test_a_fake_that_specialises_the_size_fails_compile(tmp_path):
    spec = planted(tmp_path, op="tests.planted.op_kernels:scale_op_specialising_fake")
    with pytest.raises(CheckFailure) as err:
        _run(run_compile, spec, backend="op", compiler="aot_eager")
    assert str(err.value).startswith("compile: ConstraintViolationError: "), err.value
    assert "specialized it to be a constant (5)" in str(err.value).splitlines()[0]


def test_a_fake_that_tests_the_size_recompiles_and_fails_compile(tmp_path):
    spec = planted(tmp_path, op="tests.planted.op_kernels:scale_op_branching_fake")
    with pytest.raises(CheckFailure) as err:
        _run(run_compile, spec, backend="op", compiler="aot_eager")
    assert str(err.value).splitlines()[0] == ("compile: compiled 2 frames for 3 sizes of rows (at most 1): the "
                                              "shapes do not stay dynamic"), err.value


# --- the spec key and the catalogue ------------------------------------------------------------------------

@pytest.mark.parametrize("op, says", [
    ("tests.planted.op_kernels", 'kernel.op: expected "package.module:function", got "tests.planted.op_kernels"'),
    ("tests.planted.op_kernels:scale_writes_x", 'kernel.op: "tests.planted.op_kernels:scale_writes_x" is a '
                                                "function, not a torch op"),
    ("tests.planted.op_kernels:nope", "kernel.op: cannot import \"tests.planted.op_kernels:nope\": module "
                                      "'tests.planted.op_kernels' has no attribute 'nope'"),
])
def test_a_bad_kernel_op_is_a_one_line_error_naming_file_and_key(tmp_path, op, says):
    with pytest.raises(SpecError) as err:
        planted(tmp_path, op=op)
    assert [p for p in err.value.problems if "kernel.op" in p] == [p for p in err.value.problems]
    assert err.value.problems[0].startswith(f"{tmp_path / 'planted_op.toml'}: {says}"), err.value.problems


def test_op_checks_are_waivable_catalogue_rows(tmp_path):
    assert {c.name for c in OP_CHECKS} == {"opcheck", "compile"} and {"opcheck", "compile"} <= set(WAIVABLE)
    spec = planted(tmp_path, extra='\n[waive]\ncompile = "the kernel syncs the host, no graph can hold it"\n')
    assert spec.waivers == {"compile": "the kernel syncs the host, no graph can hold it"}


# --- the generated items -----------------------------------------------------------------------------------

def test_items_are_named_per_backend_and_dtype_and_a_failure_names_the_sub_test(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the specs name tests.planted.* kernels
    monkeypatch.setenv("COLUMNS", "400")
    specs = pytester.path / "specs"
    specs.mkdir()
    write_planted(specs, impl="tests.planted.op_kernels:scale_writes_x",
                  extra='\n[waive]\ncompile = "planted: the compile check is waived"\n')
    result = pytester.runpytest_subprocess("--specs", "specs", "-k", "opcheck or compile", "-v", "-rs",
                                           "-p", "no:cacheprovider", timeout=300)
    out = result.stdout.str()
    for backend, dtype, outcome in (("triton", "fp32", "FAILED"), ("triton", "bf16", "FAILED"),
                                    ("reference", "fp32", "PASSED"), ("reference", "bf16", "PASSED")):
        assert re.search(rf"^specs/planted_op\.toml::planted_op\[{backend}-{dtype}-opcheck\] {outcome}", out,
                         re.M), out[-3000:]
    assert re.search(r"^specs/planted_op\.toml::planted_op\[triton-fp32-compile\] SKIPPED", out, re.M)
    assert "compile waived: planted: the compile check is waived" in out
    outcomes = result.parseoutcomes()
    assert {k: outcomes[k] for k in ("failed", "passed", "skipped")} == {"failed": 2, "passed": 2, "skipped": 2}
    assert "opcheck: test_schema: RuntimeError: Argument x is not defined as mutable but was mutated" in out
    assert "[planted_op backend=triton dtype=bf16 case=edge:rows=5,cols=7 seed=" in out
