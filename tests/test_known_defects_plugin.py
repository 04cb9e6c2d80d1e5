"""``[tool.kernel-harness] known-defects`` (harness.plugin.known_defects): recorded defects become expected
failures, each with its message, in a tiny planted project run by an inner pytest.

The planted kernel ``twice`` (out = 2 x, a torch backend) crashes on 0 rows and computes 3 x at 7 and 83 columns.
"""

from __future__ import annotations

import pytest

from harness.config import load_config
from harness.plugin.known_defects import load_defects
from harness.steps import BadInput

KERNEL = '''
def twice(*, x, out):
    if x.shape[0] == 0:
        raise RuntimeError("no rows")
    out.copy_(x * (3 if x.shape[1] in (7, 83) else 2))


def twice_ref(*, x, out):
    out.copy_(x.double() * 2)
'''

SPEC = '''
[kernel]
name = "twice"
summary = "out = 2 x"
reference = "plantedk:twice_ref"
dtypes = ["fp32"]
layouts = ["padded", "strided", "transposed"]

[backends.torch]
impl = "plantedk:twice"

[inputs.x]
shape = ["rows", "cols"]

[outputs.out]
shape = ["rows", "cols"]

[cases.edge]
base = { rows = 5, cols = 33 }
vary = { rows = [0, 1], cols = [7, 83] }

[waive]
opcheck = "planted: only the case items are under test here"
compile = "planted: only the case items are under test here"
'''

CRASH = "zero-size: crashed on 0-size inputs: RuntimeError: no rows"
NO_ROWS = f'''
[[defect]]
id = "no-rows"
summary = "crashes on 0 rows"
why = "plantedk.twice raises on an empty x"
items = ["twice[torch-*-rows=0,*"]
match = 'RuntimeError: no rows'
[defect.exact]
"twice[torch-fp32-rows=0,cols=33]" = "{CRASH}"
'''
FIXED = '''
[[defect]]
id = "fixed"
summary = "once wrong at 1 row"
items = ["twice[torch-*-rows=1,cols=33]"]
match = '^numerics: '
'''
CHANGED = '''
[[defect]]
id = "changed"
summary = "3 x at 7 columns, recorded with another count"
items = ["twice[torch-*-rows=5,cols=7]"]
match = '^numerics: out: 99 of '
'''


def _project(root, defects: str, table: str = 'known-defects = "known_defects.toml"\n'):
    (root / "specs").mkdir()
    (root / "specs" / "twice.toml").write_text(SPEC)
    (root / "plantedk.py").write_text(KERNEL)
    (root / "known_defects.toml").write_text(defects)
    (root / "pyproject.toml").write_text(f'[tool.kernel-harness]\nkernels = ["specs"]\n{table}')
    return root


def _run(pytester, *args):
    # in-process: a subprocess each (importing torch) took 3 to 4 s of a run's 4; -n 2 still starts real workers.
    # The spec waives opcheck and compile, and must: pytester drops the modules an in-process run imported, and a
    # worker whose first torch.compile ran in one failed every later compile item (tests/test_spec_optional.py)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--backend", "torch", "-rA", *args)


def _line(out: str, status: str, case: str) -> str:
    want = f"{status} specs/twice.toml::twice[torch-fp32-{case}]"
    return next((line for line in out.splitlines() if line.startswith(want)), "")


def test_recorded_defects_are_xfailed_and_what_changed_fails_the_run(pytester):
    _project(pytester.path, NO_ROWS + FIXED + CHANGED)
    result = _run(pytester)
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    # fails as recorded (and exactly, under the interpreter): an expected failure quoting the line
    assert _line(out, "XFAIL", "rows=0,cols=33").endswith(f"known defect no-rows: {CRASH}"), out[-3000:]
    # a recorded defect whose item passes: no longer found
    assert _line(out, "FAILED", "rows=1,cols=33"), out[-3000:]
    assert "known defect fixed (once wrong at 1 row) is no longer found: this item passed" in out
    # its message changed: the new first line and the recorded one, side by side
    assert _line(out, "FAILED", "rows=5,cols=7"), out[-3000:]
    assert "known defect changed (3 x at 7 columns, recorded with another count): its message changed" in out
    assert "  now:      numerics: out: 35 of 35 elements" in out
    assert "  recorded: a first line matching '^numerics: out: 99 of '" in out
    # a failure no defect names still fails, as it is
    assert "] - numerics: out: " in _line(out, "FAILED", "rows=5,cols=83"), out[-3000:]
    assert _line(out, "PASSED", "rows=5,cols=33"), out[-3000:]
    # the summary: each defect found or not
    assert "found: no-rows: 1 of 1 item(s) as recorded: crashes on 0 rows" in out
    assert "NO LONGER FOUND: fixed: 0 of 1 item(s) as recorded, 1 passed: once wrong at 1 row" in out
    assert "MESSAGE CHANGED: changed: 0 of 1 item(s) as recorded, 1 changed" in out
    assert "3 defect(s) run: 1 item(s) found as recorded, 1 no longer found, 1 with a changed message" in out


