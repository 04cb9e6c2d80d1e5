"""The GPU CI job on the runner: its run and its decision (``python -m harness ci-gpu``).

``ci-gpu`` is the whole GPU job in one command, so the workflow (.github/workflows/gpu.yml) and the dry run
(bench/ci_dry_run.sh) cannot drift apart: the full-tier tests of the affected kernels, then the merge gate
(``bench --against BASE --candidate HEAD``: this checkout's harness and policy judge the pull request's kernels
and specs) in their own processes, then the decision (``decide``). A SLOWER verdict passes only with an
acceptance of the regression, and the pull request's changes of policy-carrying spec fields apply only with an
acceptance of the policy (``--accept-policy``), both read from the trusted authorization (harness.gate.authorize,
``--authorization``), never from the event or the pull request. Correctness failures are never accepted. It
writes report.md (for people), ci.json (the data the trusted gate job validates and renders,
harness.gate.status) and the step summary.

The pull request's code runs only in the two child processes. Before them, ci-gpu hashes the harness it runs
from; after each, it hashes it again: a child that rewrote the harness on disk (so that the next process, or the
next job, imports its copy) fails the job.

The run is ``STEPS`` over one frozen :class:`CiRun` (:func:`harness.steps.execute`).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from harness.gate.authorize import Acceptance, Decision, read_authorization
from harness.results.verdicts import OUTCOMES
from harness.steps import BadInput

STEP_SUMMARY_LIMIT = 1024 * 1024  # bytes: GitHub refuses a larger step summary
NEVER_ACCEPTED = ("WRONG", "ERROR")  # a wrong result is not a known regression
CI_FORMAT = "kernel-harness-ci/2"
MAX_CASES = 50  # the cases ci.json lists (not SAME), so the comment names them without reading compare.md
HARNESS_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Outcome:
    passed: bool
    accepted: bool      # passed only because a SLOWER verdict was accepted
    why: str            # one line


def decide(tests_rc: int | None, gate_rc: int | None, counts: dict, regression: Acceptance | None = None, *,
           tampered: tuple[str, ...] = ()) -> Outcome:
    """The job's verdict. ``tests_rc``/``gate_rc``: exit codes (None: the step did not run, nothing to do);
    ``counts``: compare.json's verdict counts; ``regression``: a maintainer's acceptance of a SLOWER verdict;
    ``tampered``: harness files that changed while pull-request code ran."""
    if tampered:
        return Outcome(False, False, f"the harness's own files changed while pull-request code ran: "
                       f"{', '.join(tampered[:3])}")
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
    if regression:
        return Outcome(True, True, f"{slower} slower, accepted by {regression.by}: {regression.reason}")
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


def report_text(runner: str, outcome: Outcome, auth: Decision | None, tests: str, compare_md: str) -> str:
    status = "passed" if outcome.passed else "FAILED"
    if outcome.accepted:
        status = "passed, regression accepted"
    lines = [f"## GPU gate on `{runner}`: {status}", "", f"- decision: {outcome.why}", f"- full-tier tests: {tests}"]
    for acc in auth.accepts if auth else ():
        lines.append(f"- {acc.kind} accepted by {acc.by} for {auth.sha[:12]}: {acc.reason}")
    return "\n".join(lines) + "\n\n" + (compare_md.strip() + "\n" if compare_md else "")


def read_compare(path: Path) -> dict:
    """compare.json; {} when the gate wrote none (it crashed, or timed out) or it is not a JSON object."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def counts(doc: dict) -> dict:
    """compare.json's verdict counts (only the gate's own verdicts)."""
    try:
        return {str(k): int(v) for k, v in (doc.get("counts") or {}).items() if k in OUTCOMES}
    except (ValueError, AttributeError, TypeError):
        return {}


def cases(doc: dict) -> list[dict]:
    """The cases that are not SAME, as ci.json lists them (the trusted renderer validates them again)."""
    out = []
    try:
        for c in (doc.get("comparison") or {}).get("cases") or ():
            if c.get("verdict") != "SAME" and len(out) < MAX_CASES:
                out.append({k: c.get(k) for k in ("kernel", "dtype", "case_id", "verdict", "ratio", "ratio_lo",
                                                   "ratio_hi")})
    except (AttributeError, TypeError):
        return []
    return out


