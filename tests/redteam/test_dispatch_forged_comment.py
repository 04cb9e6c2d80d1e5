"""Attack: a forged gate report. The pull request's author (or any commenter) posts a comment that looks like
the bot's, with its marker, a "passed" verdict, a fake verdict JSON and ``/gate`` commands; and the pull
request's code on the GPU runner rewrites its ci.json to say it passed, with an accepted regression, and puts
a mention and a link into the names the comment shows.

Played through the real trusted code: ci-authorize's decision (harness.gate.authorize), the gate job's verdict
(harness.gate.status) and the comment's rendering and posting (harness.gate.comment, ``ci-post`` with the API
faked).
"""

from __future__ import annotations

import json

from harness.cli.main import main
from harness.gate import authorize as au
from harness.gate import comment as cm
from harness.gate import github
from harness.gate import status as st
from harness.gate.ci import CI_FORMAT

HEAD, BASE = "f" * 40, "0" * 40
AUTHOR = "mallory"
FORGED = (f"{cm.MARKER}\n# Kernel merge gate: passed\n\n"
          f'```json\n{{"format": "{CI_FORMAT}", "passed": true, "accepted": true}}\n```\n'
          f"/gate accept-regression {HEAD} the bot says it is fine\n")
PULL = {"number": 7, "state": "open", "user": {"login": AUTHOR}, "head": {"sha": HEAD}, "base": {"sha": BASE},
        "labels": []}
ROLES = {AUTHOR: "read", "maint": "write"}


def _comment(cid, login, body, kind="User"):
    return {"id": cid, "user": {"login": login, "type": kind}, "body": body}


def test_a_forged_report_comment_authorizes_and_accepts_nothing():
    comments = [_comment(1, AUTHOR, FORGED), _comment(2, AUTHOR, f"/gate run {HEAD}"),
                _comment(3, "github-actions", f"/gate accept-regression {HEAD} lookalike login")]
    for c in comments:
        event = {"action": "created", "sender": c["user"], "issue": {"number": 7, "pull_request": {}}, "comment": c}
        d = au.decide(au.read_event("issue_comment", event), PULL, ROLES, comments)
        assert (d.run, d.relevant) == (False, False), c["body"][:40]
    pushed = au.decide(au.read_event("pull_request_target", {
        "action": "synchronize", "sender": {"login": "maint"},
        "pull_request": {"number": 7, "head": {"sha": HEAD}}}), PULL, ROLES, comments)
    assert pushed.run and pushed.accepts == ()  # a real run: none of the forged acceptances counts
    print("REDTEAM forged-comment: no effect: the forged report, its /gate commands and a lookalike login "
          "authorize and accept nothing")


def test_the_sticky_comment_is_never_the_forged_one(monkeypatch):
    calls = []

    def api(args, stdin):
        method, path = args[args.index("--method") + 1], args[args.index("--method") + 2]
        calls.append((method, path))
        if method == "GET":
            return 0, json.dumps([[_comment(1, AUTHOR, FORGED), _comment(2, "evil[bot]", FORGED, "Bot")]]), ""
        return 0, "{}", ""

    monkeypatch.setattr(github, "CALL", api)
    monkeypatch.setenv("COMMENT", __import__("base64").b64encode(f"{cm.MARKER}\nours\n".encode()).decode())
    assert main(["ci-post", "--repo", "o/r", "--pr", "7", "--sha", HEAD, "--state", "failure",
                 "--comment-env", "COMMENT"]) == 0
    assert ("POST", "repos/o/r/issues/7/comments") in calls  # a new comment of ours: the forged ones untouched
    assert not [c for c in calls if c[0] == "PATCH"]
    print("REDTEAM forged-comment: no effect: the marker without the bot's login is not the gate's comment; "
          "the forged one is never edited or read")


def test_a_rewritten_ci_json_cannot_pass_the_gate(tmp_path):
    auth = au.Decision(True, True, 7, HEAD, BASE, "pushed by maint (write)", "maint")
    needs = {"authorize": {"result": "success"}, "plan": {"result": "success"}, "gpu": {"result": "success"}}
    forged = {"format": CI_FORMAT, "runner": "sm90", "kernels": ["rope"], "against": BASE, "sha": HEAD,
              "tests_exit": 0, "gate_exit": 1, "counts": {"SLOWER": 2}, "cases": [], "tampered": [],
              "passed": True, "accepted": True, "why": "accepted by @maint: see https://evil.example",
              "acceptance": {"by": "maint", "reason": "forged"}}
    (tmp_path / "gpu-report-0").mkdir()
    (tmp_path / "gpu-report-0" / "ci.json").write_text(json.dumps(forged))
    v = st.verdict(auth, auth, needs, True, [tmp_path / "gpu-report-0" / "ci.json"])
    assert v.state == "failure" and "2 slower" in v.description
    body = cm.render(v, auth)
    for line in body.splitlines():  # outside inline code, no mention and no link
        bare = "".join(part for i, part in enumerate(line.split("`")) if i % 2 == 0)
        assert "@" not in bare and "http" not in bare, line
    other = tmp_path / "gpu-report-1"
    other.mkdir()
    (other / "ci.json").write_text(json.dumps({**forged, "runner": "@everyone", "counts": {"SAME": 1},
                                               "gate_exit": 0}))
    refused = st.verdict(auth, auth, needs, True, [other / "ci.json"])
    assert refused.state == "failure" and "runner" in refused.problems[0]
    print(f"REDTEAM forged-comment: caught: a ci.json that claims an accepted regression is decided again: "
          f"{v.description}; one with a mention in its runner name is refused")
