"""The one sticky pull-request comment (``python -m harness ci-comment``), from each GPU runner's report.md.

The body opens with a hidden marker (``MARKER``) by which the comment workflow finds its previous comment
and edits it in place, then one status line per runner (always kept), then the reports. GitHub refuses a
comment over 65,536 characters, so when the reports do not fit, each gets an equal share of the room and is
cut with a line that links to the run's artifacts, where report.md is whole. The comment workflow posts this
file as it is: it never runs the harness or anything else from the pull request.

The command is ``STEPS`` over one frozen :class:`CommentRun` (:func:`harness.steps.execute`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from harness.steps import BadInput

MARKER = "<!-- kernel-harness-report -->"
COMMENT_LIMIT = 65_536   # GitHub's limit on one comment's body, in characters
MIN_LIMIT = 2_000        # below this not even the status lines and cut notes fit


def _status(report: str) -> str:
    first = report.strip().splitlines()[0] if report.strip() else "(empty report)"
    return "- " + first.lstrip("#").strip()


def comment_body(reports: list[str], *, limit: int = COMMENT_LIMIT, link: str = "", note: str = "") -> str:
    """The comment: marker, title, ``note``, a status line per report, then the reports, within ``limit``."""
    if limit < MIN_LIMIT:
        raise BadInput(f"--limit {limit}: at least {MIN_LIMIT} characters")
    where = f": {link}" if link else " of this run"
    head = [MARKER, "# Kernel merge gate", ""]
    if note:
        head += [note.strip(), ""]
    if not reports:
        head += ["No GPU report: no GPU job ran for this commit."]
    head += [_status(r) for r in reports]
    top = "\n".join(head).rstrip() + "\n"
    sep = "\n\n---\n\n"
    body = top + "".join(sep + r.strip() + "\n" for r in reports)
    if len(body) <= limit:
        return body
    top = top[: limit // 4]  # the status lines stay; a pathological note does not crowd out the reports
    room = limit - len(top) - len(sep) * len(reports)
    share = room // max(1, len(reports))
    parts = []
    for r in reports:
        r = r.strip() + "\n"
        if len(r) > share:
            cut = f"\n\n(cut to fit one comment at {len(r):,} characters: the whole report.md is in the " \
                  f"artifacts{where})\n"
            r = r[: max(0, share - len(cut))] + cut
            r = r[:share]
        parts.append(sep + r)
    return top + "".join(parts)


@dataclass(frozen=True)
class CommentRun:
    paths: tuple[str, ...]        # report.md files, or folders holding */report.md (one per artifact)
    out: Path
    limit: int = COMMENT_LIMIT
    link: str = ""                # the run whose artifacts hold the whole reports
    note: str = ""
    # filled by the steps
    reports: tuple[str, ...] = ()
    body: str = ""


def read_reports(run: CommentRun) -> CommentRun:
    files: list[Path] = []
    for p in map(Path, run.paths):
        if p.is_dir():
            files += sorted(p.glob("*/report.md")) + sorted(p.glob("report.md"))
        elif p.is_file():
            files.append(p)
        else:
            raise BadInput(f"{p}: no such report or folder")
    try:
        reports = tuple(f.read_text(encoding="utf-8", errors="replace") for f in files)
    except OSError as exc:
        raise BadInput(f"{exc.filename}: unreadable: {exc.strerror}") from None
    return replace(run, reports=reports)


def build_body(run: CommentRun) -> CommentRun:
    return replace(run, body=comment_body(list(run.reports), limit=run.limit, link=run.link, note=run.note))


def write_body(run: CommentRun) -> CommentRun:
    run.out.parent.mkdir(parents=True, exist_ok=True)
    run.out.write_text(run.body, encoding="utf-8")
    print(f"wrote {run.out} ({len(run.body):,} characters)")
    return run


STEPS = (read_reports, build_body, write_body)
