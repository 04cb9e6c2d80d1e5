"""``ci-post``: the report job's one command: the status ``kernel-harness/gate`` on the commit, and the sticky
comment, both from the trusted gate job's outputs (harness.gate.status, harness.gate.comment).

The report job holds the write permissions (``statuses``, ``pull-requests``); it reads no artifact and runs
nothing of the pull request: its inputs are the gate job's outputs, checked again here.
"""

from __future__ import annotations

import base64
import binascii
import os
import re

from harness.cli.registry import EXIT_OK, BadInput, command, options

STATES = ("success", "failure", "pending", "error")


def _options(p) -> None:
    p.add_argument("--repo", required=True, help="$GITHUB_REPOSITORY")
    p.add_argument("--pr", required=True, type=int, help="the pull request's number")
    p.add_argument("--sha", required=True, help="the commit the status is for (40 hex)")
    p.add_argument("--state", required=True, help="success, failure, pending or error")
    p.add_argument("--description", default="", help="one line, at most 140 characters")
    p.add_argument("--target-url", default="", help="this run's URL")
    p.add_argument("--comment-env", default="", metavar="NAME",
                   help="the environment variable holding the comment body, base64 (the gate job's output)")
    p.add_argument("--bot", default="", help="the login the comment is posted as (default github-actions[bot])")


def post_status(repo: str, sha: str, state: str, description: str, target_url: str) -> None:
    from harness.gate.comment import RUN_URL
    from harness.gate.github import api
    from harness.gate.status import CONTEXT, DESCRIPTION_LIMIT

    if not re.fullmatch(r"[0-9a-f]{40}", sha) or state not in STATES:
        raise BadInput(f"ci-post: --sha {sha[:50]!r} / --state {state[:20]!r}: not a commit and a status state")
    body = {"state": state, "context": CONTEXT, "description": " ".join(description.split())[:DESCRIPTION_LIMIT]}
    if target_url and RUN_URL.fullmatch(target_url):
        body["target_url"] = target_url
    api(f"repos/{repo}/statuses/{sha}", method="POST", body=body)
    print(f"ci-post: {CONTEXT} = {state} on {sha[:12]}: {body['description']}")


def post_comment(repo: str, pr: int, body: str, bot: str) -> None:
    from harness.gate.comment import check_body, find_sticky
    from harness.gate.github import api

    body = check_body(body)
    comments = api(f"repos/{repo}/issues/{pr}/comments?per_page=100", paginate=True) or []
    old = find_sticky(comments, bot)
    if old:
        api(f"repos/{repo}/issues/comments/{int(old['id'])}", method="PATCH", body={"body": body})
        print(f"ci-post: updated comment {old.get('html_url', old['id'])}")
    else:
        made = api(f"repos/{repo}/issues/{pr}/comments", method="POST", body={"body": body}) or {}
        print(f"ci-post: created comment {made.get('html_url', '')}")


@command("ci-post", "post the gate's status on the commit and its sticky comment on the pull request")
@options(_options)
def cmd_ci_post(args) -> int:
    from harness.gate.comment import BOT_LOGIN

    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", args.repo) or args.pr <= 0:
        raise BadInput(f"ci-post: --repo {args.repo!r} --pr {args.pr}: expected owner/name and a number")
    post_status(args.repo, args.sha, args.state, args.description, args.target_url)
    encoded = os.environ.get(args.comment_env, "") if args.comment_env else ""
    if encoded:
        try:
            body = base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise BadInput("ci-post: --comment is not base64 of UTF-8 text") from None
        post_comment(args.repo, args.pr, body, args.bot or BOT_LOGIN)
    return EXIT_OK
