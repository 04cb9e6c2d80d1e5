"""The workflows' own rules, which no linter knows (docs/ci.md): each rule is a function that lists problems,
run on the real workflows (no problem) and on a planted bad workflow (its problem found).

- every action pinned to a full commit SHA with a version comment; every checkout without persisted credentials
- every nox session and harness command a workflow (or .ci/run) calls exists
- a failing gate fails its job: no continue-on-error, no ``|| true``
- no job on a self-hosted runner starts for a fork's pull request without the reviewed environment ``gpu-ci``
  (a reusable workflow counts as one a pull request may call; a job on a runner its caller names either deploys
  to ``gpu-ci`` or refuses a fork's pull request, first thing, on a runner that is not GitHub-hosted)
- no job that checks out pull-request code holds a write permission or a secret; comment.yml runs nothing
- least privilege and bounded runs: top-level ``permissions``, ``concurrency``, ``timeout-minutes`` on every job
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
REVIEWED_ENV = "gpu-ci"
FORK_TO_REVIEWED = re.compile(r"head\.repo\.full_name\s*!=\s*github\.repository\s*&&\s*'" + REVIEWED_ENV + "'")
FORK_GUARD = re.compile(r"runner\.environment\s*!=\s*'github-hosted'.*head\.repo\.full_name\s*!=\s*github\.repository")
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
USES_LINE = re.compile(r"uses:\s*([^\s#]+)(\s*#\s*(\S+))?")


def load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    if True in doc:  # YAML 1.1 reads the key `on` as a boolean
        doc["on"] = doc.pop(True)
    return doc


def triggers(doc: dict) -> set[str]:
    on = doc.get("on")
    return {on} if isinstance(on, str) else set(on or ())


def steps(doc: dict):
    for name, job in (doc.get("jobs") or {}).items():
        for step in job.get("steps") or ():
            yield name, job, step


def runs(doc: dict) -> list[str]:
    return [step["run"] for _, _, step in steps(doc) if "run" in step]


# ----------------------------------------------------------------------------- the rules

def unpinned(text: str) -> list[str]:
    problems = []
    for m in USES_LINE.finditer(text):
        ref, version = m.group(1), m.group(3)
        if ref.startswith("./"):
            continue
        if not PINNED.match(ref):
            problems.append(f"{ref}: not pinned to a 40-hex commit SHA")
        elif not (version and re.fullmatch(r"v\d+\.\d+\.\d+", version)):
            problems.append(f"{ref}: no '# vX.Y.Z' comment naming the pinned version")
    return problems


def persisted_credentials(doc: dict) -> list[str]:
    return [f"{name}: checkout without persist-credentials: false" for name, _, step in steps(doc)
            if str(step.get("uses", "")).startswith("actions/checkout@")
            and (step.get("with") or {}).get("persist-credentials") is not False]


def nox_sessions() -> set[str]:
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    return {f.name for f in tree.body if isinstance(f, ast.FunctionDef)
            and any("session" in ast.unparse(d) for d in f.decorator_list)}


def harness_commands() -> set[str]:
    from harness.cli.main import _load_plugins
    from harness.cli.registry import COMMANDS

    _load_plugins()
    return set(COMMANDS)


def unknown_calls(scripts: list[str]) -> list[str]:
    problems = []
    for script in scripts:
        for m in re.finditer(r"nox\b[^\n]*?\s-s\s+([\w,-]+)", script):
            problems += [f"nox session {s!r} is not in noxfile.py" for s in m.group(1).split(",")
                         if s not in nox_sessions()]
        for m in re.finditer(r"-m\s+harness\s+([\w-]+)", script):
            if m.group(1) not in harness_commands():
                problems.append(f"harness command {m.group(1)!r} does not exist")
        if re.search(r"\bbash\s+\.ci/run\b", script):
            problems += unknown_calls([(ROOT / ".ci" / "run").read_text()])
    return problems


def swallowed_failures(doc: dict) -> list[str]:
    problems = []
    for name, job in (doc.get("jobs") or {}).items():
        if "continue-on-error" in job:
            problems.append(f"{name}: continue-on-error on the job")
        for step in job.get("steps") or ():
            if "continue-on-error" in step:
                problems.append(f"{name}: continue-on-error on step {step.get('name') or step.get('run')!r}")
            if re.search(r"\|\|\s*(true|:|exit 0)\b|set \+e", step.get("run", "")):
                problems.append(f"{name}: a run step swallows its exit code: {step['run'][:60]!r}")
    return problems


def _runner_labels(job: dict) -> list:
    runs_on = job.get("runs-on", "")
    if isinstance(runs_on, str) and "${{" in runs_on:
        matrix = (job.get("strategy") or {}).get("matrix") or {}
        key = re.search(r"matrix\.(\w+)", runs_on)
        listed = matrix.get(key.group(1)) if key else None
        if not key or isinstance(listed, str):
            return ["self-hosted"]  # an expression we cannot follow (a caller's input) counts as a self-hosted runner
        values = [row.get(key.group(1)) for row in matrix.get("include") or ()] + list(listed or ())
        return [v for val in values for v in (val if isinstance(val, list) else [val])]
    return runs_on if isinstance(runs_on, list) else [runs_on]


def _fork_guarded(job: dict) -> bool:
    """The job's first step, before any checkout, fails a fork's pull request on a runner that is not
    GitHub-hosted."""
    first = (job.get("steps") or [{}])[0]
    return bool(FORK_GUARD.search(str(first.get("if", "")))) and "exit 1" in str(first.get("run", ""))


def fork_unsafe(doc: dict) -> list[str]:
    problems = []
    on = triggers(doc)
    for name, job in (doc.get("jobs") or {}).items():
        if "self-hosted" not in _runner_labels(job):
            continue
        if on & {"pull_request_target", "workflow_run"}:
            problems.append(f"{name}: a self-hosted job in a workflow with base-repository privileges")
        env = job.get("environment")
        env = env.get("name") if isinstance(env, dict) else env
        reviewed = env == REVIEWED_ENV or (isinstance(env, str) and FORK_TO_REVIEWED.search(env)) \
            or _fork_guarded(job)
        if on & {"pull_request", "workflow_call"} and not reviewed:
            problems.append(f"{name}: runs on a self-hosted runner for a fork's pull request without the reviewed "
                            f"environment {REVIEWED_ENV!r} (environment: {env!r})")
    return problems


def _writes(perms) -> bool:
    return perms == "write-all" or (isinstance(perms, dict) and "write" in perms.values())


def privileged_checkout(doc: dict) -> list[str]:
    problems = []
    if _writes(doc.get("permissions")) or doc.get("permissions") not in ({}, "read-all") and \
            not isinstance(doc.get("permissions"), dict):
        problems.append("top-level permissions must be {} or read-only")
    for name, job in (doc.get("jobs") or {}).items():
        checks_out = any(str(s.get("uses", "")).startswith("actions/checkout@") for s in job.get("steps") or ())
        if not checks_out:
            continue
        if _writes(job.get("permissions")) or "permissions" not in job and _writes(doc.get("permissions")):
            problems.append(f"{name}: checks out code and holds a write permission")
        if "secrets." in yaml.safe_dump(job):
            problems.append(f"{name}: checks out code and reads a secret")
    if triggers(doc) & {"workflow_run", "pull_request_target"}:
        if any(s.get("uses", "").startswith("actions/checkout@") for _, _, s in steps(doc)) or runs(doc):
            problems.append("a privileged workflow (workflow_run) checks out or runs code: it may only post data")
    return problems


def unbounded(doc: dict) -> list[str]:
    problems = [] if "permissions" in doc else ["no top-level permissions"]
    problems += [] if "concurrency" in doc else ["no concurrency group"]
    problems += [f"{n}: no timeout-minutes" for n, j in (doc.get("jobs") or {}).items() if "timeout-minutes" not in j]
    return problems


def all_problems(path: Path) -> list[str]:
    doc, text = load(path), path.read_text()
    return (unpinned(text) + persisted_credentials(doc) + unknown_calls(runs(doc)) + swallowed_failures(doc)
            + fork_unsafe(doc) + privileged_checkout(doc) + unbounded(doc))


# ----------------------------------------------------------------------------- the real workflows

def test_the_workflows_exist():
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "gpu.yml", "comment.yml", "kernel-harness.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_follows_the_rules(path):
    assert all_problems(path) == []


def test_gpu_workflow_runs_the_gate_and_its_verdict():
    doc = load(ROOT / ".github" / "workflows" / "gpu.yml")
    scripts = "\n".join(runs(doc))
    assert "-m harness ci-gpu" in scripts and "-m harness ci-needs" in scripts and "-m harness affected" in scripts
    assert doc["jobs"]["gpu"]["strategy"]["fail-fast"] is False
    assert {"pull_request", "schedule", "workflow_dispatch"} <= triggers(doc)


def test_reusable_workflow_for_other_repositories():
    """kernel-harness.yml (docs/adopting.md): called, never triggered; the caller's settings come in as inputs and
    reach the scripts through env only; the gpu jobs are gpu.yml's, the gate is the one check to require."""
    doc = load(ROOT / ".github" / "workflows" / "kernel-harness.yml")
    assert triggers(doc) == {"workflow_call"}
    assert {"harness", "cpu-runner", "gpu-runners", "specs", "policy"} <= set(doc["on"]["workflow_call"]["inputs"])
    assert not [r for r in runs(doc) if "${{" in r]  # no expression spliced into a script
    jobs = doc["jobs"]
    assert FORK_TO_REVIEWED.search(jobs["gpu"]["environment"]) and jobs["gpu"]["strategy"]["fail-fast"] is False
    assert _fork_guarded(jobs["cpu"]) and _fork_guarded(jobs["plan"])
    scripts = "\n".join(runs(doc))
    for command in ("affected --base", "affected --all", "ci-gpu", "ci-needs", "validate"):
        assert f"-m harness {command}" in scripts, command
    assert set(jobs["gate"]["needs"]) == {"cpu", "plan", "gpu"} and jobs["gate"]["if"] == "always()"


