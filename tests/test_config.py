"""``[tool.kernel-harness]`` (harness.config): the table read into one Config, its one-line errors, and the
options that override it, in pytest and in the CLI alike (``--specs DIR``; ``--specs-dir`` is the CLI's old name).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.config import GatePolicy, load_config, use_import_roots
from harness.steps import BadInput
from tests.e2e import REPO, write_spec
from tests.test_adopting import adopter_spec
from tests.test_imports import import_edges


def _project(root: Path, table: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(f'[project]\nname = "adopter"\n\n[tool.kernel-harness]\n{table}')
    return root


def test_defaults_without_a_table_are_relative_to_the_start(tmp_path):
    c = load_config(tmp_path)
    assert c.source is None and c.root == tmp_path.resolve()
    assert c.specs == (tmp_path / "specs",) and c.import_roots == (tmp_path,) and c.kernels == (tmp_path / "kernels",)
    assert c.reports == tmp_path / "build" / "reports" and c.tier == "ci" and c.gate == GatePolicy()
    assert c.package(c.kernels[0]) == "kernels"


def test_a_table_is_found_from_a_subfolder_and_its_paths_are_its_folders(tmp_path):
    root = _project(tmp_path / "repo", 'specs = ["bench/specs", "more"]\nimport-roots = ["src"]\n'
                                       'kernels = ["src/mylib/ops"]\nreports = "out/r"\ntier = "full"\n'
                                       '[tool.kernel-harness.gate]\nmin-effect = 0.05\ncalibration = "cal.json"\n')
    (root / "tests" / "unit").mkdir(parents=True)
    c = load_config(root / "tests" / "unit")
    assert c.source == root / "pyproject.toml" and c.root == root
    assert c.specs == (root / "bench" / "specs", root / "more") and c.import_roots == (root / "src",)
    assert c.package(c.kernels[0]) == "mylib.ops" and c.reports == root / "out" / "r" and c.tier == "full"
    assert c.gate == GatePolicy(0.05, root / "cal.json")
    assert c.pythonpath("/x") == f"{root / 'src'}:/x"


def test_this_repository_has_its_own_table():
    c = load_config(REPO)
    assert c.source == REPO / "pyproject.toml"
    assert (c.specs, c.kernels, c.import_roots) == ((REPO / "specs",), (REPO / "kernels",), (REPO,))


@pytest.mark.parametrize("table,says", [
    ("specs = 3\n", "pyproject.toml: tool.kernel-harness.specs: expected a list of strings, got 3"),
    ('specs = ["a", 1]\n', "tool.kernel-harness.specs: expected a list of strings, got ['a', 1]"),
    ("import-roots = []\n", "tool.kernel-harness.import-roots: expected at least one folder, got []"),
    ("reports = 1\n", "tool.kernel-harness.reports: expected a string, got 1"),
    ('spec = ["specs"]\n', "tool.kernel-harness.spec: unknown key (known: specs, import-roots"),
    ('kernels = ["lib/ops"]\nimport-roots = ["src"]\n', "tool.kernel-harness.kernels: lib/ops is not an importable"),
    ('kernels = ["my-ops"]\n', "tool.kernel-harness.kernels: my-ops is not an importable package"),
    ("gate = 1\n", "tool.kernel-harness.gate: expected a table, got 1"),
    ("[tool.kernel-harness.gate]\nmin-effect = 1.5\n", "tool.kernel-harness.gate.min-effect: expected a number in"),
    ("[tool.kernel-harness.gate]\nmin_effect = 0.1\n", "tool.kernel-harness.gate.min_effect: unknown key"),
    ("specs = [\n", "pyproject.toml: not readable as TOML"),
])
def test_each_mistake_is_one_line_naming_the_file_and_key(tmp_path, monkeypatch, table, says):
    _project(tmp_path, table)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput) as exc:
        load_config()
    assert says in str(exc.value) and "\n" not in str(exc.value), str(exc.value)
    assert main(["validate"]) == 2  # any command: exit 2, the line on stderr


def test_the_module_sits_at_the_bottom_of_the_layering():
    assert import_edges()["harness.config"] <= {"harness.steps"}


def test_import_roots_come_first_and_main_puts_sys_path_back(tmp_path, monkeypatch):
    root = _project(tmp_path, 'import-roots = ["src", "."]\nkernels = ["src/ops"]\n')
    saved = list(sys.path)
    try:
        use_import_roots(load_config(root))
        assert sys.path[:2] == [str(root / "src"), str(root)]
    finally:
        sys.path[:] = saved
    monkeypatch.chdir(root)
    assert main(["affected", "--all"]) == 2  # no specs: bad input, and sys.path is as it was
    assert sys.path == saved


# ----------------------------------------------------------------------------- precedence: options over the table

FULL_CASE = "\n[[cases.full]]\nrows = 64\ncols = 256\n"


def _specs_project(tmp_path: Path) -> Path:
    """A project whose table names bench/specs (kernel a) while specs/ (kernel b) is the unconfigured default."""
    root = _project(tmp_path, 'specs = ["bench/specs"]\n')
    for folder, name in (("bench/specs", "a"), ("specs", "b"), ("other", "c")):
        (root / folder).mkdir(parents=True)
        write_spec(root / folder, name, "tests.planted.broken_kernels:scale", extra=FULL_CASE)
    return root


def test_cli_takes_the_tables_spec_folders_and_specs_overrides_them(tmp_path, monkeypatch, capsys):
    root = _specs_project(tmp_path)
    monkeypatch.chdir(root)
    assert main(["affected", "--all"]) == 0
    assert "kernels=a\n" in capsys.readouterr().out
    assert main(["affected", "--all", "--specs", "other", "--specs", "specs"]) == 0
    assert "kernels=b,c\n" in capsys.readouterr().out
    assert main(["affected", "--all", "--specs-dir", "other"]) == 0  # the old name still works, and says so
    out, err = capsys.readouterr()
    assert "kernels=c\n" in out and "--specs-dir is deprecated: use --specs" in err


def test_pytest_takes_the_tables_spec_folders_and_tier(pytester):
    # in-process (a subprocess per collection took 11 s of the 12): this process already imports the specs'
    # tests.planted.* kernels, and what is tested is the options' precedence, not a fresh interpreter
    _specs_project(pytester.path)
    (pytester.path / "pyproject.toml").write_text('[tool.kernel-harness]\nspecs = ["bench/specs"]\ntier = "full"\n')
    (pytester.path / "test_own.py").write_text("def test_own():\n    pass\n")
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider", "--dtype", "fp32")
    out = result.stdout.str()
    assert "bench/specs/a.toml::a[" in out and "b.toml" not in out and "c.toml" not in out, out[-2000:]
    assert "test_own.py::test_own" in out
    ci = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider", "--dtype", "fp32",
                                      "--tier", "ci").stdout.str()
    assert "rows=64,cols=256" in out and "rows=64,cols=256" not in ci  # the table's tier, and --tier over it
    other = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider", "--specs", "other",
                                         "--kernel", "c").stdout.str()
    assert "other/c.toml::c[" in other and "a.toml" not in other and "test_own" not in other, other[-2000:]


def test_a_bad_table_stops_pytest_with_its_line(pytester):
    (pytester.path / "pyproject.toml").write_text('[tool.kernel-harness]\ntier = "nightly"\n')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "pyproject.toml: tool.kernel-harness.tier: expected one of ci, full, got 'nightly'" in result.stderr.str()


def test_the_gate_policy_sets_the_default_threshold_below_options(tmp_path, monkeypatch):
    from harness.gate import workflow as wf
    from harness.gate.model import IN_PROCESS

    _project(tmp_path, '[tool.kernel-harness.gate]\nmin-effect = 0.2\ncalibration = "none.json"\n')
    monkeypatch.chdir(tmp_path)
    t = wf._threshold(IN_PROCESS)
    assert t.relative == 0.2 and "the project's policy" in t.source  # none.json is absent: not calibrated
    (tmp_path / "cal.json").write_text('{"in_process": {"min_effect": 0.3, "floor_us": 1.5}}')
    assert wf._threshold(IN_PROCESS, str(tmp_path / "cal.json")).relative == 0.3  # --calibration wins


def test_kernel_harness_console_script_reads_the_table(tmp_path):
    """`kernel-harness` (no cwd on sys.path, unlike python -m) imports the kernels through the import roots."""
    script = Path(sys.executable).with_name("kernel-harness")
    if not script.exists():
        pytest.skip("the console script is not installed next to this interpreter")
    root = _project(tmp_path, 'import-roots = ["src"]\nkernels = ["src/mylib"]\n')
    (root / "src" / "mylib").mkdir(parents=True)
    (root / "src" / "mylib" / "__init__.py").write_text("")
    (root / "src" / "mylib" / "scale.py").write_text((REPO / "tests" / "planted" / "broken_kernels.py").read_text())
    (root / "specs").mkdir()
    adopter_spec(root / "specs", "scale", "mylib.scale")
    done = subprocess.run([str(script), "validate"], cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "specs/scale.toml: ok" in done.stdout, done.stdout + done.stderr
