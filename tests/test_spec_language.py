"""The spec language's newer keys: per-tensor tolerances with a mismatch budget, reference precision, input value
sets, the gate rule, generated crossings, and `validate` checking each implementation's keyword parameters."""

from __future__ import annotations

import textwrap

import pytest

from harness.cli.main import main
from harness.spec.load import load
from harness.spec.model import LAYOUTS

BASE = """\
[kernel]
name = "quant"
summary = "toy quantiser"
reference = "tests.planted.spec_kernels:quant_ref"
dtypes = ["fp32", "bf16"]
layouts = ["padded", "strided", "transposed"]
fallback = ["reference"]

[inputs.x]
shape = ["rows", "cols"]
specials = ["zero_rows", "ties"]

[outputs.q]
shape = ["rows", "cols"]
dtype = "int8"
tolerance = { atol = 0, max_mismatch = 0.001, mismatch_atol = 1, reason = "ulp-off divides at ties" }

[outputs.scale]
shape = ["rows", 1]
dtype = "fp32"

[cases.edge]
base = { rows = 5, cols = 64 }
vary = { rows = [0, 1, 83], cols = [0, 7, 769] }

[[cases.ci]]
rows = 4
cols = 128
"""


def _write(tmp_path, text: str, name: str = "quant"):
    path = tmp_path / f"{name}.toml"
    path.write_text(textwrap.dedent(text))
    return path


def _problems(tmp_path, capsys, text: str) -> tuple[int, list[str]]:
    code = main(["validate", str(_write(tmp_path, text))])
    return code, capsys.readouterr().err.strip().splitlines()


def test_valid_quantiser_spec_loads_with_its_tolerances(tmp_path):
    spec = load(_write(tmp_path, BASE))
    q = spec.tolerance("bf16", "q")
    assert (q.atol, q.max_mismatch, q.mismatch_atol) == (0, 0.001, 1) and q.reason
    # A fixed-dtype fp32 output without its own tolerance takes the case dtype's bound; integers are exact.
    assert spec.tolerance("bf16", "scale").rtol == pytest.approx(1.6e-2)
    assert spec.reference_precision == "upcast" and spec.gate is None


def test_integer_output_without_its_own_tolerance_is_exact(tmp_path):
    spec = load(_write(tmp_path, BASE.replace(
        'tolerance = { atol = 0, max_mismatch = 0.001, mismatch_atol = 1, reason = "ulp-off divides at ties" }\n', "")))
    t = spec.tolerance("bf16", "q")
    assert (t.rtol, t.atol, t.max_mismatch) == (0.0, 0.0, 0.0)


def test_generated_edges_cross_layouts_with_odd_sizes_and_add_value_sets(tmp_path):
    spec = load(_write(tmp_path, BASE))
    ids = [c.id for c in spec.cases["edge"]]
    # one crossing per layout, every varied symbol at its smallest odd non-power-of-two size at once
    for lay in LAYOUTS:
        assert f"rows=83,cols=7-{lay}" in ids
    assert "rows=5,cols=64-zero_rows" in ids and "rows=5,cols=64-ties" in ids
    assert len(ids) == len(set(ids))
    ties = next(c for c in spec.cases["edge"] if c.value_set == "ties")
    assert ties.layout == "contiguous" and ties.values == {"rows": 5, "cols": 64}