def test_ci_runs_the_ci_script():
    assert "bash .ci/run" in runs(load(ROOT / ".github" / "workflows" / "ci.yml"))
    assert "nox -s workflows" in (ROOT / ".ci" / "run").read_text()


# ----------------------------------------------------------------------------- planted bad workflows

GOOD_CHECKOUT = ("      - uses: actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8 # v5.0.0\n"
                 "        with:\n          persist-credentials: false\n")


def _plant(tmp_path: Path, jobs: str, *, on: str = "pull_request", top: str = "permissions: {}\n"
           "concurrency: x\n") -> Path:
    path = tmp_path / "bad.yml"
    path.write_text(f"name: bad\non: {on}\n{top}jobs:\n{jobs}")
    return path


def _job(steps: str, extra: str = "", runs_on: str = "ubuntu-latest") -> str:
    return (f"  j:\n    runs-on: {runs_on}\n    timeout-minutes: 5\n    permissions:\n      contents: read\n"
            f"{extra}    steps:\n{steps}")


def test_planted_good_workflow_is_clean(tmp_path):
    steps = GOOD_CHECKOUT + "      - run: python3 -m harness affected --all\n"
    assert all_problems(_plant(tmp_path, _job(steps))) == []


@pytest.mark.parametrize("steps,expected", [
    ("      - uses: actions/checkout@v4\n", "not pinned"),
    ("      - uses: actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8\n", "version"),
    ("      - uses: actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8 # v5.0.0\n", "persist-credentials"),
    (GOOD_CHECKOUT + "      - run: python3 -m nox -s no-such-session\n", "no-such-session"),
    (GOOD_CHECKOUT + "      - run: python3 -m harness no-such-command\n", "no-such-command"),
    (GOOD_CHECKOUT + "      - run: python3 -m harness ci-gpu --kernels a --against b || true\n", "swallows"),
    (GOOD_CHECKOUT + "      - run: python3 -m harness ci-needs\n        continue-on-error: true\n",
     "continue-on-error"),
    (GOOD_CHECKOUT + "      - run: echo ${{ secrets.TOKEN }}\n", "secret"),
])
def test_planted_step_problem_is_found(tmp_path, steps, expected):
    problems = all_problems(_plant(tmp_path, _job(steps)))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("extra", [
    "",                                                          # no environment at all
    "    environment: gpu-ci-trusted\n",                         # an environment without reviewers
    "    environment: ${{ github.event.pull_request.head.repo.full_name == github.repository && 'gpu-ci' "
    "|| 'gpu-ci-trusted' }}\n",                                  # the condition reversed: forks go unreviewed
])
def test_planted_self_hosted_job_without_approval_is_found(tmp_path, extra):
    jobs = _job(GOOD_CHECKOUT, extra, runs_on="[self-hosted, linux, gpu, sm90]")
    assert any("without the reviewed environment" in p for p in all_problems(_plant(tmp_path, jobs)))


