"""The GPU CI job: its merge policy and its run (``python -m harness ci-gpu`` / ``ci-needs``).

``ci-gpu`` is the whole GPU job in one command, so the workflow (.github/workflows/gpu.yml) and the dry run
(bench/ci_dry_run.sh) cannot drift apart: the full-tier tests of the affected kernels, then the merge gate
(``bench --against BASE``) in their own processes, then the decision (``decide``), which alone may turn a
SLOWER verdict into a pass: when a maintainer labelled the pull request ``perf-regression-accepted`` and the
pull request's body says why (a line ``perf-regression-accepted: <reason>``). Correctness failures are
never accepted. It writes report.md (the job's report: the decision, the acceptance, compare.md) and
ci.json (for the comment job) to --out, and report.md to the step summary.

The run is ``STEPS`` over one frozen :class:`CiRun` (:func:`harness.steps.execute`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from harness.steps import BadInput

ACCEPT_LABEL = "perf-regression-accepted"
_REASON = re.compile(rf"^\s*{ACCEPT_LABEL}\s*:\s*(\S.*?)\s*$", re.IGNORECASE | re.MULTILINE)
STEP_SUMMARY_LIMIT = 1024 * 1024  # bytes: GitHub refuses a larger step summary
NEVER_ACCEPTED = ("WRONG", "ERROR")  # a wrong result is not a known regression
CI_FORMAT = "kernel-harness-ci/1"


@dataclass(frozen=True)
class Acceptance:
    labelled: bool      # the label is on the pull request (only people with triage rights can set one)
    reason: str         # the body's perf-regression-accepted line; "" when there is none
    by: str             # who added the label, when this run was started by adding it

    @property
    def accepted(self) -> bool:
        return self.labelled and bool(self.reason)


@dataclass(frozen=True)
class Outcome:
    passed: bool
    accepted: bool      # passed only because a SLOWER verdict was accepted
    why: str            # one line


def acceptance(event: dict) -> Acceptance:
    """The acceptance a ``pull_request`` event's payload carries (labels and body as of the event)."""
    pr = event.get("pull_request") or {}
    labels = {str(lab.get("name")) for lab in pr.get("labels") or () if isinstance(lab, dict)}
    found = _REASON.search(str(pr.get("body") or ""))
    reason = found.group(1)[:500] if found else ""
    label = (event.get("label") or {}).get("name")
    by = str((event.get("sender") or {}).get("login") or "") if event.get("action") == "labeled" and \
        label == ACCEPT_LABEL else ""
    return Acceptance(ACCEPT_LABEL in labels, reason, by)


def decide(tests_rc: int | None, gate_rc: int | None, counts: dict, acc: Acceptance) -> Outcome:
    """The job's verdict. ``tests_rc``/``gate_rc``: exit codes (None: the step did not run, nothing to do);
    ``counts``: compare.json's verdict counts."""
    if tests_rc not in (None, 0):
        return Outcome(False, False, f"full-tier tests failed (pytest exit {tests_rc})")
    if gate_rc in (None, 0):
        return Outcome(True, False, "no kernel regressed" if gate_rc == 0 else "nothing to gate")
    if gate_rc != 1:
        return Outcome(False, False, f"merge gate could not run (exit {gate_rc})")
    wrong = {v: counts.get(v, 0) for v in NEVER_ACCEPTED if counts.get(v, 0)}
    if wrong:
        return Outcome(False, False, "merge gate: " + ", ".join(f"{n} {v.lower()}" for v, n in wrong.items())
                       + " (correctness is never accepted)")
    slower = counts.get("SLOWER", 0)
    if not slower:
        return Outcome(False, False, "merge gate failed without a SLOWER, WRONG or ERROR case (see compare.json)")
    if acc.accepted:
        return Outcome(True, True, f"{slower} slower, accepted: {acc.reason}")
    if acc.labelled:
        return Outcome(False, False, f"{slower} slower; the {ACCEPT_LABEL} label is on, but the pull request's "
                       f"body has no '{ACCEPT_LABEL}: <reason>' line")
    return Outcome(False, False, f"{slower} slower")


def truncate_bytes(text: str, limit: int, note: str) -> str:
    """``text`` cut so that it and ``note`` fit ``limit`` UTF-8 bytes (never mid-character)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    room = max(0, limit - len(note.encode()))
    return data[:room].decode("utf-8", "ignore") + note


def tests_line(tests_rc: int | None) -> str:
    if tests_rc is None:
        return "not run (no kernel affected)"
    return "passed" if tests_rc == 0 else f"FAILED (exit {tests_rc}; tests.log in the artifact)"


def report_text(runner: str, outcome: Outcome, acc: Acceptance, tests: str, compare_md: str) -> str:
    status = "passed" if outcome.passed else "FAILED"
    if outcome.accepted:
        status = "passed, regression accepted"
    lines = [f"## GPU gate on `{runner}`: {status}", "", f"- decision: {outcome.why}", f"- full-tier tests: {tests}"]
    if acc.labelled:
        who = f" (label added by @{acc.by})" if acc.by else ""
        lines.append(f"- `{ACCEPT_LABEL}`{who}: {acc.reason or '(no reason line in the pull request body)'}")
    return "\n".join(lines) + "\n\n" + (compare_md.strip() + "\n" if compare_md else "")


def counts(path: Path) -> dict:
    """compare.json's verdict counts; {} when the gate wrote none (it crashed, or timed out)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return {str(k): int(v) for k, v in doc.get("counts", {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def parse_needs(text: str, env: str) -> dict:
    """``ci-needs``: the jobs in ``${{ toJSON(needs) }}``, read from the environment variable ``env``."""
    try:
        needs = json.loads(text)
    except ValueError:
        raise BadInput(f"ci-needs: ${env} is not JSON (set it to ${{{{ toJSON(needs) }}}})") from None
    if not isinstance(needs, dict) or not needs:
        raise BadInput(f"ci-needs: ${env}: expected a non-empty JSON object of jobs")
    return needs