@pytest.mark.parametrize("old, new, expected", [
    ('mismatch_atol = 1, ', '', "outputs.q.tolerance.mismatch_atol: required with max_mismatch"),
    (', reason = "ulp-off divides at ties"', '', "outputs.q.tolerance: loosens the default"),
    ('max_mismatch = 0.001', 'max_mismatch = 2', "outputs.q.tolerance.max_mismatch: is a fraction of the elements"),
    ('specials = ["zero_rows", "ties"]', 'specials = ["zero_row"]',
     'inputs.x.specials[0]: unknown value set "zero_row" (did you mean \'zero_rows\'?)'),
    ('[inputs.x]\nshape = ["rows", "cols"]', '[inputs.x]\nshape = ["rows", "cols"]\ntolerance = { atol = 1 }',
     "inputs.x.tolerance: only a tensor the kernel writes"),
    ('fallback = ["reference"]', 'fallback = ["reference"]\nreference_precision = "fp16"',
     'kernel.reference_precision: unknown precision "fp16"'),
    ('[[cases.ci]]\nrows = 4', '[[cases.ci]]\nvalue_set = "large"\nrows = 4',
     'cases.ci[0].value_set: "large" is not in any input\'s specials'),
    ('[[cases.ci]]', '[gate]\nmin_effect = 5\nreason = "noisy"\n\n[[cases.ci]]',
     "gate.min_effect: must be a fraction in (0, 1)"),
    ('[[cases.ci]]', '[gate]\nmin_effect = 0.05\n\n[[cases.ci]]', "gate.reason: missing required key"),
    ('[[cases.ci]]', '[tolerance.bf16]\nnorm_rtol = 0.1\n\n[[cases.ci]]', "tolerance.bf16: loosens the default"),
])
def test_bad_new_keys_give_one_line(tmp_path, capsys, old, new, expected):
    assert old in BASE, old
    code, err = _problems(tmp_path, capsys, BASE.replace(old, new, 1))
    assert code == 2
    assert len(err) == 1, err
    assert expected in err[0], err[0]


def test_gate_rule_and_reference_precision_parse(tmp_path):
    text = BASE.replace('fallback = ["reference"]', 'fallback = ["reference"]\nreference_precision = "input"')
    gate = '[gate]\nmin_effect = 0.05\nfloor_us = 0.5\nreason = "decode noise"\n\n'
    text = text.replace("[[cases.ci]]", gate + "[[cases.ci]]")
    spec = load(_write(tmp_path, text))
    assert spec.reference_precision == "input"
    assert (spec.gate.min_effect, spec.gate.floor_us, spec.gate.reason) == (0.05, 0.5, "decode noise")


@pytest.mark.parametrize("impl, expected", [
    ("quant_wrong_name", ['has no keyword parameter "scale" (the spec\'s outputs.scale) (did you mean \'scales\'?)',
                          'requires parameter "scales", which the spec declares as no tensor or param']),
    ("quant_positional", ['has no keyword parameter "x"', 'has positional-only parameter "x"']),
])
def test_validate_checks_the_launchers_keywords(tmp_path, capsys, impl, expected):
    code, err = _problems(tmp_path, capsys, BASE.replace("spec_kernels:quant_ref", f"spec_kernels:{impl}"))
    assert code == 2
    assert len(err) == len(expected), err
    for line, fragment in zip(err, expected, strict=True):
        assert line.startswith(str(tmp_path / "quant.toml") + ": kernel.reference: ") and fragment in line, line


def test_validate_accepts_a_launcher_taking_kwargs(tmp_path, capsys):
    code, err = _problems(tmp_path, capsys, BASE.replace("spec_kernels:quant_ref", "spec_kernels:quant_any"))
    assert (code, err) == (0, [])


def test_missing_dependency_is_named_as_the_environments_problem(tmp_path, capsys):
    """A kernel module that needs a package this Python lacks: said, and not the spec's failure (validate on a
    machine without torch still checks every spec's own text)."""
    code, err = _problems(tmp_path, capsys, BASE.replace("tests.planted.spec_kernels:quant_ref",
                                                         "tests.planted.needs_missing_pkg:quant_ref"))
    assert code == 0 and len(err) == 1
    assert "not checked: importing" in err[0] and "needs module 'kh_no_such_package'" in err[0], err[0]
    assert "nox -s validate" in err[0]


