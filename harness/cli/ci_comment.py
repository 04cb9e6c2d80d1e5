"""``ci-comment``: the one sticky pull-request comment, from each GPU runner's report.md.

What it says and how it is cut to fit is harness.gate.comment's; here are the options and the exit code.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.cli.registry import EXIT_OK, command, options
from harness.gate.comment import COMMENT_LIMIT, STEPS, CommentRun
from harness.steps import execute


def _options(p) -> None:
    p.add_argument("reports", nargs="*", help="report.md files, or folders holding */report.md")
    p.add_argument("--out", required=True, help="where to write the comment body")
    p.add_argument("--limit", type=int, default=COMMENT_LIMIT, help=f"characters (default {COMMENT_LIMIT})")
    p.add_argument("--link", default="", help="URL of the run whose artifacts hold the whole reports")
    p.add_argument("--note", default="", help="a line shown under the title (why no GPU job ran, say)")


@command("ci-comment", "build the sticky pull-request comment from GPU runners' report.md files")
@options(_options)
def cmd_ci_comment(args) -> int:
    first = CommentRun(paths=tuple(args.reports), out=Path(args.out), limit=args.limit, link=args.link,
                       note=args.note)
    execute(STEPS, first, trace=os.environ.get("KH_TRACE_STEPS") == "1")
    return EXIT_OK