def needs_code(needs: dict) -> int:
    """0 when every needed job succeeded or was skipped (nothing affected), else 1; one line per job."""
    bad = 0
    for name, job in sorted(needs.items()):
        result = job.get("result") if isinstance(job, dict) else None
        ok = result in ("success", "skipped")
        bad += not ok
        print(f"{name}: {result}{'' if ok else '  <- fails the gate'}")
    return 1 if bad else 0


# ----------------------------------------------------------------------------- the ci-gpu run

@dataclass(frozen=True)
class CiRun:
    against: str                  # the base revision (a pull request's base SHA)
    kernel_list: str              # --kernels: comma list; "" = none affected
    out: Path
    runner: str = "local"
    event: str | None = None      # the event payload's file ($GITHUB_EVENT_PATH)
    step_summary: str | None = None
    tier: str = "full"
    tests_timeout: float = 2400.0
    gate_timeout: float = 2400.0
    python: str = sys.executable
    # filled by the steps
    kernels: tuple[str, ...] = ()
    acceptance: Acceptance = Acceptance(False, "", "")
    tests_rc: int | None = None   # None: not run
    gate_rc: int | None = None
    counts: dict = field(default_factory=dict)
    compare_md: str = ""
    outcome: Outcome | None = None
    report: str = ""


def check_inputs(run: CiRun) -> CiRun:
    # both go on a command line: a revision that reads as an option, or a name with a shell character, is refused
    if run.against.startswith("-"):
        raise BadInput(f"--against {run.against!r}: not a git revision")
    kernels = tuple(k.strip() for k in run.kernel_list.split(",") if k.strip())
    bad = [k for k in kernels if not re.fullmatch(r"[A-Za-z0-9_]+", k)]
    if bad:
        raise BadInput(f"--kernels: not a kernel name: {bad[0]!r}")
    return replace(run, kernels=kernels)


def read_acceptance(run: CiRun) -> CiRun:
    if not run.event:
        return replace(run, acceptance=acceptance({}))
    try:
        doc = json.loads(Path(run.event).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"--event {run.event}: unreadable: {exc}") from None
    if not isinstance(doc, dict):
        raise BadInput(f"--event {run.event}: expected a JSON object")
    return replace(run, acceptance=acceptance(doc))


def make_out(run: CiRun) -> CiRun:
    run.out.mkdir(parents=True, exist_ok=True)
    return run


def run_tests(run: CiRun) -> CiRun:
    if not run.kernels:
        return run
    rc = _run([run.python, "-m", "pytest", "specs", "--tier", run.tier, "--kernel", ",".join(run.kernels), "-q",
               "-rfEs", "-p", "no:cacheprovider"], run.out / "tests.log", run.tests_timeout)
    return replace(run, tests_rc=rc)


def run_gate(run: CiRun) -> CiRun:
    if not run.kernels:
        return run
    gate = run.out / "gate"
    rc = _run([run.python, "-m", "harness", "bench", "--against", run.against, "--kernel", ",".join(run.kernels),
               "--out", str(gate)], run.out / "gate.log", run.gate_timeout)
    md = gate / "compare.md"
    return replace(run, gate_rc=rc, counts=counts(gate / "compare.json"),
                   compare_md=md.read_text(encoding="utf-8") if md.is_file() else "")


def decide_outcome(run: CiRun) -> CiRun:
    return replace(run, outcome=decide(run.tests_rc, run.gate_rc, run.counts, run.acceptance))


def write_report(run: CiRun) -> CiRun:
    """report.md (the job's report) and ci.json (what the comment job reads)."""
    text = report_text(run.runner, run.outcome, run.acceptance, tests_line(run.tests_rc), run.compare_md)
    (run.out / "report.md").write_text(text, encoding="utf-8")
    acc = run.acceptance
    doc = {"format": CI_FORMAT, "runner": run.runner, "kernels": list(run.kernels), "against": run.against,
           "tests_exit": run.tests_rc, "gate_exit": run.gate_rc, "counts": run.counts, **asdict(run.outcome),
           "acceptance": {**asdict(acc), "accepted": acc.accepted}}
    (run.out / "ci.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return replace(run, report=text)


def write_step_summary(run: CiRun) -> CiRun:
    if run.step_summary:
        note = "\n\n(cut at 1 MiB, GitHub's step-summary limit: report.md in the job's artifact has it all)\n"
        with open(run.step_summary, "a", encoding="utf-8") as f:
            f.write(truncate_bytes(run.report, STEP_SUMMARY_LIMIT, note))
    return run


def print_decision(run: CiRun) -> CiRun:
    print(f"ci-gpu: {'PASSED' if run.outcome.passed else 'FAILED'}: {run.outcome.why}")
    return run


STEPS = (check_inputs, read_acceptance, make_out, run_tests, run_gate, decide_outcome, write_report,
         write_step_summary, print_decision)


def _run(cmd: list[str], log: Path, timeout: float) -> int:
    """Run ``cmd``, its output to our stdout and to ``log``; 124 when it ran past ``timeout``."""
    print("ci-gpu: $ " + " ".join(cmd), flush=True)
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        try:
            for line in proc.stdout:
                sys.stdout.write(line)
                f.write(line)
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return 124