def test_loading_every_spec_imports_no_kernel_torch_or_triton():
    """A spec is data: trusted code reads a pull request's specs, and the torch-free report reads any spec,
    without running a line of kernel code. Binding (resolving the import paths) is a later, separate step."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    probe = (
        "import sys, pathlib\n"
        "from harness.spec.load import load\n"
        "paths = sorted(pathlib.Path('specs').glob('*.toml'))\n"
        "specs = [load(p) for p in paths]\n"
        "assert len(specs) == len(paths) > 0\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton', 'numpy', 'kernels'))\n"
        "print(len(specs), heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, check=True)
    count, heavy = out.stdout.split(" ", 1)
    assert int(count) >= 10 and heavy.strip() == "[]", out.stdout


def test_binding_reports_what_loading_does_not_import(tmp_path):
    """The import path's problems come from bind(), one line naming the file and key; load() alone accepts."""
    from pathlib import Path

    from harness.spec.bind import bind
    from harness.spec.load import load
    from harness.spec.schema import SpecError

    src = (Path(__file__).resolve().parents[1] / "specs" / "rmsnorm.toml").read_text()
    bad = tmp_path / "rmsnorm.toml"
    bad.write_text(src.replace('reference = "kernels.rmsnorm:rmsnorm_ref"', 'reference = "kernels.rmsnorm:nope_ref"'))
    spec = load(bad)
    with pytest.raises(SpecError) as exc:
        bind(spec)
    assert exc.value.problems == [f"{bad}: kernel.reference: cannot import \"kernels.rmsnorm:nope_ref\": module "
                                  "'kernels.rmsnorm' has no attribute 'nope_ref'"]


def test_a_bool_symbol_varies_like_a_number(tmp_path):
    """`vary = { nbg = [true, false] }` generates a case per value, as for sizes; a bool among sizes (or a size
    among bools) is one line naming the key."""
    from harness.spec.schema import SpecError
    from tests.e2e import write_spec

    path = write_spec(tmp_path, "scale", "tests.planted.broken_kernels:scale_any")
    text = path.read_text().replace("base = { rows = 5, cols = 33 }", "base = { rows = 5, cols = 33, flip = false }")
    path.write_text(text.replace("vary = { rows = [0, 1, 4], cols = [1, 7, 83] }",
                                 "vary = { rows = [0, 1, 4], cols = [1, 7, 83], flip = [true] }"))
    spec = load(path)
    assert "rows=5,cols=33,flip=true" in {c.id for c in spec.cases["edge"]}
    path.write_text(path.read_text().replace("flip = [true]", "flip = [1]"))
    with pytest.raises(SpecError) as exc:
        load(path)
    assert exc.value.problems == [f"{path}: cases.edge.vary.flip: expected booleans (the base case sets a boolean), "
                                  "got 1"]


def test_a_string_symbol_varies_per_case_and_reaches_a_param(tmp_path):
    """A string parameter that varies by case (Liger's kl_div `reduction`): `[params] reduction = { expr =
    "reduction" }` takes each case's value."""
    from harness.correctness.args import full_env
    from tests.e2e import write_spec

    path = write_spec(tmp_path, "scale", "tests.planted.broken_kernels:scale_any",
                      extra='\n[params.reduction]\nexpr = "reduction"\n')
    text = path.read_text().replace("base = { rows = 5, cols = 33 }",
                                    'base = { rows = 5, cols = 33, reduction = "mean" }')
    text = text.replace("[[cases.ci]]\nrows = 16\ncols = 128", '[[cases.ci]]\nrows = 16\ncols = 128\nreduction = "sum"')
    path.write_text(text.replace("vary = { rows = [0, 1, 4], cols = [1, 7, 83] }",
                                 'vary = { rows = [0, 1, 4], cols = [1, 7, 83], reduction = ["sum", "none"] }'))
    spec = load(path)
    case = next(c for c in spec.cases["edge"] if c.id == "rows=5,cols=33,reduction=sum")
    assert spec.params["reduction"](full_env(spec, case, "fp32")) == "sum"
    path.write_text(path.read_text().replace('reduction = ["sum", "none"]', 'reduction = ["sum", 3]'))
    with pytest.raises(Exception) as exc:
        load(path)
    assert "cases.edge.vary.reduction: expected strings (the base case sets a string), got 3" in str(exc.value)
