"""harness.gate.authorize: who may send a pull request's head to a GPU runner and who may accept what, over
event payloads and API answers shaped as GitHub writes them; and ``harness ci-authorize`` with the API faked."""

from __future__ import annotations

import json

import pytest

from harness.cli.main import main
from harness.gate import authorize as au
from harness.gate import github
from harness.steps import BadInput

HEAD, OLD, BASE = "a" * 40, "b" * 40, "c" * 40
AUTHOR, MAINT, TRIAGER, STRANGER = "alice", "maint", "tri", "mallory"
ROLES = {AUTHOR: "read", MAINT: "write", TRIAGER: "triage", STRANGER: "none"}


def pull(head=HEAD, labels=(), state="open", number=7):
    return {"number": number, "state": state, "user": {"login": AUTHOR}, "head": {"sha": head},
            "base": {"sha": BASE}, "labels": [{"name": n} for n in labels]}


def pr_event(action, sender, head=HEAD, label=None):
    ev = {"action": action, "sender": {"login": sender}, "pull_request": {"number": 7, "head": {"sha": head}}}
    if label:
        ev["label"] = {"name": label}
    return ev


def comment(body, by, cid=1):
    return {"id": cid, "user": {"login": by}, "body": body}


def comment_event(body, by, action="created", cid=1, before=None):
    ev = {"action": action, "sender": {"login": by}, "issue": {"number": 7, "pull_request": {"url": "x"}},
          "comment": comment(body, by, cid)}
    if before is not None:
        ev["changes"] = {"body": {"from": before}}
    return ev


def decide(name, event, *, pr=None, comments=(), roles=ROLES):
    return au.decide(au.read_event(name, event), pr if pr is not None else pull(), roles, list(comments))


def test_a_maintainer_s_push_runs_a_stranger_s_waits():
    d = decide("pull_request_target", pr_event("synchronize", MAINT))
    assert (d.run, d.relevant, d.sha, d.base, d.by) == (True, True, HEAD, BASE, MAINT)
    waiting = decide("pull_request_target", pr_event("opened", AUTHOR))
    assert (waiting.run, waiting.relevant) == (False, True) and f"/gate run {HEAD[:7]}" in waiting.why


def test_the_label_authorizes_only_when_applied_by_write_and_still_on():
    event = pr_event("labeled", MAINT, label=au.RUN_LABEL)
    assert decide("pull_request_target", event, pr=pull(labels=[au.RUN_LABEL])).run
    # checked again at the end of a run: the label was removed meanwhile
    assert not decide("pull_request_target", event, pr=pull()).run
    by_triager = decide("pull_request_target", pr_event("labeled", TRIAGER, label=au.RUN_LABEL),
                        pr=pull(labels=[au.RUN_LABEL]))
    assert not by_triager.run and "cannot authorize" in by_triager.why
    other = decide("pull_request_target", pr_event("labeled", MAINT, label="documentation"))
    assert (other.run, other.relevant) == (False, False)  # another label changes nothing, cancels nothing


def test_unlabel_withdraws_and_a_moved_head_needs_a_new_authorization():
    gone = decide("pull_request_target", pr_event("unlabeled", MAINT, label=au.RUN_LABEL))
    assert (gone.run, gone.relevant) == (False, True) and "withdrawn" in gone.why
    moved = decide("pull_request_target", pr_event("labeled", MAINT, head=OLD, label=au.RUN_LABEL),
                   pr=pull(labels=[au.RUN_LABEL]))
    assert not moved.run and "head moved" in moved.why
    pushed = decide("pull_request_target", pr_event("synchronize", MAINT, head=OLD))
    assert (pushed.run, pushed.relevant) == (False, False)  # the newer push has its own event


def test_gate_run_comment_names_the_exact_head():
    body = f"/gate run {HEAD[:7]}"
    d = decide("issue_comment", comment_event(body, MAINT), comments=[comment(body, MAINT)])
    assert d.run and d.sha == HEAD
    stale = f"/gate run {OLD[:10]}"
    assert not decide("issue_comment", comment_event(stale, MAINT), comments=[comment(stale, MAINT)]).run
    bare = decide("issue_comment", comment_event("/gate run", MAINT), comments=[comment("/gate run", MAINT)])
    assert not bare.run and "must name the head commit" in bare.why
    # the comment was edited or deleted before the decision: it no longer says so
    assert not decide("issue_comment", comment_event(body, MAINT), comments=[comment("thanks", MAINT)]).run


