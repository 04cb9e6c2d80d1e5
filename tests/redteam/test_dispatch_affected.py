"""Attack: a pull request edits ``affected`` (and the GPU job's ``ci`` logic) so that it prints ``run=false`` and
the GPU jobs are skipped, then counts on a skipped GPU job passing the gate.

Played for real: a throwaway git repository whose base commit holds this checkout's harness, and a pull
request commit that both changes a kernel and rewrites harness/cli/affected.py and harness/gate/ci.py. The
trusted plan job's commands run as the workflow runs them (the base checkout, ``ci-candidate``, then the
base's ``affected``), and the gate job's verdict is harness.gate.status's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.gate import status as st
from harness.gate.authorize import Decision

ROOT = Path(__file__).resolve().parents[2]
EVIL_AFFECTED = '''"""A pull request's affected: nothing ever needs a GPU."""
from harness.cli.registry import EXIT_OK, command, options


@command("affected", "nothing")
@options(lambda p: [p.add_argument(a, nargs="?") for a in ("--base", "--head", "--github-output")])
def cmd_affected(args) -> int:
    print("kernels=\\nrun=false")
    if args.github_output:
        open(args.github_output, "a").write("kernels=\\nrun=false\\nreason=documentation only\\n")
    return EXIT_OK
'''


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    """base/: the trusted checkout at the base commit; pr/: the fork's checkout at its head commit."""
    tmp = tmp_path_factory.mktemp("affected")
    pr = tmp / "pr"
    pr.mkdir()
    for name in ("harness", "kernels", "specs"):
        shutil.copytree(ROOT / name, pr / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", pr / "pyproject.toml")
    _git(pr, "init", "-q")
    _git(pr, "add", "-A")
    _git(pr, "commit", "-qm", "base")
    base_sha = _git(pr, "rev-parse", "HEAD")
    (pr / "kernels" / "rope.py").write_text((pr / "kernels" / "rope.py").read_text() + "\n# a real change\n")
    (pr / "harness" / "cli" / "affected.py").write_text(EVIL_AFFECTED)
    gate_ci = pr / "harness" / "gate" / "ci.py"
    gate_ci.write_text(gate_ci.read_text().replace('return Outcome(False, False, f"{slower} slower")',
                                                   'return Outcome(True, False, "fine")'))
    _git(pr, "commit", "-qam", "pull request")
    head_sha = _git(pr, "rev-parse", "HEAD")
    base = tmp / "base"
    _git(tmp, "clone", "-q", str(pr), str(base))
    _git(base, "checkout", "-q", base_sha)
    return base, pr, base_sha, head_sha


def _harness(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def test_the_plan_job_runs_the_base_s_affected_over_the_pull_request_s_files(repos, tmp_path):
    base, pr, base_sha, head_sha = repos
    took = _harness(base, "ci-candidate", "--head", head_sha, "--from", str(pr))
    assert took.returncode == 0, took.stderr
    # the candidate side came in; the pull request's harness did not
    assert "# a real change" in (base / "kernels" / "rope.py").read_text()
    assert "nothing ever needs a GPU" not in (base / "harness" / "cli" / "affected.py").read_text()
    out = tmp_path / "github_output"
    plan = _harness(base, "affected", "--base", base_sha, "--head", head_sha, "--github-output", str(out))
    assert plan.returncode == 0, plan.stderr
    lines = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert lines["run"] == "true" and lines["all"] == "true" and "harness/" in lines["reason"]
    print(f"REDTEAM edit-affected: caught: the base's affected says run=true ({lines['reason']}); the pull "
          "request's affected.py and ci.py never ran")


def test_gpu_jobs_skipped_while_planned_fail_the_gate():
    auth = Decision(True, True, 7, "a" * 40, "b" * 40, "pushed by maint (write)", "maint")
    needs = {"authorize": {"result": "success"}, "plan": {"result": "success"}, "gpu": {"result": "skipped"}}
    v = st.verdict(auth, auth, needs, True, [])
    assert v.state == "failure"
    print(f"REDTEAM edit-affected: caught: planned GPU jobs that were skipped fail the status: {v.description}")


def test_the_workflow_runs_no_harness_command_from_the_pull_request_s_checkout():
    from tests.redteam.github_sim import load

    doc = load(ROOT / ".github" / "workflows" / "kernel-harness.yml")
    for name, job in doc["jobs"].items():
        for step in job.get("steps") or ():
            script = step.get("run", "")
            if "-m harness" not in script:
                continue
            where = step.get("working-directory", "")
            assert where in ("base", "") and not where.startswith("pr"), (name, step.get("name"))
            assert "cd pr" not in script and "../pr/" not in script, (name, step.get("name"))
    print("REDTEAM edit-affected: no effect: every harness command of the workflow runs from the base checkout")
