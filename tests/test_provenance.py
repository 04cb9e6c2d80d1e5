"""Provenance names the repository under test: git_commit and git_dirty are those of the repository the command
runs in, not of the folder the harness is installed in; the harness's own version (and its commit, only from a
checkout of its own) is recorded beside them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.timing import environment
from harness.timing.environment import collect_environment, harness_provenance, repository
from tests.e2e import REPO

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


@pytest.fixture
def other_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "adopter"
    (repo / "specs").mkdir(parents=True)
    (repo / "specs" / "k.toml").write_text("# a spec\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "one")
    return repo


def test_the_commit_is_the_repository_under_tests(other_repo, monkeypatch):
    monkeypatch.chdir(other_repo / "specs")  # from a subfolder too
    env = collect_environment(device="cpu")
    assert env["git_commit"] == _git(other_repo, "rev-parse", "HEAD") != _git(REPO, "rev-parse", "HEAD")
    assert env["git_dirty"] is False and env["repository"] == "adopter"
    (other_repo / "specs" / "k.toml").write_text("# changed\n")
    assert repository()["git_dirty"] is True
    (other_repo / "untracked.txt").write_text("")  # untracked files do not make a run dirty
    (other_repo / "specs" / "k.toml").write_text("# a spec\n")
    assert repository()["git_dirty"] is False


def test_outside_a_repository_nothing_is_guessed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if subprocess.run(["git", "rev-parse", "--git-dir"], capture_output=True).returncode == 0:
        pytest.skip("the temporary folder is inside a git repository")
    assert repository() == {"git_commit": None, "git_dirty": None, "repository": None}


def test_the_harness_is_recorded_apart(other_repo, monkeypatch):
    import harness

    monkeypatch.chdir(other_repo)
    env = collect_environment(device="cpu")
    assert env["harness_version"] == harness.__version__ and "harness" not in env
    if (REPO / ".git").exists() and Path(harness.__file__).resolve().parents[1] == REPO:
        assert env["harness_commit"] == _git(REPO, "rev-parse", "HEAD")  # this checkout, editable
    # installed from a wheel into a venv that lies inside the repository under test: not the harness's commit
    site = other_repo / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setattr(environment, "_HARNESS_SOURCE", site)
    assert harness_provenance() == {"harness_version": harness.__version__}


def test_the_report_says_whose_commit_it_is():
    from harness.report.render import PROVENANCE_NOTES, _flat_env

    rows: list = []
    _flat_env("", {"git_commit": "a" * 40, "harness_version": "0.1.0", "torch": "2.13"}, rows)
    assert [r[0] for r in rows] == [f"`git_commit` ({PROVENANCE_NOTES['git_commit']})",
                                    f"`harness_version` ({PROVENANCE_NOTES['harness_version']})", "`torch`"]
