"""Release environments (harness.aot.toolchains), the `toolchains` key of [tool.kernel-harness], and the steps of
``matrix --triton`` and ``test-releases`` with pip and the child processes replaced."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from harness.aot import release_tests as rt
from harness.aot import release_workflow as rw
from harness.aot import toolchains as tc
from harness.cli.main import main
from harness.config import Toolchains, load_config
from harness.steps import BadInput, execute
from tests.test_toolchains_diff import FAILED, _row

# ---------------------------------------------------------------------------------------------- configuration


def _project(root: Path, table: str) -> Path:
    (root / "pyproject.toml").write_text(f'[project]\nname = "p"\n\n[tool.kernel-harness]\n{table}')
    return root


def test_the_toolchains_table_is_read_and_defaults_to_nothing(tmp_path):
    assert load_config(tmp_path).toolchains == Toolchains()
    _project(tmp_path, '[tool.kernel-harness.toolchains]\ntriton = ["3.6", "3.9.0", "3.6"]\ntorch = ["2.13.0+cpu"]\n'
                       'regressions = "fail"\n')
    assert load_config(tmp_path).toolchains == Toolchains(("3.6", "3.9.0"), ("2.13.0+cpu",), "fail")


@pytest.mark.parametrize("table,says", [
    ("toolchains = 3\n", "tool.kernel-harness.toolchains: expected a table, got 3"),
    ('[tool.kernel-harness.toolchains]\ntriton = "3.6"\n',
     "tool.kernel-harness.toolchains.triton: expected a list of releases such as"),
    ('[tool.kernel-harness.toolchains]\ntorch = ["latest"]\n', "tool.kernel-harness.toolchains.torch: expected a list"),
    ('[tool.kernel-harness.toolchains]\nregressions = "block"\n',
     "tool.kernel-harness.toolchains.regressions: expected one of report, fail, got 'block'"),
    ('[tool.kernel-harness.toolchains]\ntritons = []\n',
     "tool.kernel-harness.toolchains.tritons: unknown key (known: triton, torch, regressions)"),
])
def test_a_bad_toolchains_key_is_one_line_naming_file_and_key(tmp_path, table, says):
    _project(tmp_path, table)
    with pytest.raises(BadInput) as err:
        load_config(tmp_path)
    assert str(err.value).startswith("pyproject.toml: ") or str(err.value).startswith(str(tmp_path))
    assert says in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------- environments


def test_releases_parse_in_order_once_and_pin_as_pip_would():
    got = tc.parse_releases("triton", ["3.6,3.9.0", " 3.6 ", ""], "--triton")
    assert [r.requested for r in got] == ["3.6", "3.9.0"]
    assert [r.requirement for r in got] == ["triton==3.6.*", "triton==3.9.0"]
    assert tc.Release("torch", "2.13.0+cpu").requirement == "torch==2.13.0+cpu"
    with pytest.raises(BadInput, match=r"^--triton: 'main' is not a triton release \(expected e.g. 3.6 or 3.6.0\)$"):
        tc.parse_releases("triton", ["3.6,main"], "--triton")


def test_the_cache_folder_is_the_option_then_the_variable_then_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv(tc.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tc.cache_root() == tmp_path / "xdg" / "kernel-harness" / "toolchains"
    monkeypatch.setenv(tc.CACHE_ENV, str(tmp_path / "env"))
    assert tc.cache_root() == tmp_path / "env"
    assert tc.cache_root(str(tmp_path / "opt")) == tmp_path / "opt"


class FakePip:
    """pip install --target: writes <package>-<version>.dist-info (and, for torch, the triton it depends on)."""

    def __init__(self, versions: dict[str, str], fail: str = ""):
        self.versions, self.fail, self.calls = versions, fail, []

    def __call__(self, cmd, **_kw):
        self.calls.append(cmd)
        if self.fail:
            return NS(returncode=1, stdout="", stderr=f"Looking in indexes...\n{self.fail}\n")
        target, requirement = Path(cmd[cmd.index("--target") + 1]), cmd[-1]
        package = requirement.split("==")[0]
        for name, version in [(package, self.versions[requirement])] + ([("triton", "3.6.0")] if package == "torch"
                                                                          else []):
            meta = target / f"{name}-{version}.dist-info"
            meta.mkdir(parents=True)
            (meta / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")
            (target / name).mkdir()
        return NS(returncode=0, stdout="", stderr="")


def test_a_release_is_installed_once_then_found_in_the_cache(tmp_path):
    pip = FakePip({"triton==3.5.*": "3.5.1"})
    release = tc.Release("triton", "3.5")
    built = tc.ensure(release, tmp_path, run=pip, log=lambda _: None)
    assert built.version == "3.5.1" and built.path == tmp_path / f"triton-3.5-{tc.python_tag()}"
    assert "--no-deps" in pip.calls[0] and "--no-compile" in pip.calls[0] and (built.path / "triton").is_dir()
    assert tc.ensure(release, tmp_path, run=pip, log=lambda _: None) == built and len(pip.calls) == 1
    (built.path / tc.STAMP).write_text("{}")  # a stamp of another requirement: built again
    assert tc.ensure(release, tmp_path, run=pip, log=lambda _: None) == built and len(pip.calls) == 2
    assert [p.name for p in tmp_path.iterdir()] == [built.path.name]  # no partial folder left


def test_a_torch_release_comes_with_its_dependencies_but_not_its_triton(tmp_path):
    pip = FakePip({"torch==2.11.0": "2.11.0"})
    built = tc.ensure(tc.Release("torch", "2.11.0"), tmp_path, run=pip, log=lambda _: None)
    assert "--no-deps" not in pip.calls[0]
    assert not (built.path / "triton").exists() and not list(built.path.glob("triton-*.dist-info"))


def test_pip_failing_is_one_line_naming_the_release(tmp_path):
    pip = FakePip({}, fail="ERROR: No matching distribution found for triton==9.9.*")
    with pytest.raises(BadInput, match=r"^triton 9.9: pip could not install triton==9.9.\*: ERROR: No matching"):
        tc.ensure(tc.Release("triton", "9.9"), tmp_path, run=pip, log=lambda _: None)
    assert list(tmp_path.iterdir()) == []


def test_the_running_environments_release_needs_no_overlay(tmp_path):
    import triton

    here = tc.ensure(tc.Release("triton", triton.__version__), tmp_path, run=FakePip({}), log=lambda _: None)
    assert here.path is None and here.version == triton.__version__
    major_minor = ".".join(triton.__version__.split(".")[:2])
    assert tc.running(tc.Release("triton", major_minor)).version == triton.__version__
    assert tc.running(tc.Release("triton", "2.0")) is None


def test_a_local_label_only_one_side_has_is_the_same_release():
    assert tc.same_release("2.11.0", "2.11.0+cu130") and tc.same_release("3.6.0", "3.6.0")
    assert not tc.same_release("2.13.0+cpu", "2.13.0+cu130") and not tc.same_release("3.6.0", "3.6.1")


def test_the_overlays_come_first_on_the_childs_path(tmp_path):
    a = tc.Overlay(tc.Release("triton", "3.6"), tmp_path / "a", "3.6.0")
    here = tc.Overlay(tc.Release("torch", "2.13"), None, "2.13.0")
    assert tc.child_env([a, here], {"PYTHONPATH": "/x"})["PYTHONPATH"] == f"{tmp_path / 'a'}:/x"


# ---------------------------------------------------------------------------------------------- matrix --triton


def _overlay(version):
    return tc.Overlay(tc.Release("triton", version), Path(f"/cache/triton-{version}"), version)


def _matrix_child(rows_by_version: dict, written_version=None):
    """A fake `python -m harness matrix --out PATH` that writes the document of the release on its path."""
    def run(cmd, env, cwd, stdout, stderr):
        version = Path(env["PYTHONPATH"].split(":")[0]).name.removeprefix("triton-")
        out = Path(cmd[cmd.index("--out") + 1])
        stdout.write(f"matrix: {version}\n")
        if rows_by_version.get(version) is None:
            return NS(returncode=1)
        doc = {"schema": 1, "archs": ["sm_90"], "entries": [], "rows": rows_by_version[version],
               "toolchain": {"triton": written_version or version, "torch": "2.13.0"}}
        out.write_text(json.dumps(doc))
        return NS(returncode=0)
    return run


def _release_matrix(tmp_path, rows_by_version, **kw):
    written = []
    first = rw.ReleaseMatrix(write_text=lambda p, t: (written.append(p.name), p.write_text(t)), out=str(tmp_path),
                             releases=tuple(rows_by_version), build=lambda r, root: _overlay(r.requested),
                             run_child=_matrix_child(rows_by_version, kw.pop("written_version", None)), **kw)
    return execute(rw.STEPS, first), written


def test_matrix_across_releases_flags_a_difference_and_fails_only_when_told(tmp_path, capsys):
    rows = {"3.6.0": [_row(status=FAILED)], "3.9.0": [_row()]}
    run, written = _release_matrix(tmp_path, rows)
    out = capsys.readouterr().out
    assert not run.failed and written == ["toolchains.json", "toolchains.md"]
    assert "FLAGGED: k sm_90 kern [BLOCK=64 w4 s3]: compiles with triton 3.9.0, fails with triton 3.6.0" in out
    doc = json.loads((tmp_path / "toolchains.json").read_text())
    assert [r["matrix"] for r in doc["runs"]] == ["triton-3.6.0/matrix.json", "triton-3.9.0/matrix.json"]
    assert (tmp_path / "triton-3.6.0" / "matrix.log").read_text() == "matrix: 3.6.0\n"
    assert _release_matrix(tmp_path, rows, fail_on_regression=True)[0].failed
    assert _release_matrix(tmp_path, rows, policy="fail")[0].failed
    assert not _release_matrix(tmp_path, {"3.6.0": [_row()], "3.9.0": [_row()]}, policy="fail")[0].failed


def test_a_release_whose_matrix_writes_nothing_fails_the_run(tmp_path, capsys):
    run, _ = _release_matrix(tmp_path, {"3.6.0": [_row()], "3.9.0": None})
    assert run.failed and [r.label for r in run.runs] == ["triton 3.6.0"]
    assert "FAILED: triton 3.9.0: the matrix wrote no document (exit code 1): matrix: 3.9.0" in capsys.readouterr().out


def test_bad_input_in_a_release_stops_the_run_and_nothing_is_written(tmp_path):
    def child(cmd, env, cwd, stdout, stderr):
        stdout.write("specs/k.toml: cases.edge: missing\n")
        return NS(returncode=2)

    first = rw.ReleaseMatrix(write_text=None, out=str(tmp_path), releases=("3.6.0", "3.9.0"),
                             build=lambda r, root: _overlay(r.requested), run_child=child)
    with pytest.raises(BadInput, match=r"^triton 3.6.0: specs/k.toml: cases.edge: missing$"):
        execute(rw.STEPS, first)
    run, written = _release_matrix(tmp_path, {"3.6.0": None})  # a crash (exit code 1): failed, and no page
    assert run.failed and written == [] and not (tmp_path / "toolchains.md").exists()


def test_a_child_that_imported_another_triton_is_refused(tmp_path):
    with pytest.raises(BadInput, match="toolchain.triton: 3.9.0, not the triton 3.6.0 of /cache/triton-3.6.0"):
        _release_matrix(tmp_path, {"3.6.0": [_row()]}, written_version="3.9.0")


def test_no_release_given_or_configured_is_one_line(tmp_path):
    first = rw.ReleaseMatrix(write_text=None, out=str(tmp_path), where="pyproject.toml: tool.kernel-harness.toolchains")
    with pytest.raises(BadInput, match=r"^--triton: no releases given, and pyproject.toml: tool.kernel-harness."
                                       r"toolchains.triton names none$"):
        rw.pick_releases(first)
    assert rw.pick_releases(replace(first, configured=("3.6",))).wanted == (tc.Release("triton", "3.6"),)
    (tmp_path / "f").write_text("")
    with pytest.raises(BadInput, match="is a file"):
        rw.pick_releases(rw.ReleaseMatrix(write_text=None, out=str(tmp_path / "f"), releases=("3.6",)))


def test_the_cli_refuses_a_bad_release_in_one_line(capsys):
    assert main(["matrix", "--triton", "3.6,tip"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["--triton: 'tip' is not a triton release (expected e.g. 3.6 or 3.6.0)"]


# ---------------------------------------------------------------------------------------------- test-releases


def _pairs_run(imports: dict, exit_codes: dict, missing=(), **kw):
    """ReleaseTests with fake environments: ``imports`` {triton version: what the env imports, or None}."""
    streamed = []

    def run_child(cmd, env, cwd, capture_output, text):
        version = Path(env["PYTHONPATH"].split(":")[0]).name.removeprefix("triton-")
        if "harness.interpreter" in cmd[-1]:
            return NS(returncode=0, stdout=json.dumps(list(missing)) + "\n", stderr="")
        got = imports[version]
        if got is None:
            return NS(returncode=1, stdout="", stderr="ImportError: libcudnn.so.9: cannot open shared object file")
        return NS(returncode=0, stdout=json.dumps(got) + "\n", stderr="")

    def stream_child(cmd, env, cwd):
        version = Path(env["PYTHONPATH"].split(":")[0]).name.removeprefix("triton-")
        streamed.append((version, cmd))
        return exit_codes[version], "== 12 passed, 3 skipped in 4.0s =="

    torch = tc.Overlay(tc.Release("torch", "2.13.0"), None, "2.13.0")
    first = rt.ReleaseTests(specs=("specs",), triton=tuple(imports), pytest_args=("--kernel=rope",),
                            build=lambda r, root: _overlay(r.requested), run_child=run_child,
                            stream_child=stream_child, **kw)
    first = rt.pick_releases(first)
    run = rt.build_environments(first)
    run = replace(run, pairs=tuple(replace(p, torch=torch) for p in run.pairs))
    return execute(rt.STEPS[2:], run), streamed


def test_each_release_runs_the_generated_tests_in_its_own_environment(capsys):
    ok = lambda v: {"triton": v, "torch": "2.13.0"}
    run, streamed = _pairs_run({"3.6.0": ok("3.6.0"), "3.9.0": ok("3.9.0")}, {"3.6.0": 0, "3.9.0": 0})
    assert not run.failed
    assert [v for v, _ in streamed] == ["3.6.0", "3.9.0"]
    assert streamed[0][1][1:] == ["-m", "pytest", "specs", "--tier", "ci", "-p", "no:cacheprovider", "--kernel=rope"]
    out = capsys.readouterr().out
    assert "test-releases: triton 3.6.0, torch 2.13.0: 12 passed, 3 skipped in 4.0s (pytest exit 0" in out


def test_a_failing_release_an_environment_that_does_not_import_and_missing_hooks_are_said(capsys):
    ok = lambda v: {"triton": v, "torch": "2.13.0"}
    run, streamed = _pairs_run({"3.6.0": ok("3.6.0"), "3.9.0": ok("3.9.0")}, {"3.6.0": 1, "3.9.0": 0},
                               missing=("casts: tl.tensor.to (absent)",))
    out = capsys.readouterr().out
    assert run.failed and "pytest exit 1" in out
    assert "triton 3.6.0, torch 2.13.0: interpreter layer: not applied: casts: tl.tensor.to (absent)" in out
    run, streamed = _pairs_run({"3.6.0": None, "3.9.0": ok("3.8.0")}, {})
    out = capsys.readouterr().out
    assert run.failed and streamed == []
    assert "triton 3.6.0, torch 2.13.0: NOT RUN: toolchains: the environment does not import: ImportError: " \
           "libcudnn.so.9" in out
    assert "triton 3.9.0, torch 2.13.0: NOT RUN: the environment imports triton 3.8.0 (asked for 3.9.0)" in out


def test_test_releases_without_releases_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["test-releases"]) == 2
    assert capsys.readouterr().err.strip() == "--triton/--torch: no releases given, and tool.kernel-harness." \
                                              "toolchains names none"


def test_the_stream_passes_output_through_and_keeps_the_last_line(capsys, tmp_path):
    code, last = rt.stream([sys.executable, "-c", "print('a'); print('b  '); print(); raise SystemExit(3)"],
                           {"PATH": ""}, tmp_path)
    assert (code, last) == (3, "b") and capsys.readouterr().out == "a\nb  \n\n"
