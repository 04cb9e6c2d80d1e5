"""The workflows' own rules, which no linter knows (docs/ci.md): each rule is a function that lists problems,
run on the real workflows (no problem) and on a planted bad workflow (its problem found).

- every action pinned to a full commit SHA with a version comment; every checkout without persisted credentials
- every nox session and harness command a workflow (or .ci/run) calls exists
- a failing gate fails its job: no continue-on-error, no ``|| true``
- trusted dispatch: no self-hosted job in a workflow a ``pull_request`` event triggers; in any other workflow
  (a reusable one counts as callable from anywhere) a self-hosted job starts only after ``ci-authorize`` said
  run, through an authorize job that never runs for a ``pull_request`` event
- a clean environment on a self-hosted runner: sandbox.py setup first, every Python the job's venv's, the
  cleanup last and ``if: always()``
- no job with a write permission or a secret checks out the pull request (a ``ref:``) or reads an artifact;
  a ``pull_request_target``/``workflow_run`` workflow has no steps of its own (it calls the reusable workflow)
- least privilege and bounded runs: top-level ``permissions``, ``concurrency``, ``timeout-minutes`` on every job
- CODEOWNERS covers what decides a merge
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
from tests.redteam.github_sim import evaluate, load, triggers  # noqa: E402 - after the yaml check

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
PR_EVENTS = {"pull_request", "pull_request_review", "pull_request_review_comment"}
RUN_GATE = re.compile(r"needs\.(\w+)\.outputs\.run\s*==\s*'true'")
FORK_GUARD = re.compile(r"runner\.environment\s*!=\s*'github-hosted'.*head\.repo\.full_name\s*!=\s*github\.repository")
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*([^\s#]+)(\s*#\s*(\S+))?", re.M)  # a key, not a comment


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


def _needs(job: dict) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _authorized(jobs: dict, name: str, seen: frozenset = frozenset()) -> bool:
    """The job runs only when an authorize job (ci-authorize, never for a pull_request event) said run, itself
    or through a job that does."""
    job = jobs.get(name) or {}
    if name == "authorize":
        scripts = " ".join(s.get("run", "") for s in job.get("steps") or ())
        return "-m harness ci-authorize" in scripts and "github.event_name != 'pull_request'" in str(job.get("if"))
    cond = str(job.get("if", ""))
    return any(dep in _needs(job) and dep not in seen and _authorized(jobs, dep, seen | {name})
               for dep in RUN_GATE.findall(cond)) and "always()" not in cond


def dispatch_unsafe(doc: dict) -> list[str]:
    problems = []
    on, jobs = triggers(doc), doc.get("jobs") or {}
    for name, job in jobs.items():
        if "self-hosted" not in _runner_labels(job) or _fork_guarded(job):
            continue
        if on & PR_EVENTS:
            problems.append(f"{name}: a self-hosted job in a workflow a pull_request event triggers (its definition "
                            "is the pull request's own copy)")
        elif not _authorized(jobs, name):
            problems.append(f"{name}: a self-hosted job that does not wait for ci-authorize's run=true")
    return problems


PYTHON_CALL = re.compile(r"""(?<![\w/.$-])("\$KH_PYTHON"|\S*python3?)(?=\s)(\s+-I\b)?""")


def unclean(doc: dict) -> list[str]:
    """A self-hosted job checks out the base, makes the clean environment (sandbox.py setup) before anything
    else runs, runs Python only from its venv (or the runner's with -I, which reads nothing of the user's), and
    ends with the cleanup, always."""
    problems = []
    for name, job in (doc.get("jobs") or {}).items():
        if "self-hosted" not in _runner_labels(job) or _fork_guarded(job):
            continue
        steps = job.get("steps") or []
        scripts = [str(s.get("run", "")) for s in steps]
        setup = next((i for i, r in enumerate(scripts) if re.search(r"sandbox\.py\S*\s+setup\b", r)), None)
        if setup is None:
            problems.append(f"{name}: no sandbox.py setup step")
            continue
        if any(s.get("run") or (s.get("with") or {}).get("ref") for s in steps[:setup]):
            problems.append(f"{name}: something runs before the clean environment is made")
        for script in scripts[setup:]:
            for m in PYTHON_CALL.finditer(script):
                if not (m.group(1) == '"$KH_PYTHON"' or (m.group(1) == "python3" and m.group(2))):
                    problems.append(f"{name}: runs {m.group(1)}, not the job's venv or python3 -I")
        joined = "\n".join(scripts)
        if "--allow-writable-python" in joined or "--system-site-packages" in joined:
            problems.append(f"{name}: makes its own venv, or allows a writable runner Python")
        last = steps[-1] if steps else {}
        if not (re.search(r"\bcleanup\b.*--all-of-user", str(last.get("run", ""))) and last.get("if") == "always()"):
            problems.append(f"{name}: the last step is not sandbox.py cleanup --all-of-user with if: always()")
    return problems


def _writes(perms) -> bool:
    return perms == "write-all" or (isinstance(perms, dict) and "write" in perms.values())


def privileged_checkout(doc: dict) -> list[str]:
    problems = []
    if _writes(doc.get("permissions")) or doc.get("permissions") not in ({}, "read-all") and \
            not isinstance(doc.get("permissions"), dict):
        problems.append("top-level permissions must be {} or read-only")
    for name, job in (doc.get("jobs") or {}).items():
        privileged = _writes(job.get("permissions")) or "permissions" not in job and _writes(doc.get("permissions"))
        steps = job.get("steps") or ()
        pr_code = [s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@") and
                   "ref" in (s.get("with") or {})]
        artifacts = [s for s in steps if str(s.get("uses", "")).startswith("actions/download-artifact@")]
        if privileged and (pr_code or artifacts):
            problems.append(f"{name}: holds a write permission and checks out the pull request or reads an artifact")
        if "secrets." in yaml.safe_dump(job):
            problems.append(f"{name}: reads a secret")
    if triggers(doc) & {"workflow_run", "pull_request_target"} and (list(steps_of(doc)) or runs(doc)):
        problems.append("a privileged workflow (pull_request_target, workflow_run) has steps of its own: it may only "
                        "call the reusable workflow")
    return problems


def steps_of(doc: dict):
    return (step for _, _, step in steps(doc))


def unbounded(doc: dict) -> list[str]:
    problems = [] if "permissions" in doc else ["no top-level permissions"]
    problems += [] if "concurrency" in doc else ["no concurrency group"]
    problems += [f"{n}: no timeout-minutes" for n, j in (doc.get("jobs") or {}).items()
                 if "timeout-minutes" not in j and "uses" not in j]  # a called workflow's jobs have their own
    return problems


def all_problems(path: Path) -> list[str]:
    doc, text = load(path), path.read_text()
    return (unpinned(text) + persisted_credentials(doc) + unknown_calls(runs(doc)) + swallowed_failures(doc)
            + dispatch_unsafe(doc) + unclean(doc) + privileged_checkout(doc) + unbounded(doc))


# ----------------------------------------------------------------------------- the real workflows

def test_the_workflows_exist():
    assert {p.name for p in WORKFLOWS} == {"ci.yml", "gpu.yml", "kernel-harness.yml"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_follows_the_rules(path):
    assert all_problems(path) == []


def test_gpu_workflow_is_the_reusable_one_from_the_default_branch():
    """gpu.yml: only events whose definition is the default branch's, and one job calling kernel-harness.yml
    with this repository's own harness (the base checkout)."""
    doc = load(ROOT / ".github" / "workflows" / "gpu.yml")
    assert triggers(doc) == {"pull_request_target", "issue_comment", "schedule", "workflow_dispatch"}
    assert set(doc["on"]["pull_request_target"]["types"]) >= {"synchronize", "labeled", "unlabeled"}
    assert set(doc["on"]["issue_comment"]["types"]) == {"created", "edited", "deleted"}
    (job,) = doc["jobs"].values()
    assert job["uses"] == "./.github/workflows/kernel-harness.yml" and job["with"]["harness"] == "."
    assert job["with"]["cpu"] is False and "self-hosted" in job["with"]["gpu-runners"]