def test_an_exact_line_that_changed_fails_with_both_lines(pytester):
    _project(pytester.path, NO_ROWS.replace(f'= "{CRASH}"', f'= "{CRASH} (recorded)"'))
    result = _run(pytester, "specs/twice.toml::twice[torch-fp32-rows=0,cols=33]")
    out = result.stdout.str()
    assert result.ret == 1 and _line(out, "FAILED", "rows=0,cols=33"), out[-3000:]
    assert f"  now:      {CRASH}\n" in out
    recorded = f"exactly (the Triton interpreter's run recorded in known_defects.toml): {CRASH} (recorded)"
    assert f"  recorded: {recorded}" in out


def test_only_recorded_failures_pass_the_run(pytester):
    _project(pytester.path, NO_ROWS)
    result = _run(pytester, "-k", "33 and not padded and not strided and not transposed")
    assert result.ret == 0, result.stdout.str()[-3000:]
    outcomes = result.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("xfailed"), outcomes.get("failed")) == (2, 1, None), outcomes


def test_a_pattern_that_names_no_generated_item_fails_the_run(pytester):
    _project(pytester.path, NO_ROWS + FIXED.replace("rows=1,cols=33", "rows=2,cols=33"))
    result = _run(pytester, "--collect-only", "-q")
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    assert ("FAILED: known_defects.toml: fixed: items pattern 'twice[torch-*-rows=2,cols=33]' names no generated "
            "item") in out


def test_a_bad_file_stops_pytest_with_one_line(pytester):
    _project(pytester.path, NO_ROWS.replace("match = 'RuntimeError: no rows'", "match = '(unclosed'"))
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: pyproject.toml: tool.kernel-harness.known-defects: known_defects.toml: defect[0] (no-rows)."
            "match: not a regex: missing ), unterminated subpattern at position 0") in result.stderr.str()


@pytest.mark.slow
def test_under_xdist_the_summary_counts_the_workers_reports_and_a_bad_pattern_stops_the_run(pytester):
    """pytest-xdist runs the items in worker processes: the xfails and the summary are the same, and a file
    problem found at a worker's collection fails the run (a worker's exit status never reaches the
    controller: the workers hand their problems over)."""
    pytest.importorskip("xdist")
    _project(pytester.path, NO_ROWS + FIXED)
    result = _run(pytester, "-n", "2")
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    assert "found: no-rows: 1 of 1 item(s) as recorded: crashes on 0 rows" in out, out[-3000:]
    assert "NO LONGER FOUND: fixed: 0 of 1 item(s) as recorded, 1 passed: once wrong at 1 row" in out
    assert "2 defect(s) run: 1 item(s) found as recorded, 1 no longer found, 0 with a changed message" in out
    (pytester.path / "known_defects.toml").write_text(NO_ROWS + FIXED.replace("rows=1,cols=33", "rows=2,cols=33"))
    result = _run(pytester, "-n", "2")
    out = result.stdout.str()
    want = "FAILED: known_defects.toml: fixed: items pattern 'twice[torch-*-rows=2,cols=33]' names no generated item"
    assert result.ret == 1 and want in out, out[-3000:]


GPU_ONLY = '''
[[defect]]
id = "on-gpu"
summary = "3 x at 7 columns, seen on a GPU only"
items = ["twice[torch-*-rows=5,cols=7]", "twice[torch-*-rows=1,cols=33]"]
devices = ["gpu"]
match = '^numerics: '

[[defect]]
id = "full-tier"
summary = "recorded from a full-tier run, which this run leaves out"
items = ["twice[torch-fp32-full-*]"]
match = '^numerics: '
'''


def test_a_defect_of_another_device_leaves_its_items_alone(pytester):
    """Here (a CPU) a GPU-only defect takes nothing: its failing item fails as it is, its passing item passes; a
    pattern of a tier the run left out is not a problem."""
    _project(pytester.path, GPU_ONLY)
    result = _run(pytester, "specs/twice.toml::twice[torch-fp32-rows=5,cols=7]",
                  "specs/twice.toml::twice[torch-fp32-rows=1,cols=33]")
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    assert "] - numerics: out: " in _line(out, "FAILED", "rows=5,cols=7"), out[-3000:]
    assert _line(out, "PASSED", "rows=1,cols=33"), out[-3000:]
    assert "known defect" not in out and "names no generated item" not in out, out[-3000:]