@pytest.mark.parametrize("who", [AUTHOR, TRIAGER, STRANGER, "ghost"])
def test_gate_run_by_someone_without_write_has_no_effect(who):
    body = f"/gate run {HEAD}"
    d = decide("issue_comment", comment_event(body, who), comments=[comment(body, who)])
    assert (d.run, d.relevant) == (False, False)  # not even the status changes: anyone can comment


def test_acceptances_are_tied_to_the_head_and_never_the_author_s():
    comments = [comment(f"/gate accept-regression {OLD[:8]} an older commit", TRIAGER, 1),
                comment(f"/gate accept-regression {HEAD[:8]} decode 4% slower, prefill 20% faster", TRIAGER, 2),
                comment(f"/gate accept-policy {HEAD[:8]} I loosen my own tolerance", AUTHOR, 3),
                comment(f"/gate accept-policy {HEAD[:8]} raised by a stranger", STRANGER, 4),
                comment(f"/gate accept-policy {HEAD[:8]}", MAINT, 5)]  # no reason: not an acceptance
    d = decide("pull_request_target", pr_event("synchronize", MAINT), comments=comments)
    assert d.run and d.accepts == (au.Acceptance("regression", TRIAGER, "decode 4% slower, prefill 20% faster"),)
    assert d.accepted("policy") is None
    # the author may even hold write access: their own acceptance still counts for nothing
    assert au.acceptances(HEAD, AUTHOR, comments, {**ROLES, AUTHOR: "write"})[0].kind == "regression"
    assert len(au.acceptances(HEAD, AUTHOR, comments, {**ROLES, AUTHOR: "write"})) == 1
    after_push = au.acceptances(OLD, AUTHOR, comments, ROLES)
    assert [a.reason for a in after_push] == ["an older commit"]


def test_an_acceptance_by_write_reruns_by_triage_is_recorded_by_the_author_is_ignored():
    body = f"/gate accept-regression {HEAD[:8]} known"
    by_maint = decide("issue_comment", comment_event(body, MAINT), comments=[comment(body, MAINT)])
    assert by_maint.run and by_maint.accepted("regression").by == MAINT
    by_tri = decide("issue_comment", comment_event(body, TRIAGER), comments=[comment(body, TRIAGER)])
    assert (by_tri.run, by_tri.relevant) == (False, False) and "recorded" in by_tri.why
    own = decide("issue_comment", comment_event(body, AUTHOR), comments=[comment(body, AUTHOR)],
                 roles={**ROLES, AUTHOR: "write"})
    assert (own.run, own.relevant) == (False, False)


def test_editing_or_deleting_a_command_withdraws():
    body = f"/gate accept-regression {HEAD[:8]} known"
    for event in (comment_event("never mind", TRIAGER, action="edited", before=body),
                  comment_event(body, TRIAGER, action="deleted")):
        d = decide("issue_comment", event)
        assert (d.run, d.relevant) == (False, True) and "edited or deleted" in d.why
    stranger = decide("issue_comment", comment_event(body, STRANGER, action="deleted"))
    assert not stranger.relevant  # a stranger's own comment was never worth anything


def test_events_that_are_not_for_the_gate():
    assert decide("issue_comment", comment_event("looks good", MAINT)).relevant is False
    issue = comment_event(f"/gate run {HEAD}", MAINT)
    del issue["issue"]["pull_request"]
    assert au.read_event("issue_comment", issue).kind == "ignored"
    closed = decide("pull_request_target", pr_event("synchronize", MAINT), pr=pull(state="closed"))
    assert not closed.run and not closed.relevant
    trusted = au.decide(au.read_event("schedule", {}), None, {}, [], sha=HEAD, against="HEAD")
    assert (trusted.run, trusted.relevant, trusted.sha, trusted.base) == (True, False, HEAD, "HEAD")