def test_gpu_concurrency_lets_only_pushes_and_the_run_label_supersede():
    group = load(ROOT / ".github" / "workflows" / "gpu.yml")["concurrency"]["group"]

    def for_event(name, **event):
        return evaluate(group, {"github": {"event_name": name, "event": event, "run_id": "99"}})

    pr = {"pull_request": {"number": 7}}
    assert for_event("pull_request_target", action="synchronize", **pr) == "gpu-pr-7"
    assert for_event("pull_request_target", action="labeled", label={"name": "gate:run"}, **pr) == "gpu-pr-7"
    assert for_event("pull_request_target", action="labeled", label={"name": "docs"}, **pr) == "gpu-99"
    assert for_event("issue_comment", action="created") == "gpu-99"  # anyone may comment: it cancels nothing


def test_reusable_workflow_for_other_repositories():
    """kernel-harness.yml (docs/adopting.md): called, never triggered; the caller's settings come in as inputs and
    reach the scripts through env only; the trusted jobs run on GitHub-hosted runners; the report job alone
    writes, and only the status and the comment."""
    doc = load(ROOT / ".github" / "workflows" / "kernel-harness.yml")
    assert triggers(doc) == {"workflow_call"}
    assert {"harness", "cpu", "cpu-runner", "gpu-runners", "specs", "policy", "against"} <= \
        set(doc["on"]["workflow_call"]["inputs"])
    assert not [r for r in runs(doc) if "${{" in r]  # no expression spliced into a script
    jobs = doc["jobs"]
    assert set(jobs) == {"cpu", "authorize", "plan", "gpu", "gate", "report"}
    assert jobs["gpu"]["strategy"]["fail-fast"] is False and _fork_guarded(jobs["cpu"])
    assert "github.event_name == 'pull_request'" in jobs["cpu"]["if"]
    for name in ("authorize", "plan", "gate", "report"):
        assert jobs[name]["runs-on"] == "ubuntu-latest", name
    writers = {n for n, j in jobs.items() if _writes(j.get("permissions"))}
    assert writers == {"report"} and jobs["report"]["permissions"] == {
        "contents": "read", "statuses": "write", "pull-requests": "write"}
    scripts = "\n".join(runs(doc))
    for command in ("affected --base", "affected --all", "ci-authorize", "ci-candidate", "ci-gpu", "ci-gate",
                    "ci-post", "validate"):
        assert f"-m harness {command}" in scripts, command
    assert jobs["gate"]["if"].startswith("always()") and set(jobs["gate"]["needs"]) == {"authorize", "plan", "gpu"}


