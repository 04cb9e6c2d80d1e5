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
