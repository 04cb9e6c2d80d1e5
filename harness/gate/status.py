"""The required status ``kernel-harness/gate``, decided by the trusted gate job (``python -m harness ci-gate``).

The gate job runs on a GitHub-hosted runner from the default branch's code. What the GPU runners send back is
data from a machine where pull-request code ran, so nothing in it is believed as it stands: each runner's
ci.json is size-checked before it is read, validated field by field (:func:`read_report`), must name the
authorized commit, and its verdict is decided again here (harness.gate.ci.decide) with the acceptances of a
fresh authorization, looked up when the run ends. A pass also needs the GPU job itself to have succeeded
(its exit code is ci-gpu's, which pull-request code does not set), so a rewritten ci.json can only make the
gate fail, never pass.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from harness.gate.authorize import Decision
from harness.gate.ci import CI_FORMAT, decide
from harness.results.verdicts import OUTCOMES
from harness.steps import BadInput

CONTEXT = "kernel-harness/gate"   # the status to require in the ruleset (docs/ci.md)
REPORT_LIMIT = 1024 * 1024        # bytes: a ci.json is a few KiB; a larger file is not read at all
DESCRIPTION_LIMIT = 140           # GitHub's limit on a status description
_NAME = re.compile(r"[A-Za-z0-9_]{1,100}")
_RUNNER = re.compile(r"[A-Za-z0-9_.,:+ -]{1,100}")
_CASE = re.compile(r"[A-Za-z0-9_=,.:+-]{1,200}")
_SHA = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Case:
    kernel: str
    dtype: str
    case_id: str
    verdict: str
    ratio: float | None
    ratio_lo: float | None
    ratio_hi: float | None


@dataclass(frozen=True)
class RunnerReport:
    runner: str
    sha: str
    kernels: tuple[str, ...]
    tests_exit: int | None
    gate_exit: int | None
    counts: dict
    cases: tuple[Case, ...]
    tampered: tuple[str, ...]
    why: str                      # the runner's own line: free text, shown only as code


@dataclass(frozen=True)
class Verdict:
    state: str                    # success | failure | pending | error
    description: str              # one line, at most DESCRIPTION_LIMIT characters
    reports: tuple[RunnerReport, ...] = ()
    problems: tuple[str, ...] = ()  # one line per report refused


def _int(v, where: str) -> int | None:
    if v is None or (isinstance(v, int) and not isinstance(v, bool) and -1 <= v <= 65535):
        return v
    raise ValueError(f"{where}: expected an exit code or null")


def _ratio(v, where: str) -> float | None:
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
        return None if v is None else float(v)
    raise ValueError(f"{where}: expected a finite ratio or null")


def _match(pattern: re.Pattern, v, where: str) -> str:
    if isinstance(v, str) and pattern.fullmatch(v):
        return v
    raise ValueError(f"{where}: {str(v)[:40]!r} is not allowed here")


def parse_report(doc) -> RunnerReport:
    """A ci.json document as a RunnerReport; ValueError naming the first key that is not what ci-gpu writes."""
    if not isinstance(doc, dict) or doc.get("format") != CI_FORMAT:
        raise ValueError(f"format: expected {CI_FORMAT!r}")
    counts = doc.get("counts")
    if not isinstance(counts, dict) or any(k not in OUTCOMES or _int(v, f"counts.{k}") is None
                                           for k, v in counts.items()):
        raise ValueError("counts: expected verdicts and counts")
    raw_cases = doc.get("cases")
    if not isinstance(raw_cases, list) or len(raw_cases) > 50:
        raise ValueError("cases: expected a list of at most 50")
    found = []
    for i, c in enumerate(raw_cases):
        if not isinstance(c, dict):
            raise ValueError(f"cases[{i}]: expected an object")
        found.append(Case(_match(_NAME, c.get("kernel"), f"cases[{i}].kernel"),
                          _match(_NAME, c.get("dtype"), f"cases[{i}].dtype"),
                          _match(_CASE, c.get("case_id"), f"cases[{i}].case_id"),
                          _match(re.compile("|".join(OUTCOMES)), c.get("verdict"), f"cases[{i}].verdict"),
                          *(_ratio(c.get(k), f"cases[{i}].{k}") for k in ("ratio", "ratio_lo", "ratio_hi"))))
    kernels, tampered = doc.get("kernels"), doc.get("tampered")
    if not isinstance(kernels, list) or not isinstance(tampered, list):
        raise ValueError("kernels/tampered: expected lists")
    return RunnerReport(
        runner=_match(_RUNNER, doc.get("runner"), "runner"), sha=_match(_SHA, doc.get("sha"), "sha"),
        kernels=tuple(_match(_NAME, k, "kernels[]") for k in kernels),
        tests_exit=_int(doc.get("tests_exit"), "tests_exit"), gate_exit=_int(doc.get("gate_exit"), "gate_exit"),
        counts={k: int(v) for k, v in counts.items()}, cases=tuple(found),
        tampered=tuple(str(t)[:200] for t in tampered[:20]), why=str(doc.get("why") or "")[:300])


def read_report(path: Path) -> RunnerReport:
    """One runner's ci.json: its size first (the file is not read when too large), then its fields."""
    try:
        size = path.stat().st_size
        if size > REPORT_LIMIT:
            raise BadInput(f"{path}: {size:,} bytes, over the {REPORT_LIMIT:,} a ci.json may have; not read")
        with open(path, "rb") as f:
            data = f.read(REPORT_LIMIT + 1)  # the file may have grown since the stat
    except OSError as exc:
        raise BadInput(f"{path}: unreadable: {exc.strerror}") from None
    if len(data) > REPORT_LIMIT:
        raise BadInput(f"{path}: over the {REPORT_LIMIT:,} bytes a ci.json may have; not read")
    try:
        return parse_report(json.loads(data.decode("utf-8")))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: {exc}") from None