def test_the_gpu_job_sets_up_the_clean_environment_as_the_sandbox_module_defines_it():
    from harness.gate.sandbox import DIRS, FIXED

    job = load(ROOT / ".github" / "workflows" / "kernel-harness.yml")["jobs"]["gpu"]
    setup = next(s for s in job["steps"] if "sandbox.py" in s.get("run", "") and " setup" in s["run"])
    assert '--github-env "$GITHUB_ENV"' in setup["run"] and '--root "$RUNNER_TEMP/kh-job"' in setup["run"]
    # the variables a test asserts are exactly the ones the workflow gets: the module writes them all
    assert {"HOME", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR"} <= set(DIRS)
    assert FIXED["PYTHONNOUSERSITE"] == "1"
    assert job["steps"][-1]["if"] == "always()" and "--all-of-user" in job["steps"][-1]["run"]


def test_codeowners_covers_what_decides_a_merge():
    lines = [line.split() for line in (ROOT / ".github" / "CODEOWNERS").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    owned = {parts[0] for parts in lines if len(parts) >= 2 and all(o.startswith("@") for o in parts[1:])}
    assert {"/.github/", "/harness/", "/.ci/", "/noxfile.py", "/pyproject.toml",
            "/harness/gate/calibration.json"} <= owned


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
    (GOOD_CHECKOUT + "      - run: python3 -m harness ci-gate\n        continue-on-error: true\n",
     "continue-on-error"),
    (GOOD_CHECKOUT + "      - run: echo ${{ secrets.TOKEN }}\n", "secret"),
])
def test_planted_step_problem_is_found(tmp_path, steps, expected):
    problems = all_problems(_plant(tmp_path, _job(steps)))
    assert any(expected in p for p in problems), problems


