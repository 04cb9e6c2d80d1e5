"""Another repository's layout (docs/adopting.md): a package under src/ (``mylib.ops``, as Liger-Kernel keeps
``liger_kernel.ops``), specs in bench/specs, all named in its ``[tool.kernel-harness]`` table. ``new`` writes
there, ``affected`` watches those folders, the gate's base tree takes them, and ``--kernel`` collects nothing
but the specs.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.config import load_config
from harness.gate.basetree import materialize
from tests.e2e import ALL_LAYOUTS, REPO, TEMPLATE

TABLE = '[tool.kernel-harness]\nspecs = ["bench/specs"]\nimport-roots = ["src"]\nkernels = ["src/mylib/ops"]\n'
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
SCALE = (REPO / "tests" / "planted" / "broken_kernels.py").read_text()


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV})
    return done.stdout.strip()


def adopter_spec(directory: Path, name: str, module: str) -> Path:
    """``directory/name.toml``: the planted scale kernel's spec with both the kernel and its reference in
    ``module`` (a copy of tests/planted/broken_kernels.py in the other repository: tests.* is not there)."""
    text = TEMPLATE.read_text().replace('name = "scale"', f'name = "{name}"').replace("{layouts}", ALL_LAYOUTS)
    path = directory / f"{name}.toml"
    path.write_text(text.replace("{impl}", f"{module}:scale").replace("tests.planted.broken_kernels:", f"{module}:"))
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """Kernels a and b in mylib.ops, both through mylib.ops.common; mylib.helpers outside the kernel folder."""
    root = tmp_path / "adopter"
    ops = root / "src" / "mylib" / "ops"
    ops.mkdir(parents=True)
    (root / "bench" / "specs").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "adopter"\n\n' + TABLE)
    (root / "src" / "mylib" / "__init__.py").write_text("")
    (root / "src" / "mylib" / "helpers.py").write_text("")
    (ops / "__init__.py").write_text("")
    (ops / "common.py").write_text("FACTOR = 2.0\n")
    (ops / "a.py").write_text(SCALE + "\nfrom mylib.ops.common import FACTOR  # noqa: E402,F401\n")
    (ops / "b.py").write_text(SCALE + "\nfrom .common import FACTOR  # noqa: E402,F401\n")
    for k in "ab":
        adopter_spec(root / "bench" / "specs", k, f"mylib.ops.{k}")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "base")
    return root


def test_new_writes_into_the_configured_folders_a_self_contained_module(project, capsys):
    assert main(["new", "my_op", "--root", str(project)]) == 0
    spec, module = project / "bench" / "specs" / "my_op.toml", project / "src" / "mylib" / "ops" / "my_op.py"
    assert spec.is_file() and module.is_file(), capsys.readouterr().out
    text = spec.read_text()
    assert 'impl = "mylib.ops.my_op:my_op"' in text and 'reference = "mylib.ops.my_op:my_op_ref"' in text
    source = module.read_text()
    imported = {a.name for n in ast.parse(source).body if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.parse(source).body if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "dataclasses", "torch", "triton", "triton.language"}, imported
    assert 'TODO = "TODO: write the kernel in src/mylib/ops/my_op.py"' in source
    # `python -m harness` puts the cwd on sys.path, not src/: the import roots do
    done = subprocess.run([sys.executable, "-m", "harness", "validate", "--specs", "bench/specs"], cwd=project,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "bench/specs/my_op.toml: ok" in done.stdout, done.stdout + done.stderr


def test_new_refuses_a_missing_kernel_folder(project, capsys):
    (project / "pyproject.toml").write_text(TABLE.replace("src/mylib/ops", "src/mylib/kernels"))
    assert main(["new", "my_op", "--root", str(project)]) == 2
    assert "src/mylib/kernels: no such directory" in capsys.readouterr().err


@pytest.mark.parametrize("changed,kernels,everything", [
    ("src/mylib/ops/common.py", "a,b", False),      # both import it, absolutely and relatively
    ("src/mylib/ops/a.py", "a", False),
    ("bench/specs/b.toml", "b", False),
    ("src/mylib/helpers.py", "a,b", True),          # outside the kernel folder: may change anything
    ("docs/notes.md", "", False),
])
def test_affected_watches_the_configured_folders(project, monkeypatch, capsys, changed, kernels, everything):
    base = _git(project, "rev-parse", "HEAD")
    path = project / changed
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(path.read_text() + "\n# changed\n" if path.exists() else "changed\n")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "pr")
    monkeypatch.chdir(project / "bench")  # from a subfolder: the table and the repository are found upward
    assert main(["affected", "--base", base]) == 0
    out = capsys.readouterr().out
    assert f"kernels={kernels}\n" in out and f"all={'true' if everything else 'false'}" in out, out


def test_the_base_tree_takes_the_configured_kernel_folder(project, tmp_path):
    base = materialize("HEAD", project, tmp_path / "base", [project / "bench" / "specs"], load_config(project))
    top = Path(base.root) / base.package
    assert base.aa and set(base.spec_sha256) == {"a.toml", "b.toml"}
    assert f"\nfrom {base.package}.mylib.ops.common import" in (top / "mylib" / "ops" / "a.py").read_text()
    assert f'"{base.package}.mylib.ops.a:scale"' in (Path(base.specs_dir) / "a.toml").read_text()
    assert not (top / "src").exists() and not (top / "mylib" / "helpers.py").exists()  # the kernel folder alone
    sys.path.append(base.root)
    try:
        for k in "ab":
            mod = importlib.import_module(f"{base.package}.mylib.ops.{k}")
            assert mod.__file__.startswith(base.root)
        assert sys.modules[f"{base.package}.mylib.ops.common"].__file__.startswith(base.root)
    finally:
        sys.path.remove(base.root)
    (project / "src" / "mylib" / "ops" / "common.py").write_text("FACTOR = 3.0\n")  # an uncommitted change
    assert not materialize("HEAD", project, tmp_path / "base2", [project / "bench" / "specs"],
                           load_config(project)).aa


def test_kernel_collects_the_specs_alone(project):
    """With --kernel the project's own tests are not even imported: a test module that cannot import is no error."""
    (project / "tests").mkdir()
    (project / "tests" / "test_broken.py").write_text("raise ImportError('the project test suite was imported')\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--kernel", "a",
                           "--dtype", "fp32", "-k", "128"], cwd=project, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "test_broken" not in done.stdout


