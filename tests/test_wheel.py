"""The wheel installs the harness alone: ``harness/`` and its dist-info, no top-level ``kernels`` (this
repository's examples), which would shadow the adopting repository's own package of that name.

The wheel is built from a copy of the sources (so the checkout stays clean) without build isolation (offline:
setuptools comes from this environment). Installed with --no-deps into a fresh venv, its console script and
``affected`` (which needs no torch) run from another repository, and so do that repository's generated tests,
its own ``kernels`` package included. The install with every dependency from the package index is .ci/run's
examples/liger step.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.e2e import REPO
from tests.test_adopting import adopter_spec

if importlib.util.find_spec("setuptools") is None:
    pytest.skip("building the wheel needs setuptools in this environment", allow_module_level=True)

DIST_INFO = "kernel_harness-0.1.0.dist-info/"
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}


def _run(*cmd, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], cwd=cwd, env=CLEAN_ENV, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for folder in ("harness", "kernels", "specs"):  # kernels/ and specs/ beside it, as in the checkout: not shipped
        shutil.copytree(REPO / folder, src / folder, ignore=ignore)
    dist = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", src, "-w", dist)
    (path,) = dist.glob("kernel_harness-*.whl")
    return path


def _venv(where: Path, wheel: Path) -> Path:
    """A fresh venv (no system site packages) with the wheel alone installed, by this environment's pip."""
    _run(sys.executable, "-m", "venv", "--without-pip", where)
    bin_dir = where / "bin"
    _run(sys.executable, "-m", "pip", "--python", bin_dir / "python", "install", "-q", "--no-deps", "--no-index",
         wheel)
    return bin_dir


def _adopter(root: Path) -> Path:
    """A repository with a `kernels` package of its own (kernels.kh_kl_div, as the new user had) and a spec."""
    (root / "kernels").mkdir(parents=True)
    (root / "specs").mkdir()
    (root / "kernels" / "__init__.py").write_text("")
    (root / "kernels" / "kh_kl_div.py").write_text((REPO / "tests" / "planted" / "broken_kernels.py").read_text())
    adopter_spec(root / "specs", "kh_kl_div", "kernels.kh_kl_div")
    (root / "pyproject.toml").write_text('[project]\nname = "adopter"\n\n[tool.kernel-harness]\nspecs = ["specs"]\n')
    return root


def test_the_wheel_holds_the_harness_alone(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        top_level = z.read(DIST_INFO + "top_level.txt").decode().split()
        entry_points = z.read(DIST_INFO + "entry_points.txt").decode()
    stray = [n for n in names if not (n.startswith("harness/") or n.startswith(DIST_INFO))]
    assert stray == [] and top_level == ["harness"], stray[:10]
    for data in ("harness/cli/templates/kernel.py.tmpl", "harness/cli/templates/spec.toml.tmpl",
                 "harness/report/templates/report.md.j2", "harness/gate/calibration.json", "harness/config.py"):
        assert data in names, data
    assert "kernel_harness = harness.plugin" in entry_points and "kernel-harness = harness.cli:main" in entry_points


def test_the_wheel_installs_and_runs_from_another_repository(wheel, tmp_path):
    bin_dir = _venv(tmp_path / "venv", wheel)
    project = _adopter(tmp_path / "adopter")
    assert "affected" in _run(bin_dir / "kernel-harness", "--help", cwd=project).stdout
    assert "kernels=kh_kl_div" in _run(bin_dir / "kernel-harness", "affected", "--all", cwd=project).stdout
    probe = "import importlib.util as u; print(u.find_spec('kernels') is None, u.find_spec('harness').origin)"
    shipped, origin = _run(bin_dir / "python", "-c", probe, cwd=tmp_path).stdout.split()
    assert shipped == "True" and str(tmp_path / "venv") in origin  # no kernels installed; the venv's harness


def test_the_adopting_repositorys_own_kernels_package_is_tested(wheel, tmp_path):
    """The new user's failure ("cannot import kernels.kh_kl_div"): pytest in their repository, through the
    pytest11 entry point of the installed wheel, imports their kernels package. The venv sees this environment's
    torch and triton through a .pth line (as gpu.yml's runner venv does), so nothing is downloaded; the harness
    it imports is the wheel's (this environment's own is an editable finder, which a .pth path does not load)."""
    bin_dir = _venv(tmp_path / "venv", wheel)
    purelib = _run(bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").stdout.strip()
    Path(purelib, "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    (Path(purelib) / "kernels").mkdir()  # an installed `kernels` (the package index has one) must not shadow theirs
    (Path(purelib) / "kernels" / "__init__.py").write_text("")
    # pytest's console script, as pip writes one: its folder, not the cwd, leads sys.path (unlike python -m)
    (bin_dir / "pytest").write_text(f"#!{bin_dir / 'python'}\nimport sys\nfrom pytest import console_main\n"
                                    "sys.exit(console_main())\n")
    (bin_dir / "pytest").chmod(0o755)
    project = _adopter(tmp_path / "adopter")
    where = _run(bin_dir / "python", "-c", "import harness; print(harness.__file__)", cwd=project).stdout
    assert where.startswith(purelib), where
    # the cases and opcheck: the compile item adds a cold torch.compile and nothing of the wheel's packaging
    done = _run(bin_dir / "pytest", "-q", "-p", "no:cacheprovider", "--kernel", "kh_kl_div", "--dtype", "fp32",
                "-k", "not compile", cwd=project, timeout=900)
    assert " passed" in done.stdout and "failed" not in done.stdout, done.stdout[-3000:]