def _trusted_jobs(gpu: str) -> str:
    authorize = ("  authorize:\n    if: github.event_name != 'pull_request'\n    runs-on: ubuntu-latest\n"
                 "    timeout-minutes: 5\n    steps:\n      - run: python -m harness ci-authorize --event e "
                 "--event-name n --repo o/r\n")
    return authorize + gpu


VENV_GATE = '      - run: |\n          "$KH_PYTHON" -m harness ci-gpu --against a --kernels k\n'
CLEAN_STEPS = (GOOD_CHECKOUT + '      - run: python3 -I base/harness/gate/sandbox.py setup --root r\n' + VENV_GATE +
               "      - if: always()\n        run: python3 -I t/sandbox.py cleanup --root r --all-of-user\n")


def _gpu_job(condition: str = "needs.authorize.outputs.run == 'true'", steps: str = CLEAN_STEPS,
             needs: str = "authorize") -> str:
    return (f"  gpu:\n    needs: {needs}\n    if: {condition}\n    runs-on: [self-hosted, gpu]\n"
            f"    timeout-minutes: 5\n    permissions:\n      contents: read\n    steps:\n{steps}")


def test_planted_authorized_self_hosted_job_is_clean(tmp_path):
    assert all_problems(_plant(tmp_path, _trusted_jobs(_gpu_job()), on="workflow_call")) == []


@pytest.mark.parametrize("jobs,on,expected", [
    (_trusted_jobs(_gpu_job()), "pull_request", "a pull_request event triggers"),        # the PR's own copy
    (_trusted_jobs(_gpu_job()), "[pull_request_target, pull_request]", "a pull_request event triggers"),
    (_trusted_jobs(_gpu_job(condition="always()")), "workflow_call", "does not wait for ci-authorize"),
    (_trusted_jobs(_gpu_job(condition="needs.authorize.outputs.run == 'true' || always()")), "workflow_call",
     "does not wait"),
    (_trusted_jobs(_gpu_job(needs="[]")), "workflow_call", "does not wait"),              # the if names no need
    (_gpu_job(), "workflow_call", "does not wait"),                                        # no authorize job
    (_trusted_jobs(_gpu_job()).replace("if: github.event_name != 'pull_request'", "if: true"), "workflow_call",
     "does not wait"),                                                                      # authorize for anything
])
def test_planted_unauthorized_self_hosted_job_is_found(tmp_path, jobs, on, expected):
    problems = all_problems(_plant(tmp_path, jobs, on=on))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("steps,expected", [
    (GOOD_CHECKOUT + VENV_GATE, "no sandbox.py setup"),
    ("      - run: echo hi\n" + CLEAN_STEPS, "before the clean environment"),
    (CLEAN_STEPS.replace('"$KH_PYTHON" -m', "python -m"), "not the job's venv"),
    (CLEAN_STEPS.replace("--root r\n", "--root r --allow-writable-python\n", 1), "writable runner Python"),
    (CLEAN_STEPS.replace("      - if: always()\n", "      - if: success()\n"), "the last step is not"),
    (CLEAN_STEPS.replace(" --all-of-user", ""), "the last step is not"),
])
def test_planted_unclean_self_hosted_job_is_found(tmp_path, steps, expected):
    problems = all_problems(_plant(tmp_path, _trusted_jobs(_gpu_job(steps=steps)), on="workflow_call"))
    assert any(expected in p for p in problems), problems


def test_planted_reusable_workflow_on_callers_runners(tmp_path):
    """A reusable workflow's job on runners its caller names is self-hosted until shown otherwise."""
    def problems(jobs: str) -> list[str]:
        return all_problems(_plant(tmp_path, jobs, on="workflow_call"))

    matrix = "    strategy:\n      matrix:\n        runner: ${{ fromJSON(inputs.runners) }}\n"
    unauthorized = "does not wait for ci-authorize"
    assert any(unauthorized in p for p in problems(_job(GOOD_CHECKOUT, matrix, runs_on="${{ matrix.runner }}")))
    guard = ("      - if: runner.environment != 'github-hosted' && github.event_name == 'pull_request' && "
             "github.event.pull_request.head.repo.full_name != github.repository\n        run: exit 1\n")
    assert problems(_job(guard + GOOD_CHECKOUT, runs_on="${{ inputs.runner }}")) == []
    late = _job(GOOD_CHECKOUT + guard, runs_on="${{ inputs.runner }}")  # after the checkout: too late
    assert any(unauthorized in p for p in problems(late))


