"""The one sticky pull-request comment, rendered by trusted code (the gate job) and posted by the report job.

Nothing of what a GPU runner sent back is pasted into the comment: it is rendered with one fixed template from
the validated reports (harness.gate.status), and every value that came from the runner or the pull request
(a runner's name, a kernel, a case, a reason) is shown as inline code, cut to a length, so that it can neither
mention anyone (``@user``), link anywhere, embed an image or HTML, nor break the table. The only link is the
run's own URL, checked against the shape GitHub gives it.

The report job finds its previous comment by the marker *and* its own login (``github-actions[bot]``, or the
app's), so a comment someone else wrote with the marker is never edited, nor taken for the gate's report.
"""

from __future__ import annotations

import re

from harness.gate.authorize import Decision
from harness.gate.status import Verdict
from harness.steps import BadInput

MARKER = "<!-- kernel-harness-report -->"
COMMENT_LIMIT = 65_536          # GitHub's limit on one comment's body, in characters; held here in UTF-8 bytes,
                                # so its base64 (87,384 characters) fits one job output and one argument
BOT_LOGIN = "github-actions[bot]"  # who GITHUB_TOKEN posts as
RUN_URL = re.compile(r"https://[A-Za-z0-9.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/actions/runs/[0-9]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")
STATE_WORDS = {"success": "passed", "failure": "FAILED", "pending": "waiting", "error": "ERROR"}


def code(value, limit: int = 120) -> str:
    """``value`` as inline code: one line, no backtick, pipes escaped, cut to ``limit`` characters. Inside a
    code span GitHub renders no mention, no link, no image and no HTML."""
    text = " ".join(_CONTROL.sub(" ", str(value)).split()).replace("`", "'")
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return "`" + (text or " ").replace("|", "\\|") + "`"


def _ratio(v) -> str:
    return "" if v is None else f"{v:.3f}"


def _runner_rows(v: Verdict) -> list[str]:
    head = ["| runner | tests | merge gate | slower | faster | same | inconclusive | wrong | error |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    rows = []
    for r in v.reports:
        tests = "not run" if r.tests_exit is None else ("passed" if r.tests_exit == 0 else f"exit {r.tests_exit}")
        gate = "not run" if r.gate_exit is None else f"exit {r.gate_exit}"
        n = [str(r.counts.get(k, 0)) for k in ("SLOWER", "FASTER", "SAME", "INCONCLUSIVE", "WRONG", "ERROR")]
        rows.append(f"| {code(r.runner, 40)} | {tests} | {gate} | " + " | ".join(n) + " |")
    return head + rows if rows else []


def _case_rows(v: Verdict) -> list[str]:
    rows = [f"| {code(r.runner, 40)} | {code(c.kernel, 60)} | {code(c.dtype, 12)} | {code(c.case_id, 80)} | "
            f"{c.verdict} | {_ratio(c.ratio)} | {_ratio(c.ratio_lo)}-{_ratio(c.ratio_hi)} |"
            for r in v.reports for c in r.cases]
    if not rows:
        return []
    return ["", "Cases that are not SAME (PR/base ratio of medians, its 95% interval):", "",
            "| runner | kernel | dtype | case | verdict | ratio | interval |", "|---|---|---|---|---|---:|---|", *rows]


def _size(text: str) -> int:
    return len(text.encode())


def render(v: Verdict, auth: Decision, *, link: str = "", note: str = "", limit: int = COMMENT_LIMIT) -> str:
    """The comment for the status ``v`` of the commit ``auth`` authorized (or did not)."""
    if link and not RUN_URL.fullmatch(link):
        raise BadInput(f"--link {link[:80]!r}: not a workflow run's URL")
    lines = [MARKER, f"# Kernel merge gate: {STATE_WORDS.get(v.state, v.state)}", ""]
    if auth.sha:
        lines.append(f"- commit: {code(auth.sha[:12])}")
    lines.append(f"- status `kernel-harness/gate`: {v.state}, {code(v.description, 160)}")
    if auth.run:
        lines.append(f"- authorized: {code(auth.why)}")
    for acc in auth.accepts:
        lines.append(f"- {acc.kind} accepted by {code(acc.by, 40)}: {code(acc.reason, 300)}")
    if note:
        lines.append(f"- {code(note, 300)}")
    lines += [f"- refused: {code(p, 200)}" for p in v.problems]
    if link:
        lines.append(f"- the whole reports are in the run's artifacts: {link}")
    table = _runner_rows(v)
    lines += [""] + table if table else []
    cases = _case_rows(v)
    body = "\n".join(lines + cases) + "\n"
    if _size(body) > limit:
        cut = ["", "(cases cut to fit one comment: every case is in the run's reports)"]
        while cases and _size("\n".join(lines + cases + cut)) >= limit:
            cases = cases[:-1] if len(cases) > 6 else []  # the first 5 lines are the table's head
        body = "\n".join(lines + cases + cut) + "\n"
    if _size(body) > limit:
        raise BadInput(f"the comment would be {_size(body):,} bytes, over {limit:,}")
    return body


def find_sticky(comments: list[dict], bot: str = BOT_LOGIN) -> dict | None:
    """The gate's previous comment: the first that starts with the marker *and* was written by ``bot``."""
    for c in comments:
        user = c.get("user") or {}
        if user.get("login") == bot and str(c.get("body") or "").startswith(MARKER):
            return c
    return None


def check_body(body: str) -> str:
    """What the report job posts: ours (the marker first) and within GitHub's limit."""
    if not body.startswith(MARKER) or _size(body) > COMMENT_LIMIT:
        raise BadInput(f"the comment body is not a kernel-harness comment within {COMMENT_LIMIT:,} bytes")
    return body
