"""The one door to GitHub's REST API: ``gh api`` in a subprocess, with the workflow's token (``GH_TOKEN``).

The trusted jobs of the GPU gate call it to look up what the event alone cannot say (a person's role, the pull
request as it is now, its comments) and to post the status and the comment. Tests replace :data:`CALL`.
"""

from __future__ import annotations

import json
import re
import subprocess

from harness.steps import BadInput

_PATH = re.compile(r"repos/[A-Za-z0-9._-]+/[A-Za-z0-9._-]+(/[A-Za-z0-9._\[\]/-]+)?(\?[A-Za-z0-9=&_]+)?")


def _gh(args: list[str], stdin: str | None) -> tuple[int, str, str]:
    proc = subprocess.run(["gh", "api", *args], input=stdin, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


CALL = _gh  # (args, stdin) -> (exit code, stdout, stderr)


def api(path: str, *, method: str = "GET", body: dict | None = None, paginate: bool = False,
        missing_ok: bool = False):
    """The JSON answer of ``method path``; None for a 404 when ``missing_ok``. Paths are checked, so a login
    or a number from an event can never add an option or leave the repository's API."""
    if not _PATH.fullmatch(path) or ".." in path:
        raise BadInput(f"github api: {path!r} is not a repository API path")
    args = ["--method", method, path]
    if paginate:
        args += ["--paginate", "--slurp"]
    if body is not None:
        args += ["--input", "-"]
    code, out, err = CALL(args, json.dumps(body) if body is not None else None)
    if code != 0:
        if missing_ok and ("404" in err or "Not Found" in err):
            return None
        raise BadInput(f"github api: {method} {path}: {(err.strip().splitlines() or ['failed'])[-1]}")
    try:
        doc = json.loads(out) if out.strip() else None
    except ValueError:
        raise BadInput(f"github api: {method} {path}: the answer is not JSON") from None
    if paginate and isinstance(doc, list) and all(isinstance(page, list) for page in doc):
        return [item for page in doc for item in page]  # --slurp: one list per page
    return doc