def test_planted_reusable_workflow_on_callers_runners(tmp_path):
    """A reusable workflow's job on runners its caller names is self-hosted until shown otherwise."""
    def problems(jobs: str) -> list[str]:
        return all_problems(_plant(tmp_path, jobs, on="workflow_call"))

    matrix = "    strategy:\n      matrix:\n        runner: ${{ fromJSON(inputs.runners) }}\n"
    unreviewed = "without the reviewed environment"
    assert any(unreviewed in p for p in problems(_job(GOOD_CHECKOUT, matrix, runs_on="${{ matrix.runner }}")))
    guard = ("      - if: runner.environment != 'github-hosted' && github.event_name == 'pull_request' && "
             "github.event.pull_request.head.repo.full_name != github.repository\n        run: exit 1\n")
    assert problems(_job(guard + GOOD_CHECKOUT, runs_on="${{ inputs.runner }}")) == []
    late = _job(GOOD_CHECKOUT + guard, runs_on="${{ inputs.runner }}")  # after the checkout: too late
    assert any(unreviewed in p for p in problems(late))


def test_planted_self_hosted_matrix_job_is_followed(tmp_path):
    extra = ("    strategy:\n      matrix:\n        include:\n          - runner: [self-hosted, gpu]\n")
    jobs = _job(GOOD_CHECKOUT, extra, runs_on="${{ matrix.runner }}")
    assert any("without the reviewed environment" in p for p in all_problems(_plant(tmp_path, jobs)))
    fixed = _job(GOOD_CHECKOUT, extra + "    environment: gpu-ci\n", runs_on="${{ matrix.runner }}")
    assert all_problems(_plant(tmp_path, fixed)) == []