def test_planted_self_hosted_matrix_job_is_followed(tmp_path):
    extra = ("    strategy:\n      matrix:\n        include:\n          - runner: [self-hosted, gpu]\n")
    jobs = _job(GOOD_CHECKOUT, extra, runs_on="${{ matrix.runner }}")
    assert any("a pull_request event triggers" in p for p in all_problems(_plant(tmp_path, jobs)))


def test_planted_privilege_problems_are_found(tmp_path):
    pr_checkout = ("      - uses: actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8 # v5.0.0\n"
                   "        with:\n          ref: ${{ github.event.pull_request.head.sha }}\n"
                   "          persist-credentials: false\n")
    writer = _job(pr_checkout).replace("contents: read", "statuses: write")
    assert any("write permission and checks out" in p for p in all_problems(_plant(tmp_path, writer)))
    artifact = ("      - uses: actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093 # v4.3.0\n")
    reader = _job(artifact).replace("contents: read", "pull-requests: write")
    assert any("reads an artifact" in p for p in all_problems(_plant(tmp_path, reader)))
    base_only = _job(GOOD_CHECKOUT).replace("contents: read", "statuses: write")  # the base: allowed
    assert all_problems(_plant(tmp_path, base_only)) == []
    runner = _job("      - run: echo hi\n")
    for on in ("workflow_run", "pull_request_target"):
        assert any("privileged workflow" in p for p in all_problems(_plant(tmp_path, runner, on=on)))
    assert any("top-level" in p for p in all_problems(_plant(tmp_path, runner, top="permissions: write-all\n"
                                                                                 "concurrency: x\n")))


def test_planted_unbounded_workflow_is_found(tmp_path):
    problems = all_problems(_plant(tmp_path, _job(GOOD_CHECKOUT).replace("    timeout-minutes: 5\n", ""), top=""))
    assert {"no top-level permissions", "no concurrency group", "j: no timeout-minutes"} <= set(problems)


def test_dry_run_runs_the_gpu_jobs_commands():
    """bench/ci_dry_run.sh must run the gpu job's clean environment, install and gate lines, not a copy that
    drifted."""
    job = load(ROOT / ".github" / "workflows" / "kernel-harness.yml")["jobs"]["gpu"]
    script = (ROOT / "bench" / "ci_dry_run.sh").read_text()
    assert re.search(r"sandbox\.py setup --root \S+", script) and re.search(r"sandbox\.py\"? cleanup", script)
    install = next(s["run"] for s in job["steps"] if "Install the harness" in s.get("name", ""))
    assert install.strip().splitlines()[0].strip() in script
    gate = next(s["run"] for s in job["steps"] if "harness ci-gpu" in s.get("run", ""))
    github_only = {"--step-summary", "--authorization", "--candidate", "--tests-dir"}
    flags = set(re.findall(r"(--[\w-]+)", gate[gate.index("ci-gpu"):])) - github_only
    dry = script[script.index("-m harness ci-gpu"):]
    assert flags <= set(re.findall(r"(--[\w-]+)", dry[:dry.index("${CI_GPU_EXTRA")])), flags
    assert "-m harness affected --base" in script


def test_the_documented_caller_gives_the_reusable_workflow_what_it_needs():
    """docs/adopting.md's kernels.yml: the trusted triggers beside pull_request, and permissions that cover every
    job of kernel-harness.yml (a called workflow can hold no more than its caller grants)."""
    text = (ROOT / "docs" / "adopting.md").read_text()
    block = next(b for b in re.findall(r"^```yaml\n(.*?)^```", text, re.M | re.S) if "kernel-harness.yml@" in b)
    caller = yaml.safe_load(block)
    caller["on"] = caller.pop(True)
    assert {"pull_request", "pull_request_target", "issue_comment"} <= set(caller["on"])
    granted = caller["jobs"]["kernels"]["permissions"]
    for name, job in load(ROOT / ".github" / "workflows" / "kernel-harness.yml")["jobs"].items():
        for scope, level in (job.get("permissions") or {}).items():
            assert granted.get(scope) in ({"read": ("read", "write"), "write": ("write",)}[level]), (name, scope)
