"""Malformed specs: each gives exactly one clear line naming the file and the key, and exit code 2."""

from __future__ import annotations

import re

import pytest

from harness.cli.main import main
from harness.spec.load import load as load_spec
from tests.e2e import REPO, fp32_items, outcomes, write_spec

VALID = """\
[kernel]
name = "scale"
summary = "out = x * w * 2"
reference = "tests.planted.broken_kernels:scale_ref"
dtypes = ["fp32", "fp16", "bf16"]
layouts = ["padded", "strided", "transposed"]
fallback = ["triton", "reference"]

[backends.triton]
impl = "tests.planted.broken_kernels:scale"
arch = ["cpu", ">=sm_80"]
requires = ["triton"]

[params]

[inputs.x]
shape = ["rows", "cols"]
values = "normal"

[inputs.w]
shape = ["cols"]

[outputs.out]
shape = ["rows", "cols"]

[tolerance.bf16]
rtol = 1.6e-2

[cases]
constraints = ["cols >= 0"]

[cases.edge]
base = { rows = 5, cols = 33 }
vary = { rows = [0, 1], cols = [1, 83] }

[[cases.ci]]
rows = 16
cols = 128

[roofline]
bytes = "bytes_x + bytes_w + bytes_out"
flops = "2 * numel_x"
target = 0.5
"""