def test_kernel_in_this_repository_collects_no_harness_test():
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--kernel", "rope"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    items = [ln for ln in done.stdout.splitlines() if "::" in ln]
    assert items and all(ln.startswith("specs/rope.toml::") for ln in items), items[:5]
    assert "deselected" not in done.stdout  # not collected and then dropped: never collected


def _blocks(lang: str) -> list[str]:
    import re

    return re.findall(rf"^```{lang}\n(.*?)^```", (REPO / "docs" / "adopting.md").read_text(), re.M | re.S)


def test_the_documented_table_adapter_and_spec_validate(tmp_path, monkeypatch, capsys):
    """docs/adopting.md's own example, with a plain-torch stand-in for Liger's autograd function."""
    table = next(b for b in _blocks("toml") if b.startswith("[tool.kernel-harness]"))
    spec = next(b for b in _blocks("toml") if b.startswith("[kernel]"))
    adapter = next(b for b in _blocks("python") if b.startswith("# bench/kh_adapters/rms_norm.py"))
    stand_in = ("class LigerRMSNormFunction:\n    @staticmethod\n    def apply(x, w, eps, offset, casting):\n"
                "        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps).to(x.dtype) * w\n")
    adapter = adapter.replace("from liger_kernel.ops.rms_norm import LigerRMSNormFunction\n", stand_in)
    (tmp_path / "pyproject.toml").write_text(table)
    for folder in ("bench/specs", "bench/kh_adapters", "src/liger_kernel/ops"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "bench" / "kh_adapters" / "__init__.py").write_text("")
    (tmp_path / "bench" / "kh_adapters" / "rms_norm.py").write_text(adapter)
    (tmp_path / "bench" / "specs" / "rms_norm.toml").write_text(spec)
    monkeypatch.chdir(tmp_path)
    assert main(["validate"]) == 0, capsys.readouterr()
    assert "bench/specs/rms_norm.toml: ok" in capsys.readouterr().out