BACKWARD_KERNEL = '''

def twice_differentiable(*, x, out):
    """2 x through autograd, whose gradient is 3 dy at 7 columns (a planted backward bug)."""
    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, dy):
            return dy * (3 if dy.shape[1] == 7 else 2)

    return Twice.apply(x)
'''
BACKWARD_SPEC = """
[backward]
inputs = ["x"]

[backward.backends.torch]
differentiable = true
"""
WRONG_GRAD = '''
[[defect]]
id = "grad-at-7"
summary = "the gradient is 3 dy at 7 columns"
items = ["twice[bwd-torch-*,cols=7]", "twice[bwd-torch-*-fp16-*]"]
match = '^numerics: grad_x: '
'''


def test_the_backward_items_are_governed_like_the_forward_items(pytester):
    """A defect names generated backward items (twice[bwd-torch-autograd-...]) as it names forward ones, and a
    pattern of a dtype the spec does not generate is left alone like a forward one."""
    _project(pytester.path, WRONG_GRAD)
    spec = pytester.path / "specs" / "twice.toml"
    spec.write_text(SPEC.replace("plantedk:twice\"", "plantedk:twice_differentiable\"") + BACKWARD_SPEC)
    kernel = pytester.path / "plantedk.py"
    kernel.write_text("import torch\n" + KERNEL + BACKWARD_KERNEL)
    result = _run(pytester, "specs/twice.toml::twice[bwd-torch-autograd-fp32-rows=5,cols=7]",
                  "specs/twice.toml::twice[bwd-torch-autograd-fp32-rows=5,cols=33]")
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    assert "XFAIL specs/twice.toml::twice[bwd-torch-autograd-fp32-rows=5,cols=7] - known defect grad-at-7: " \
           "numerics: grad_x: " in out, out[-3000:]
    assert "PASSED specs/twice.toml::twice[bwd-torch-autograd-fp32-rows=5,cols=33]" in out, out[-3000:]
    assert "1 defect(s) run: 1 item(s) found as recorded" in out, out[-3000:]


@pytest.mark.parametrize("text,says", [
    (NO_ROWS.replace("why =", "reason ="), "defect[0].reason: unknown key (known: id, summary, why, items,"),
    (NO_ROWS.replace('id = "no-rows"\n', ""), "defect[0]: missing key id"),
    (NO_ROWS + NO_ROWS, "defect[1] (no-rows).id: a defect listed before has the same id"),
    (NO_ROWS.replace("items = [", "items = 3 #"), "defect[0] (no-rows).items: expected a non-empty list"),
    (NO_ROWS.replace("RuntimeError: no rows'", "RuntimeError: none'"),
     "defect[0] (no-rows).exact.twice[torch-fp32-rows=0,cols=33]: the line does not match 'RuntimeError: none'"),
    (NO_ROWS.replace('"twice[torch-fp32-rows=0', '"twice[torch-fp32-rows=1'),
     "defect[0] (no-rows).exact.twice[torch-fp32-rows=1,cols=33]: not named by this defect's items"),
    (NO_ROWS + NO_ROWS.replace('id = "no-rows"', 'id = "again"'),
     "defect[1] (again).exact.twice[torch-fp32-rows=0,cols=33]: taken by no-rows, listed before"),
    ("[[defects]]\nid = 1\n", "defects: unknown table (did you mean [[defect]]?)"),
    ("defect = 1\n", "defect: expected an array of tables ([[defect]]), got 1"),
    (NO_ROWS.replace("match =", 'devices = ["cuda"]\nmatch ='),
     "defect[0] (no-rows).devices: expected a non-empty list of 'interpreter', 'gpu', got ['cuda']"),
])
def test_each_problem_of_the_file_is_one_line(tmp_path, text, says):
    (tmp_path / "k.toml").write_text(text)
    with pytest.raises(BadInput) as e:
        load_defects(tmp_path / "k.toml", "k.toml")
    assert str(e.value).startswith(f"k.toml: {says}") and "\n" not in str(e.value), str(e.value)


def test_the_projects_own_tables_are_left_alone(tmp_path):
    (tmp_path / "k.toml").write_text(NO_ROWS + '[[bench]]\nid = "peer"\nanything = 1\n')
    (d,) = load_defects(tmp_path / "k.toml", "k.toml")
    assert d.id == "no-rows" and d.exact_line("twice[torch-fp32-rows=0,cols=33]") == CRASH


def test_the_key_is_a_path_relative_to_the_table(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.kernel-harness]\nkernels = ["k"]\nknown-defects = "kd/k.toml"\n')
    assert load_config(tmp_path).known_defects == tmp_path / "kd" / "k.toml"
    (tmp_path / "pyproject.toml").write_text('[tool.kernel-harness]\nkernels = ["k"]\nknown-defects = 3\n')
    says = r"^pyproject.toml: tool.kernel-harness.known-defects: expected a string, got 3$"
    with pytest.raises(BadInput, match=says):
        load_config(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.kernel-harness]\nkernels = ["k"]\n')
    assert load_config(tmp_path).known_defects is None