# (replace this, with that, expected fragments of the single error line)
CASES = [
    ('rtol = 1.6e-2', 'rtol = "1e-2x"', 'tolerance.bf16.rtol: expected a number, got "1e-2x"'),
    ('summary = "out', 'sumary = "out', "kernel.sumary: unknown key (did you mean 'summary'?)"),
    ('[inputs.w]\nshape = ["cols"]', '[inputs.w]\nshape = ["colz"]', "inputs.w.shape[0]: undefined symbol 'colz' (did you mean 'cols'?)"),
    ('shape = ["rows", "cols"]\nvalues', 'shape = ["rows", "cols +"]\nvalues', "inputs.x.shape[1]: bad expression"),
    ('impl = "tests.planted.broken_kernels:scale"', 'impl = "tests.planted.broken_kernels:nope"', "backends.triton.impl: cannot import"),
    ('impl = "tests.planted.broken_kernels:scale"', 'impl = "tests.planted.nosuchmodule:scale"', "no module named 'tests.planted.nosuchmodule'"),
    ('impl = "tests.planted.broken_kernels:scale"', 'impl = "scale_without_module"', 'backends.triton.impl: expected "package.module:function"'),
    ('dtypes = ["fp32", "fp16", "bf16"]', 'dtypes = ["fp32", "fp61"]', 'kernel.dtypes[1]: unknown dtype "fp61" (did you mean'),
    ('rtol = 1.6e-2', 'rtol = 0.5', "tolerance.bf16: loosens the default (rtol 0.016, atol 1e-05"),
    ('arch = ["cpu", ">=sm_80"]', 'arch = ["cpu", ">=sm80"]', "backends.triton.arch[1]: bad architecture rule '>=sm80'"),
    ('fallback = ["triton", "reference"]', 'fallback = ["cuda", "reference"]', 'kernel.fallback[0]: no backend "cuda"'),
    ('layouts = ["padded", "strided", "transposed"]', 'layouts = ["paded"]', 'kernel.layouts[0]: unknown layout "paded" (did you mean \'padded\'?)'),
    ('name = "scale"', 'name = "scales"', 'kernel.name: "scales" must match the file name "scale"'),
    ('values = "normal"', 'values = "gaussian"', "inputs.x.values: expected one of normal, uniform, randint"),
    ('values = "normal"', 'values = "uniform(0)"', "inputs.x.values: uniform takes 2 arguments, got 1"),
    ('[[cases.ci]]\nrows = 16', '[[cases.ci]]\nrows = "sixteen"', 'cases.ci[0].rows: a dimension (of x) must be a number, got "sixteen"'),
    ('constraints = ["cols >= 0"]', 'constraints = ["cols < 100"]', "cases.ci[0]: breaks constraint 'cols < 100'"),
    ('vary = { rows = [0, 1], cols = [1, 83] }', 'vary = { rows = [1], cols = [83] }', "cases.edge: no generated case has a 0-size dimension"),
    ('bytes = "bytes_x + bytes_w + bytes_out"', 'bytes = "bytes_x + bytes_y"', "roofline.bytes: undefined symbol 'bytes_y'"),
    ('target = 0.5', 'target = 1.5', "roofline.target: must be a fraction in [0, 1], got 1.5"),
    ('target = 0.5', 'target = 0.5\ngap = " "', "roofline.gap: expected why the kernel is below its target"),
    ('bytes = "bytes_x + bytes_w + bytes_out"', 'bytes = "bytes_x"\nread_bytes = "bytes_x"',
     "roofline.read_bytes: give bytes, or read_bytes and write_bytes, not both"),
    ('bytes = "bytes_x + bytes_w + bytes_out"', 'read_bytes = "bytes_x + bytes_w"', "roofline.write_bytes: required with read_bytes"),
    ('bytes = "bytes_x + bytes_w + bytes_out"\n', '', "roofline.bytes: missing required key (or give read_bytes and write_bytes)"),
    ('bytes = "bytes_x + bytes_w + bytes_out"', 'read_bytes = "bytes_x + bytes_ww"\nwrite_bytes = "bytes_out"',
     "roofline.read_bytes: undefined symbol 'bytes_ww' (did you mean 'bytes_w'?)"),
    ('[params]', '[params]\neps = { value = 1e-6, expr = "cols" }', "params.eps: give exactly one of value"),
    ('[params]', '[waive]\ndeterminism = ""\n[params]', "waive.determinism: expected the reason as a non-empty string"),
    ('[params]', '[waive]\nspeed = "fast enough"\n[params]', "waive.speed: not a waivable check"),
    ('[params]', '[waive]\n"bench.liger" = "not installed"\n[params]',
     "waive.bench.liger: not a baseline or peer of this kernel: 'liger' (one of reference, torch.compile"),
    ('[params]', '[waive]\nbench.torch.compile = ""\n[params]',
     "waive.bench.torch.compile: expected the reason as a non-empty string"),
    ('[roofline]', '[rooflne]', "rooflne: unknown key (did you mean 'roofline'?)"),
    ('name = "scale"', 'name = "scale"\nname = "again"', "invalid TOML"),
    ('[[cases.ci]]\nrows = 16\ncols = 128', '[[cases.ci]]\nrows = 16\ncols = 128\nheadline = true', "cases.ci[0].headline: only bench and cpu cases"),
    ('values = "normal"', 'values = "sqrt(cols)"', "inputs.x.values: expected one of normal, uniform, randint"),
    ('values = "normal"', 'values = "normal(0, uniform(0, 1))"', "inputs.x.values: bad expression"),
    ('values = "normal"', 'values = "uniform(0, sqrt(colz))"', "inputs.x.values: undefined symbol 'colz'"),
    # [backward]: what is differentiable, and how its backward is called
    ('[roofline]', '[backward]\ninputs = ["x"]\n[backward.backends.triton]\n[roofline]',
     "backward.backends.triton: give differentiable = true (the forward's impl returns outputs with a grad_fn)"),
    ('[roofline]', '[backward]\ninputs = ["x"]\n[backward.backends.triton]\ndifferentiable = true\n'
                   'autograd = "tests.planted.broken_kernels:scale"\n[roofline]',
     "backward.backends.triton.autograd: has no place beside differentiable = true"),
    ('[roofline]', '[backward]\ninputs = ["x"]\n[backward.backends.triton]\ndifferentiable = "yes"\n[roofline]',
     "backward.backends.triton.differentiable: expected a boolean"),
    ('[roofline]', '[backward]\ninputs = ["xx"]\n[backward.backends.triton]\ndifferentiable = true\n[roofline]',
     'backward.inputs[0]: no input "xx" (did you mean \'x\'?)'),
    ('[roofline]', '[backward]\ninputs = ["x"]\n[backward.backends.cuda]\ndifferentiable = true\n[roofline]',
     'backward.backends.cuda: no backend "cuda"'),
    ('[roofline]', '[backward]\ninputs = ["x"]\n[backward.backends.triton]\n'
                   'kernel = "tests.planted.broken_kernels:scale"\n[roofline]',
     "backward.saved: required with backward.backends.triton.kernel"),
]


