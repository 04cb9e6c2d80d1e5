"""``harness affected``: which kernels a change touches (the rule on path lists, then the command on a real git
repository), and that it stays light enough for the GitHub-hosted plan job (no torch import)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.affected import affected, output_lines
from harness.cli.main import main

KNOWN = ("rmsnorm", "rope", "softmax")


@pytest.mark.parametrize("changed,kernels,everything", [
    (["specs/rope.toml"], ("rope",), False),
    (["kernels/rmsnorm.py", "specs/softmax.toml"], ("rmsnorm", "softmax"), False),
    (["kernels/rmsnorm.py", "README.md", "docs/ci.md"], ("rmsnorm",), False),
    (["harness/gate/verdict.py"], KNOWN, True),
    (["pyproject.toml"], KNOWN, True),
    (["noxfile.py"], KNOWN, True),
    (["kernels/_common.py"], KNOWN, True),          # a helper without a spec: any kernel may import it
    ([".github/workflows/gpu.yml"], KNOWN, True),   # unknown paths count as everything
    (["README.md", "docs/architecture.md", "reports/h200/report.md"], (), False),
    (["specs/gone.toml"], (), False),               # a removed kernel: nothing left to test
    ([], (), False),
])
def test_rule(changed, kernels, everything):
    got = affected(changed, KNOWN)
    assert (got.kernels, got.everything, got.run) == (kernels, everything, bool(kernels))


def test_output_lines_are_github_output():
    lines = output_lines(affected(["docs/x.md"], KNOWN))
    assert lines[:3] == ["kernels=", "run=false", "all=false"] and lines[3].startswith("reason=documentation")


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    for k in KNOWN:
        (tmp_path / "specs").mkdir(exist_ok=True)
        (tmp_path / "kernels").mkdir(exist_ok=True)
        (tmp_path / "specs" / f"{k}.toml").write_text("")
        (tmp_path / "kernels" / f"{k}.py").write_text("")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "base")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_command_on_a_repository(repo, capsys):
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "kernels" / "rope.py").write_text("x = 1\n")
    (repo / "NOTES.md").write_text("notes\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "pr")
    out = repo / "github_output"
    assert main(["affected", "--base", base, "--github-output", str(out)]) == 0
    assert "kernels=rope\nrun=true\nall=false\n" in out.read_text()
    assert "kernels=rope" in capsys.readouterr().out
    assert main(["affected", "--all"]) == 0
    assert "kernels=rmsnorm,rope,softmax" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--base", "no-such-ref"], ["--base=--output=x"], []])
def test_bad_input_is_one_line(repo, capsys, argv):
    assert main(["affected", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("affected") and "\n" not in err


def test_plan_job_needs_no_torch():
    code = ("import sys; from harness.cli.main import main; rc = main(['affected', '--all']);"
            "bad = [m for m in ('torch', 'triton', 'numpy') if m in sys.modules]; sys.exit(rc or bool(bad))")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_module_means_every_kernel_that_runs_it(tmp_path):
    """A kernel module imported by another kernel's module (kernels.matmul's tile order in matmul_fp8), or named
    by a spec (a second backend module), affects those kernels too; a module no spec reaches is everything."""
    from harness.cli.affected import kernel_modules

    (tmp_path / "specs").mkdir()
    (tmp_path / "kernels").mkdir()
    (tmp_path / "specs" / "gemm.toml").write_text('[backends.tma]\nimpl = "kernels.gemm_tma:run"\n')
    (tmp_path / "specs" / "fp8.toml").write_text('reference = "kernels.fp8:ref"\n')
    (tmp_path / "specs" / "norm.toml").write_text('reference = "kernels.norm:ref"\n')
    (tmp_path / "kernels" / "gemm.py").write_text("from kernels.norm import helper\n")
    (tmp_path / "kernels" / "gemm_tma.py").write_text("import kernels.gemm\n")
    (tmp_path / "kernels" / "fp8.py").write_text("def f():\n    from kernels import gemm\n")
    (tmp_path / "kernels" / "norm.py").write_text("")
    (tmp_path / "kernels" / "unused.py").write_text("")
    known = ("fp8", "gemm", "norm")
    uses = kernel_modules(tmp_path / "specs", tmp_path / "kernels", known)
    assert uses == {"gemm": {"gemm", "gemm_tma", "norm"}, "fp8": {"fp8", "gemm", "norm"}, "norm": {"norm"}}
    assert affected(["kernels/norm.py"], known, uses).kernels == ("fp8", "gemm", "norm")
    assert affected(["kernels/gemm_tma.py"], known, uses).kernels == ("gemm",)
    assert affected(["kernels/gemm.cu"], known, uses).kernels == ("fp8", "gemm")
    assert affected(["kernels/unused.py"], known, uses).everything


@pytest.fixture
def repository_uses():
    """This repository's kernels and the kernels/ modules each runs."""
    from harness.cli.affected import kernel_modules

    repo = Path(__file__).resolve().parents[1]
    known = sorted(p.stem for p in (repo / "specs").glob("*.toml"))
    return known, kernel_modules(repo / "specs", repo / "kernels", known)


def test_the_repository_gemm_modules(repository_uses):
    known, uses = repository_uses
    assert {"int4_matmul", "matmul", "matmul_fp8"} <= set(affected(["kernels/matmul.py"], known, uses).kernels)


def test_the_repository_shared_helpers(repository_uses):
    """kernels/common.py holds the helpers every kernel runs (interpreter test, bf16 rounding): a change to it
    reaches each kernel through the imports, not as an unknown path; kernels/rmsnorm.py, no longer the helpers'
    home, reaches only the norms that share its launch heuristic."""
    known, uses = repository_uses
    common = affected(["kernels/common.py"], known, uses)
    # all_reduce is written over torch.distributed alone: no Triton launch, none of common's helpers
    assert (common.kernels, common.everything) == (tuple(k for k in known if k != "all_reduce"), False)
    assert affected(["kernels/rmsnorm.py"], known, uses).kernels == ("fused_add_rmsnorm", "layernorm", "rmsnorm")