@pytest.mark.parametrize("name,event", [
    ("pull_request_target", {"action": "opened", "pull_request": {"number": 7, "head": {"sha": "short"}},
                             "sender": {"login": MAINT}}),
    ("pull_request_target", {"action": "opened", "pull_request": {"number": "7", "head": {"sha": HEAD}},
                             "sender": {"login": MAINT}}),
    ("issue_comment", {"action": "created", "issue": {}, "comment": {}}),
    ("push", []),
])
def test_a_payload_github_would_not_write_is_bad_input(name, event):
    with pytest.raises(BadInput):
        au.read_event(name, event)


def test_parse_role_and_command():
    assert au.parse_role({"permission": "write", "role_name": "maintain"}) == "maintain"
    assert au.parse_role({"permission": "read", "role_name": "custom-role"}) == "read"
    assert au.parse_role(None) == "none" and au.parse_role({"permission": "owner!"}) == "none"
    cmd = au.parse_command(f"\n  /gate accept-policy {HEAD[:9].upper()} loosened on purpose  \nmore", "x", 3)
    assert (cmd.verb, cmd.sha, cmd.reason, cmd.comment_id) == ("accept-policy", HEAD[:9], "loosened on purpose", 3)
    assert au.parse_command("please /gate run abcdef0", "x", 1) is None  # only the first line, only at its start
    assert au.parse_command("/gate run abc", "x", 1).problem


def test_authorization_round_trip_and_refusals():
    d = decide("pull_request_target", pr_event("synchronize", MAINT),
               comments=[comment(f"/gate accept-policy {HEAD[:7]} ok", TRIAGER)])
    back = au.read_authorization(json.dumps(au.authorization_doc(d)), "auth.json")
    assert back == d
    lines = au.output_lines(d)
    assert "run=true" in lines and f"sha={HEAD}" in lines and all("\n" not in v for v in lines)
    for text in ("not json", "{}", json.dumps({**au.authorization_doc(d), "sha": "$(id)"})):
        with pytest.raises(BadInput, match="auth.json"):
            au.read_authorization(text, "auth.json")


def _fake_api(answers: dict, calls: list):
    def call(args, stdin):
        path = args[args.index("--method") + 2]
        calls.append(path)
        for key, answer in answers.items():
            if path.startswith(key):
                return (0, json.dumps(answer), "") if answer is not None else (1, "", "HTTP 404: Not Found")
        return 1, "", "HTTP 500"
    return call


def test_command_looks_up_the_pull_request_comments_and_roles(tmp_path, monkeypatch, capsys):
    body = f"/gate run {HEAD[:7]}"
    event = tmp_path / "event.json"
    event.write_text(json.dumps(comment_event(body, MAINT)))
    calls = []
    monkeypatch.setattr(github, "CALL", _fake_api({
        "repos/o/r/pulls/7": pull(), "repos/o/r/issues/7/comments": [[comment(body, MAINT)]],
        f"repos/o/r/collaborators/{MAINT}/permission": {"permission": "write", "role_name": "write"}}, calls))
    out, auth = tmp_path / "out.txt", tmp_path / "auth.json"
    argv = ["ci-authorize", "--event", str(event), "--event-name", "issue_comment", "--repo", "o/r",
            "--github-output", str(out), "--out", str(auth)]
    assert main(argv) == 0
    assert "run=true" in out.read_text() and au.read_authorization(auth.read_text(), "a").sha == HEAD
    assert f"repos/o/r/collaborators/{MAINT}/permission" in calls
    # a login that is not a collaborator: 404, role none, no run
    monkeypatch.setattr(github, "CALL", _fake_api({
        "repos/o/r/pulls/7": pull(), "repos/o/r/issues/7/comments": [[comment(body, MAINT)]],
        f"repos/o/r/collaborators/{MAINT}/permission": None}, []))
    assert main(argv) == 0 and "run=false" in out.read_text().splitlines()[-6:]
    assert main([*argv[:-4], "--repo", "o/r; rm"]) == 2


def test_api_refuses_a_path_that_leaves_the_repository():
    for path in ("repos/o/r/../../user", "user/repos", "repos/o/r/pulls/1 --hostname evil"):
        with pytest.raises(BadInput, match="not a repository API path"):
            github.api(path)