def test_planted_privilege_problems_are_found(tmp_path):
    writer = _job(GOOD_CHECKOUT).replace("contents: read", "contents: write")
    assert any("write permission" in p for p in all_problems(_plant(tmp_path, writer)))
    runner = _job("      - run: echo hi\n")
    assert any("privileged workflow" in p for p in all_problems(_plant(tmp_path, runner, on="workflow_run")))
    assert any("top-level" in p for p in all_problems(_plant(tmp_path, runner, top="permissions: write-all\n"
                                                                                 "concurrency: x\n")))


def test_planted_unbounded_workflow_is_found(tmp_path):
    problems = all_problems(_plant(tmp_path, _job(GOOD_CHECKOUT).replace("    timeout-minutes: 5\n", ""), top=""))
    assert {"no top-level permissions", "no concurrency group", "j: no timeout-minutes"} <= set(problems)


def test_dry_run_runs_the_gpu_jobs_commands():
    """bench/ci_dry_run.sh must run gpu.yml's install and gate lines, not a copy that drifted."""
    doc = load(ROOT / ".github" / "workflows" / "gpu.yml")
    script = (ROOT / "bench" / "ci_dry_run.sh").read_text()
    install = next(s["run"] for s in doc["jobs"]["gpu"]["steps"] if "pip install" in s.get("run", ""))
    for line in install.strip().splitlines():
        assert line.strip() in script, line
    gate = next(s["run"] for s in doc["jobs"]["gpu"]["steps"] if "harness ci-gpu" in s.get("run", ""))
    github_only = {"--event", "--step-summary"}
    flags = set(re.findall(r"(--[\w-]+)", gate)) - github_only
    dry = script[script.index("-m harness ci-gpu"):]
    assert flags <= set(re.findall(r"(--[\w-]+)", dry[:dry.index("${CI_GPU_EXTRA")])), flags
    assert "-m harness affected --base" in script
