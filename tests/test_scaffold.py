"""``python -m harness new NAME``: the skeletons of a new kernel, written into a temporary project.

The generated spec validates, its generated tests collect and run, every Triton case fails with the TODO
message and nothing else (the reference cases pass), and with the TODO line deleted every case passes: the
skeleton's plumbing (strides, masks, tails, empty launches) is right before a contributor touches it.
Bad names and existing files fail with one line and exit code 2, writing nothing.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.cli.main import main
from tests.e2e import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

NAME = "my_kernel"
TODO = ("NotImplementedError", f"TODO: write the kernel in kernels/{NAME}.py")
ERROR = re.compile(r"\b(\w+(?:Error|Exception)): ([^\n]*)")  # every exception a failure's text names
TEMPLATES = REPO / "harness" / "cli" / "templates"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project root holding the kernel package as a contributor's checkout has it (the skeleton imports
    kernels.common's interpreter test and bf16 rounding), and no spec."""
    (tmp_path / "kernels").mkdir()
    for f in ("__init__.py", "common.py"):
        shutil.copy(REPO / "kernels" / f, tmp_path / "kernels" / f)
    return tmp_path


def _new(root: Path, *args: str) -> int:
    return main(["new", *args, "--root", str(root)])


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    # in the project's directory, so `kernels` is the project's package (the cwd leads sys.path)
    return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=600)


def _outcomes(root: Path, *args: str) -> dict[str, tuple[str, frozenset]]:
    """Run the kernel's generated tests; item name -> (outcome, the exceptions its failure text names)."""
    proc = _run(root, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--kernel", NAME, "--junitxml=junit.xml",
                *args)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    out = {}
    for case in ET.parse(root / "junit.xml").iter("testcase"):
        bad = [e for e in case if e.tag in ("failure", "error", "skipped")]
        text = f"{bad[0].get('message', '')}\n{bad[0].text or ''}" if bad else ""
        out[case.get("name")] = (bad[0].tag if bad else "passed", frozenset(ERROR.findall(text)))
    return out


def test_new_writes_both_files_and_the_spec_validates(project, capsys):
    assert _new(project, NAME) == 0
    spec, kernel = project / "specs" / f"{NAME}.toml", project / "kernels" / f"{NAME}.py"
    assert spec.is_file() and kernel.is_file()
    out = capsys.readouterr().out
    assert "wrote" in out and f"--kernel {NAME}" in out
    text = spec.read_text()
    for section in ("[backends.triton]", "[params]", "[inputs.x]", "[outputs.out]", "[tolerance.bf16]",
                    "[cases.edge]", "[[cases.ci]]", "[[cases.full]]", "[[cases.bench]]", "headline = true",
                    "[roofline]", "read_bytes", "write_bytes", "flops", "target"):
        assert section in text, f"the spec skeleton shows no {section}"
    source = kernel.read_text()
    for part in (f"def _{NAME}_kernel(", f"def {NAME}(*, x", f"def {NAME}_ref(*, x", "class MyKernelConfig:",
                 "@dataclass(frozen=True)", "def for_shape(", "raise NotImplementedError(TODO)"):
        assert part in source, f"the kernel skeleton has no {part}"
    proc = _run(project, "-m", "harness", "validate", f"specs/{NAME}.toml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"specs/{NAME}.toml: ok" in proc.stdout


@pytest.mark.slow
def test_generated_tests_run_and_fail_only_at_the_todo(project):
    assert _new(project, NAME) == 0
    outcomes = _outcomes(project)
    triton = {k: v for k, v in outcomes.items() if k.startswith(f"{NAME}[triton-")}
    reference = {k: v for k, v in outcomes.items() if k.startswith(f"{NAME}[reference-")}
    # the reference backend only where it can fail (0-size and non-contiguous cases), and its op items
    assert len(triton) >= 30 and 0 < len(reference) < len(triton), sorted(outcomes)
    assert all("=0" in k or k.endswith(("-padded]", "-strided]", "-transposed]", "-opcheck]", "-compile]"))
               for k in reference), sorted(reference)
    assert len(triton) + len(reference) == len(outcomes), sorted(outcomes)  # no spec-error item
    # each case, and the op items (opcheck, compile) where the plugin makes them, fail at the TODO alone
    assert set(triton.values()) == {("failure", frozenset({TODO}))}, set(triton.values())
    assert set(reference.values()) == {("passed", frozenset())}
    # the TODO line is all that stands between the skeleton and a passing kernel
    kernel = project / "kernels" / f"{NAME}.py"
    lines = kernel.read_text().splitlines(keepends=True)
    todo = [line for line in lines if "raise NotImplementedError(TODO)" in line]
    assert len(todo) == 1
    kernel.write_text("".join(line for line in lines if line not in todo))
    # every case and opcheck; the compile items (a cold torch.compile each on the CPU) failed at the TODO above
    assert set(_outcomes(project, "-k", "not compile").values()) == {("passed", frozenset())}


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed")
def test_the_kernel_skeleton_passes_the_projects_lint(project):
    assert _new(project, NAME) == 0
    proc = _run(project, "-m", "ruff", "check", "--config", str(REPO / "pyproject.toml"), f"kernels/{NAME}.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("bad", ["MyKernel", "my-kernel", "1kernel", "_kernel", "my kernel", "class", ""])
def test_a_bad_name_fails_with_one_line_and_writes_nothing(project, capsys, bad):
    assert _new(project, bad) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and repr(bad) in err, err
    assert not (project / "specs").exists()
    assert sorted(p.name for p in (project / "kernels").iterdir()) == ["__init__.py", "common.py"]


def test_a_root_without_kernels_is_refused(tmp_path, capsys):
    assert _new(tmp_path, NAME) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "kernels: no such directory" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("existing", ["specs", "kernels"])
def test_an_existing_kernel_is_not_overwritten(project, capsys, existing):
    path = project / existing / (f"{NAME}.toml" if existing == "specs" else f"{NAME}.py")
    path.parent.mkdir(exist_ok=True)
    path.write_text("# the contributor's own work\n")
    assert _new(project, NAME) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{existing}/{NAME}" in err and "--force" in err, err
    assert path.read_text() == "# the contributor's own work\n"
    other = project / ("kernels" if existing == "specs" else "specs")
    assert not list(other.glob(f"{NAME}.*")), "the other file was written although the command failed"
    assert _new(project, NAME, "--force") == 0
    assert "raise NotImplementedError(TODO)" in (project / "kernels" / f"{NAME}.py").read_text()
    assert 'name = "my_kernel"' in (project / "specs" / f"{NAME}.toml").read_text()


def test_templates_are_package_data():
    """A non-editable install ships the templates: pyproject's package-data globs cover every file."""
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = globs.get("harness.cli", [])
    files = sorted(p.relative_to(TEMPLATES.parent).as_posix() for p in TEMPLATES.iterdir())
    assert files and all(any(fnmatch.fnmatch(f, g) for g in shipped) for f in files), (files, shipped)