def manifest(root: Path = HARNESS_ROOT) -> dict[str, str]:
    """sha256 of every file of the harness package at ``root`` (bytecode caches left out)."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def changed(before: dict[str, str], after: dict[str, str]) -> tuple[str, ...]:
    return tuple(sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k)))


# ----------------------------------------------------------------------------- the ci-gpu run

@dataclass(frozen=True)
class CiRun:
    against: str                  # the base revision (a pull request's base SHA)
    kernel_list: str              # --kernels: comma list; "" = none affected
    out: Path
    runner: str = "local"
    authorization: str | None = None  # the trusted authorize job's decision (a file); None: nightly, by hand
    candidate: str | None = None  # the pull request's head: the gate's PR side (None: this working tree)
    tests_dir: Path | None = None  # where the full-tier tests run (the candidate tree; None: here)
    step_summary: str | None = None
    tier: str = "full"
    tests_timeout: float = 2400.0
    gate_timeout: float = 2400.0
    python: str = sys.executable
    harness_root: Path = HARNESS_ROOT
    # filled by the steps
    kernels: tuple[str, ...] = ()
    auth: Decision | None = None
    hashes: dict = field(default_factory=dict)
    tampered: tuple[str, ...] = ()
    tests_rc: int | None = None   # None: not run
    gate_rc: int | None = None
    compare: dict = field(default_factory=dict)
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


def read_auth(run: CiRun) -> CiRun:
    """The authorization, read before any pull-request code runs (a child cannot rewrite it first)."""
    if not run.authorization:
        return run
    try:
        text = Path(run.authorization).read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"--authorization {run.authorization}: unreadable: {exc.strerror}") from None
    auth = read_authorization(text, f"--authorization {run.authorization}")
    if not auth.run:
        raise BadInput(f"--authorization {run.authorization}: does not authorize a run ({auth.why})")
    return replace(run, auth=auth)


def snapshot(run: CiRun) -> CiRun:
    return replace(run, hashes=manifest(run.harness_root))


def make_out(run: CiRun) -> CiRun:
    run.out.mkdir(parents=True, exist_ok=True)
    return run


def _checked(run: CiRun) -> tuple[str, ...]:
    if not run.hashes:  # no snapshot step ran (a step tested alone): nothing to compare with
        return run.tampered
    return run.tampered or changed(run.hashes, manifest(run.harness_root))


def run_tests(run: CiRun) -> CiRun:
    if not run.kernels:
        return run
    rc = _run([run.python, "-m", "pytest", "specs", "--tier", run.tier, "--kernel", ",".join(run.kernels), "-q",
               "-rfEs", "-p", "no:cacheprovider"], run.out / "tests.log", run.tests_timeout, cwd=run.tests_dir)
    run = replace(run, tests_rc=rc)
    return replace(run, tampered=_checked(run))


def run_gate(run: CiRun) -> CiRun:
    if not run.kernels or run.tampered:
        return run
    gate = run.out / "gate"
    extra = ["--candidate", run.candidate] if run.candidate else []
    accepted = run.auth.accepted("policy") if run.auth else None
    if accepted and run.candidate:
        extra += ["--accept-policy", run.auth.sha]
    rc = _run([run.python, "-m", "harness", "bench", "--against", run.against, "--kernel", ",".join(run.kernels),
               *extra, "--out", str(gate)], run.out / "gate.log", run.gate_timeout)
    md = gate / "compare.md"
    run = replace(run, gate_rc=rc, compare=read_compare(gate / "compare.json"),
                  compare_md=md.read_text(encoding="utf-8", errors="replace") if md.is_file() else "")
    return replace(run, tampered=_checked(run))


def decide_outcome(run: CiRun) -> CiRun:
    auth = run.auth
    return replace(run, outcome=decide(run.tests_rc, run.gate_rc, counts(run.compare),
                                       auth.accepted("regression") if auth else None, tampered=run.tampered))


def ci_doc(run: CiRun) -> dict:
    """ci.json: what the gate job reads (as data it validates, never trusting the verdict in it)."""
    return {"format": CI_FORMAT, "runner": run.runner, "kernels": list(run.kernels), "against": run.against,
            "sha": run.auth.sha if run.auth else "", "tests_exit": run.tests_rc, "gate_exit": run.gate_rc,
            "counts": counts(run.compare), "cases": cases(run.compare), "tampered": list(run.tampered),
            **asdict(run.outcome)}


def write_report(run: CiRun) -> CiRun:
    """report.md (the job's report) and ci.json (what the gate job reads)."""
    text = report_text(run.runner, run.outcome, run.auth, tests_line(run.tests_rc), run.compare_md)
    (run.out / "report.md").write_text(text, encoding="utf-8")
    (run.out / "ci.json").write_text(json.dumps(ci_doc(run), indent=1) + "\n", encoding="utf-8")
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


STEPS = (check_inputs, read_auth, snapshot, make_out, run_tests, run_gate, decide_outcome, write_report,
         write_step_summary, print_decision)


def _run(cmd: list[str], log: Path, timeout: float, cwd: Path | None = None) -> int:
    """Run ``cmd`` (in ``cwd``), its output to our stdout and to ``log``; 124 when it ran past ``timeout``."""
    print("ci-gpu: $ " + " ".join(cmd), flush=True)
    with open(log, "w", encoding="utf-8") as f:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                cwd=cwd)
        try:
            for line in proc.stdout:
                sys.stdout.write(line)
                f.write(line)
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return 124
