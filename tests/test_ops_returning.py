"""The op a spec derives for a backend that returns its outputs (harness.correctness.ops): it returns what the
backend returned, normalised as the checks read it, so the opcheck and compile items check the backend's
tensors and not the harness's unwritten buffers; an output aliasing an input is cloned, an in-place input
returned as a new tensor is written back; and each compile check compiles afresh."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.correctness.opchecks import run_compile, run_opcheck
from harness.correctness.ops import register
from harness.correctness.registry import CheckFailure
from harness.spec.bind import bind
from harness.spec.load import load as load_spec
from harness.target.device import detect

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "tests" / "specs" / "planted_op.toml"
MOD = "tests.planted.returning_kernels"


def planted(tmp_path: Path, impl: str, name: str = "planted_op", **replace: str):
    """planted_op.toml as kernel ``name`` (an op of another schema needs a name of its own in this process), with
    ``impl`` as its triton backend and each ``replace`` pair (old="a|b", new="c|d") applied."""
    text = TEMPLATE.read_text().replace("{impl}", f"{MOD}:{impl}").replace("{op}", "")
    text = text.replace('name = "planted_op"', f'name = "{name}"')
    for old, new in zip(replace.get("old", "").split("|"), replace.get("new", "").split("|"), strict=True):
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return bind(load_spec(path))


def _run(check, spec, dtype="fp32", **kw):
    device = detect()
    return check(spec, "triton", dtype, device.arch, device.torch_device, **kw)


def _inputs(rows=4, cols=6):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(rows, cols, generator=gen), torch.randn(cols, generator=gen)


def test_the_op_returns_what_the_backend_returned(tmp_path):
    x, w = _inputs()
    got = register(planted(tmp_path, "scale_returns"), "triton")(x, w)
    assert torch.equal(got, x * w * 2)  # not the buffer the op allocated and the backend never wrote


def test_a_correct_returning_backend_passes_opcheck_and_compile(tmp_path):
    spec = planted(tmp_path, "scale_returns")
    assert "test_faketensor, test_aot_dispatch_dynamic on" in _run(run_opcheck, spec)[0]
    (note,) = _run(run_compile, spec, compiler="aot_eager")
    assert note.endswith("1 frame for rows = 5, 6, 7"), note


@pytest.mark.parametrize("impl", ["scale_returns_a_column_short", "scale_returns_fp64"])
def test_a_returned_tensor_unlike_the_spec_fails_opcheck_naming_test_faketensor(tmp_path, impl):
    """Before the op returned what the backend returned, these passed: the op handed out its own buffer, of
    the spec's shape and dtype."""
    with pytest.raises(CheckFailure) as err:
        _run(run_opcheck, planted(tmp_path, impl))
    assert str(err.value).startswith("opcheck: test_faketensor: "), err.value


def test_a_returned_input_is_cloned_so_the_op_never_aliases_its_inputs(tmp_path):
    spec = planted(tmp_path, "scale_returns_x")
    x, w = _inputs()
    got = register(spec, "triton")(x, w)
    assert torch.equal(got, x) and got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert _run(run_opcheck, spec)  # custom_op's no-alias rule would fail every sub-test


def test_an_in_place_input_returned_as_a_new_tensor_is_written_back(tmp_path):
    spec = planted(tmp_path, "double_in_place_returned", name="planted_op_inplace",
                   old='[inputs.x]\nshape = ["rows", "cols"]\n\n[inputs.w]\nshape = ["cols"]\n\n'
                       '[outputs.out]\nshape = ["rows", "cols"]|broken_kernels:scale_ref',
                   new='[inputs.x]\nshape = ["rows", "cols"]\ninplace = true|'
                       'returning_kernels:double_in_place_returned')
    x, _ = _inputs()
    before = x.clone()
    assert register(spec, "triton")(x) is None and torch.equal(x, before * 2)
    assert _run(run_opcheck, spec)
    _run(run_compile, spec, compiler="aot_eager")


def test_the_compile_check_never_reuses_a_graph_compiled_for_the_ops_old_shape(tmp_path):
    """The op keeps its name and schema when its spec changes an output's rank; inductor's caches key a graph by
    its code, so a cached graph would assert the old shape ("wrong number of dimensions")."""
    keepdim = planted(tmp_path, "scale_rows_keepdim", old='[outputs.out]\nshape = ["rows", "cols"]',
                      new='[outputs.out]\nshape = ["rows", 1]')
    _run(run_compile, keepdim)
    rows = planted(tmp_path, "scale_rows", old='[outputs.out]\nshape = ["rows", "cols"]',
                   new='[outputs.out]\nshape = ["rows"]')
    (note,) = _run(run_compile, rows)
    assert note.startswith("compile (inductor, fullgraph) kernel_harness.planted_op_triton.default: 1 frame"), note
