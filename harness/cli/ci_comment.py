"""``ci-comment``: the one sticky pull-request comment, from each GPU runner's report.md.

The body opens with a hidden marker (``MARKER``) by which the comment workflow finds its previous comment
and edits it in place, then one status line per runner (always kept), then the reports. GitHub refuses a
comment over 65,536 characters, so when the reports do not fit, each gets an equal share of the room and is
cut with a line that links to the run's artifacts, where report.md is whole. The comment workflow posts this
file as it is: it never runs the harness or anything else from the pull request.
"""

from __future__ import annotations

from pathlib import Path

from harness.cli.registry import EXIT_OK, BadInput, command, options

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


def _reports(paths: list[str]) -> list[str]:
    """Each path a report.md, or a folder whose */report.md (one per downloaded artifact) are read in order."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(p.glob("*/report.md")) + sorted(p.glob("report.md"))
        elif p.is_file():
            files.append(p)
        else:
            raise BadInput(f"{p}: no such report or folder")
    try:
        return [f.read_text(encoding="utf-8", errors="replace") for f in files]
    except OSError as exc:
        raise BadInput(f"{exc.filename}: unreadable: {exc.strerror}") from None


def _options(p) -> None:
    p.add_argument("reports", nargs="*", help="report.md files, or folders holding */report.md")
    p.add_argument("--out", required=True, help="where to write the comment body")
    p.add_argument("--limit", type=int, default=COMMENT_LIMIT, help=f"characters (default {COMMENT_LIMIT})")
    p.add_argument("--link", default="", help="URL of the run whose artifacts hold the whole reports")
    p.add_argument("--note", default="", help="a line shown under the title (why no GPU job ran, say)")


@command("ci-comment", "build the sticky pull-request comment from GPU runners' report.md files")
@options(_options)
def cmd_ci_comment(args) -> int:
    body = comment_body(_reports(args.reports), limit=args.limit, link=args.link, note=args.note)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body, encoding="utf-8")
    print(f"wrote {out} ({len(body):,} characters)")
    return EXIT_OK