def _validate(tmp_path, capsys, text: str):
    path = tmp_path / "scale.toml"
    path.write_text(text)
    code = main(["validate", str(path)])
    captured = capsys.readouterr()
    return code, captured.err.strip().splitlines(), str(path)


def test_valid_spec_passes(tmp_path, capsys):
    code, err, _ = _validate(tmp_path, capsys, VALID)
    assert code == 0 and err == []


def test_several_mistakes_give_one_line_each(tmp_path, capsys):
    """Mistakes in different sections are all reported at once, one line each, in no particular order."""
    picked = [CASES[i] for i in (0, 1, 11, 19)]  # tolerance, kernel key, layout, roofline
    text = VALID
    for old, new, _ in picked:
        assert old in text, old
        text = text.replace(old, new, 1)
    code, err, path = _validate(tmp_path, capsys, text)
    assert code == 2 and len(err) == len(picked), err
    assert all(line.startswith(f"{path}: ") for line in err), err
    for _, _, expected in picked:
        assert sum(expected in line for line in err) == 1, (expected, err)


@pytest.mark.parametrize("old, new, expected", CASES, ids=[c[2][:40] for c in CASES])
def test_malformed_spec_gives_one_line(tmp_path, capsys, old, new, expected):
    assert old in VALID, old
    code, err, path = _validate(tmp_path, capsys, VALID.replace(old, new, 1))
    assert code == 2
    assert len(err) == 1, err
    assert err[0].startswith(f"{path}: "), err[0]
    assert expected in err[0], err[0]
    assert "Traceback" not in err[0]


def test_missing_file(tmp_path, capsys):
    code = main(["validate", str(tmp_path / "nope.toml")])
    assert code == 2 and "nope.toml: file not found" in capsys.readouterr().err


@pytest.mark.slow
def test_broken_spec_becomes_one_failing_item_and_others_still_run(pytester, monkeypatch):
    """At collection a spec mistake is one failing item with its line, never a traceback; the specs beside it
    are collected and every one of their generated tests runs and passes."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the specs name tests.planted.* kernels
    specs = pytester.path / "specs"
    specs.mkdir()
    # one good spec on each side of the broken one in collection order; their compile items sit out (each a
    # torch.compile on the CPU, seconds apiece, and nothing to do with collection)
    good = [load_spec(write_spec(specs, name, "tests.planted.broken_kernels:scale")) for name in ("alpha", "omega")]
    (specs / "scale.toml").write_text(VALID.replace('rtol = 1.6e-2', 'rtol = "x"'))
    result = pytester.runpytest_subprocess("--specs", "specs", "--dtype", "fp32", "-v", "-p", "no:cacheprovider",
                                           "-k", "not compile", timeout=300)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(["*tolerance.bf16.rtol: expected a number, got \"x\"*"])
    assert "Traceback" not in out
    per_spec = {s.name: fp32_items(s) - 2 for s in good}  # less the two compile items (triton, reference)
    assert outcomes(result) == {"failed": 1, "passed": sum(per_spec.values()), "deselected": 4}, out[-3000:]
    for name, n in per_spec.items():
        assert len(re.findall(rf"^specs/{name}\.toml::{name}\[\S+ PASSED", out, re.M)) == n, (name, out[-3000:])
    assert re.search(r"^specs/scale\.toml::scale\[spec\] FAILED", out, re.M), out[-3000:]