def parse_needs(text: str, env: str) -> dict:
    """The jobs in ``${{ toJSON(needs) }}`` (the gate job's), read from the environment variable ``env``."""
    try:
        needs = json.loads(text)
    except ValueError:
        raise BadInput(f"${env} is not JSON (set it to ${{{{ toJSON(needs) }}}})") from None
    if not isinstance(needs, dict) or not needs:
        raise BadInput(f"${env}: expected a non-empty JSON object of jobs")
    return needs


def _line(text: str) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= DESCRIPTION_LIMIT else one[:DESCRIPTION_LIMIT - 3] + "..."


def verdict(auth: Decision, fresh: Decision, needs: dict, plan_run: bool, reports: list[Path]) -> Verdict:
    """The status of the authorized commit. ``auth``: the decision that started the run; ``fresh``: the same
    event decided again now (an authorization withdrawn, or a head moved, during the run counts);
    ``needs``: ``toJSON(needs)``; ``plan_run``: the plan job found kernels to gate; ``reports``: ci.json files."""
    if not auth.run:
        return Verdict("pending", _line(auth.why))
    if not fresh.run or fresh.sha != auth.sha:
        return Verdict("pending", _line(f"authorization withdrawn or head moved during the run: {fresh.why}"))
    result = {name: (job or {}).get("result") for name, job in needs.items() if isinstance(job, dict)}
    if result.get("plan") != "success":
        return Verdict("error", _line(f"the plan job did not succeed ({result.get('plan')})"))
    if not plan_run:
        return Verdict("success", "no kernel affected: nothing to gate on a GPU")
    if result.get("gpu") == "cancelled":
        return Verdict("pending", "GPU jobs cancelled (a newer run of this pull request took over)")
    if result.get("gpu") != "success":
        return Verdict("failure", _line(f"GPU jobs: {result.get('gpu')} (see the run's reports)"))
    got, problems = [], []
    for path in reports:
        try:
            r = read_report(path)
        except BadInput as exc:
            problems.append(str(exc))
            continue
        if r.sha != auth.sha:
            problems.append(f"{path}: reports commit {r.sha[:12]}, not the authorized {auth.sha[:12]}")
            continue
        got.append(r)
    if problems or not got:
        return Verdict("failure", _line(problems[0] if problems else "no GPU report came back"), tuple(got),
                       tuple(problems))
    failed = []
    for r in got:
        out = decide(r.tests_exit, r.gate_exit, r.counts, fresh.accepted("regression"), tampered=r.tampered)
        if not out.passed:
            failed.append(f"{r.runner}: {out.why}")
    if failed:
        return Verdict("failure", _line("; ".join(failed)), tuple(got))
    accepted = any(r.counts.get("SLOWER") for r in got)
    return Verdict("success", _line(f"{len(got)} GPU runner(s) passed" + (", regression accepted" if accepted
                                                                          else "")), tuple(got))
