"""``ci-gpu`` and ``ci-needs``: what the GPU workflow runs, as commands with tests instead of inline shell.

``ci-gpu`` is the whole GPU job in one line, so the workflow (.github/workflows/gpu.yml) and the dry run
(bench/ci_dry_run.sh) cannot drift apart: the full-tier tests of the affected kernels, then the merge gate
(``bench --against BASE``) in their own processes, then the decision (``decide``), which alone may turn a
SLOWER verdict into a pass: when a maintainer labelled the pull request ``perf-regression-accepted`` and the
pull request's body says why (a line ``perf-regression-accepted: <reason>``). Correctness failures are
never accepted. It writes report.md (the job's report: the decision, the acceptance, compare.md) and
ci.json (for the comment job) to --out, and report.md to the step summary.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.cli.registry import EXIT_FAILED, EXIT_OK, BadInput, command, options

ACCEPT_LABEL = "perf-regression-accepted"
_REASON = re.compile(rf"^\s*{ACCEPT_LABEL}\s*:\s*(\S.*?)\s*$", re.IGNORECASE | re.MULTILINE)
STEP_SUMMARY_LIMIT = 1024 * 1024  # bytes: GitHub refuses a larger step summary
NEVER_ACCEPTED = ("WRONG", "ERROR")  # a wrong result is not a known regression


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


def report_text(runner: str, outcome: Outcome, acc: Acceptance, tests: str, compare_md: str) -> str:
    status = "passed" if outcome.passed else "FAILED"
    if outcome.accepted:
        status = "passed, regression accepted"
    lines = [f"## GPU gate on `{runner}`: {status}", "", f"- decision: {outcome.why}", f"- full-tier tests: {tests}"]
    if acc.labelled:
        who = f" (label added by @{acc.by})" if acc.by else ""
        lines.append(f"- `{ACCEPT_LABEL}`{who}: {acc.reason or '(no reason line in the pull request body)'}")
    return "\n".join(lines) + "\n\n" + (compare_md.strip() + "\n" if compare_md else "")


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


def _event(path: str | None) -> dict:
    if not path:
        return {}
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"--event {path}: unreadable: {exc}") from None
    if not isinstance(doc, dict):
        raise BadInput(f"--event {path}: expected a JSON object")
    return doc


def _counts(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        return {str(k): int(v) for k, v in doc.get("counts", {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _ci_gpu_options(p) -> None:
    p.add_argument("--against", required=True, help="the base revision for the merge gate (a pull request's base SHA)")
    p.add_argument("--kernels", required=True, help="comma list of kernels (harness affected's kernels=); '' = none")
    p.add_argument("--out", default="build/ci", help="folder for report.md, ci.json and the logs (default build/ci)")
    p.add_argument("--runner", default=os.environ.get("RUNNER_NAME", "local"), help="name shown in the report")
    p.add_argument("--event", metavar="FILE", help="the event payload ($GITHUB_EVENT_PATH): labels and body")
    p.add_argument("--step-summary", metavar="FILE", help="append report.md here ($GITHUB_STEP_SUMMARY), cut at 1 MiB")
    p.add_argument("--tier", default="full", help="test tier (default full; ci for trying the job on a CPU)")
    p.add_argument("--tests-timeout", type=float, default=2400.0, help="seconds for the full-tier tests")
    p.add_argument("--gate-timeout", type=float, default=2400.0, help="seconds for the merge gate")


@command("ci-gpu", "the GPU CI job: full-tier tests of the given kernels, the merge gate, the decision")
@options(_ci_gpu_options)
def cmd_ci_gpu(args) -> int:
    if args.against.startswith("-"):
        raise BadInput(f"--against {args.against!r}: not a git revision")
    kernels = [k.strip() for k in args.kernels.split(",") if k.strip()]
    bad = [k for k in kernels if not re.fullmatch(r"[A-Za-z0-9_]+", k)]
    if bad:
        raise BadInput(f"--kernels: not a kernel name: {bad[0]!r}")
    acc = acceptance(_event(args.event))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tests_rc = gate_rc = None
    compare_md, counts = "", {}
    if kernels:
        listed = ",".join(kernels)
        py = sys.executable
        tests_rc = _run([py, "-m", "pytest", "specs", "--tier", args.tier, "--kernel", listed, "-q", "-rfEs",
                         "-p", "no:cacheprovider"], out / "tests.log", args.tests_timeout)
        gate_rc = _run([py, "-m", "harness", "bench", "--against", args.against, "--kernel", listed,
                        "--out", str(out / "gate")], out / "gate.log", args.gate_timeout)
        counts = _counts(out / "gate" / "compare.json")
        md = out / "gate" / "compare.md"
        compare_md = md.read_text(encoding="utf-8") if md.is_file() else ""
    outcome = decide(tests_rc, gate_rc, counts, acc)
    tests = "not run (no kernel affected)" if tests_rc is None else "passed" if tests_rc == 0 else \
        f"FAILED (exit {tests_rc}; tests.log in the artifact)"
    text = report_text(args.runner, outcome, acc, tests, compare_md)
    (out / "report.md").write_text(text, encoding="utf-8")
    doc = {"format": "kernel-harness-ci/1", "runner": args.runner, "kernels": kernels, "against": args.against,
           "tests_exit": tests_rc, "gate_exit": gate_rc, "counts": counts, **asdict(outcome),
           "acceptance": {**asdict(acc), "accepted": acc.accepted}}
    (out / "ci.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    if args.step_summary:
        note = "\n\n(cut at 1 MiB, GitHub's step-summary limit: report.md in the job's artifact has it all)\n"
        with open(args.step_summary, "a", encoding="utf-8") as f:
            f.write(truncate_bytes(text, STEP_SUMMARY_LIMIT, note))
    print(f"ci-gpu: {'PASSED' if outcome.passed else 'FAILED'}: {outcome.why}")
    return EXIT_OK if outcome.passed else EXIT_FAILED


@command("ci-needs", "fail unless every job in ${{ toJSON(needs) }} (env NEEDS) succeeded or was skipped")
@options(lambda p: p.add_argument("--env", default="NEEDS", help="the environment variable holding the JSON"))
def cmd_ci_needs(args) -> int:
    try:
        needs = json.loads(os.environ.get(args.env, ""))
    except ValueError:
        raise BadInput(f"ci-needs: ${args.env} is not JSON (set it to ${{{{ toJSON(needs) }}}})") from None
    if not isinstance(needs, dict) or not needs:
        raise BadInput(f"ci-needs: ${args.env}: expected a non-empty JSON object of jobs")
    return needs_code(needs)


def needs_code(needs: dict) -> int:
    """0 when every needed job succeeded or was skipped (nothing affected), else 1; one line per job."""
    bad = 0
    for name, job in sorted(needs.items()):
        result = job.get("result") if isinstance(job, dict) else None
        ok = result in ("success", "skipped")
        bad += not ok
        print(f"{name}: {result}{'' if ok else '  <- fails the gate'}")
    return EXIT_FAILED if bad else EXIT_OK

