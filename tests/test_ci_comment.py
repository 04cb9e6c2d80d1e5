"""The gate job's side: the runners' ci.json as validated data (harness.gate.status), the status decided
again with a fresh authorization, the comment rendered from a fixed template (harness.gate.comment), and
``ci-gate`` / ``ci-post`` end to end with the API faked."""

from __future__ import annotations

import base64
import json
from dataclasses import replace

import pytest

from harness.cli.main import main
from harness.gate import comment as cm
from harness.gate import github
from harness.gate import status as st
from harness.gate.authorize import Acceptance, Decision, authorization_doc
from harness.gate.ci import CI_FORMAT
from harness.steps import BadInput

HEAD = "a" * 40
AUTH = Decision(True, True, 7, HEAD, "b" * 40, "pushed by maint (write)", "maint")
NEEDS = {"authorize": {"result": "success"}, "plan": {"result": "success"}, "gpu": {"result": "success"}}
LINK = "https://github.com/o/r/actions/runs/12"


def ci_json(**kw) -> dict:
    return {"format": CI_FORMAT, "runner": "self-hosted,linux,gpu,sm90", "kernels": ["rope"], "against": "b" * 40,
            "sha": HEAD, "tests_exit": 0, "gate_exit": 0, "counts": {"SAME": 3}, "cases": [], "tampered": [],
            "passed": True, "accepted": False, "why": "no kernel regressed", **kw}


def write(tmp_path, name, doc) -> object:
    (tmp_path / name).mkdir(parents=True, exist_ok=True)
    path = tmp_path / name / "ci.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_a_passing_report_passes_and_the_runner_s_own_verdict_is_never_believed(tmp_path):
    ok = write(tmp_path, "gpu-report-0", ci_json())
    assert st.verdict(AUTH, AUTH, NEEDS, True, [ok]).state == "success"
    # a SLOWER case that ci.json claims was accepted: the gate decides again, with the fresh authorization
    claimed = write(tmp_path, "gpu-report-1", ci_json(gate_exit=1, counts={"SLOWER": 1}, passed=True, accepted=True))
    assert st.verdict(AUTH, AUTH, NEEDS, True, [claimed]).state == "failure"
    accepted = replace(AUTH, accepts=(Acceptance("regression", "tri", "known"),))
    assert st.verdict(AUTH, accepted, NEEDS, True, [claimed]).state == "success"


@pytest.mark.parametrize("change,problem", [
    ({"sha": "c" * 40}, "not the authorized"),
    ({"format": "kernel-harness-ci/1"}, "format"),
    ({"runner": "@octocat [x](https://evil)"}, "runner"),
    ({"counts": {"SAME": "3"}}, "counts"),
    ({"counts": {"PASSED": 1}}, "counts"),
    ({"cases": [{"kernel": "rope", "dtype": "bf16", "case_id": "<img src=x>", "verdict": "SLOWER"}]}, "case_id"),
    ({"tests_exit": True}, "tests_exit"),
])
def test_a_malformed_or_foreign_report_fails_the_gate(tmp_path, change, problem):
    path = write(tmp_path, "gpu-report-0", ci_json(**change))
    v = st.verdict(AUTH, AUTH, NEEDS, True, [path])
    assert v.state == "failure" and problem in v.problems[0]


def test_an_oversized_report_is_not_read(tmp_path, monkeypatch):
    path = write(tmp_path, "gpu-report-0", ci_json(why="x" * (st.REPORT_LIMIT + 10)))
    monkeypatch.setattr("builtins.open", lambda *a, **k: pytest.fail("an oversized file must not be opened"))
    with pytest.raises(BadInput, match="not read"):
        st.read_report(path)


@pytest.mark.parametrize("fresh,needs,plan_run,state", [
    (replace(AUTH, run=False, why="label removed"), NEEDS, True, "pending"),       # withdrawn during the run
    (replace(AUTH, sha="c" * 40), NEEDS, True, "pending"),                          # head moved
    (AUTH, {**NEEDS, "gpu": {"result": "failure"}}, True, "failure"),
    (AUTH, {**NEEDS, "gpu": {"result": "cancelled"}}, True, "pending"),
    (AUTH, {**NEEDS, "gpu": {"result": "skipped"}}, True, "failure"),               # planned, never ran
    (AUTH, {**NEEDS, "gpu": {"result": "skipped"}}, False, "success"),              # nothing affected
    (AUTH, {**NEEDS, "plan": {"result": "failure"}}, True, "error"),
])
def test_the_status_follows_the_jobs_and_the_fresh_authorization(tmp_path, fresh, needs, plan_run, state):
    path = write(tmp_path, "gpu-report-0", ci_json())
    assert st.verdict(AUTH, fresh, needs, plan_run, [path]).state == state
    assert st.verdict(replace(AUTH, run=False, why="waiting"), AUTH, NEEDS, True, []).state == "pending"


def test_no_report_back_fails(tmp_path):
    assert st.verdict(AUTH, AUTH, NEEDS, True, []).state == "failure"


@pytest.mark.parametrize("hostile", ["@octocat please", "see https://evil.example/x", "[click](javascript:x)",
                                     "![img](https://evil/x.png)", "<script>x</script>", "a|b`c`\nd",
                                     "\u202eevil\u200b"])
def test_untrusted_text_is_inline_code_only(hostile):
    shown = cm.code(hostile)
    assert shown.startswith("`") and shown.endswith("`") and shown.count("`") == 2
    assert "\n" not in shown and "\u202e" not in shown and "|" not in shown.replace("\\|", "")


def test_render_is_the_fixed_template_with_every_value_as_code(tmp_path):
    case = {"kernel": "rope", "dtype": "bf16", "case_id": "tokens=1", "verdict": "SLOWER", "ratio": 1.2,
            "ratio_lo": 1.1, "ratio_hi": 1.3}
    path = write(tmp_path, "gpu-report-0", ci_json(gate_exit=1, counts={"SLOWER": 1}, cases=[case],
                                                   why="@octocat was here https://evil"))
    auth = replace(AUTH, accepts=(Acceptance("regression", "tri", "cc @everyone https://evil"),))
    body = cm.render(st.verdict(AUTH, auth, NEEDS, True, [path]), auth, link=LINK, note="Kernels gated: @rope")
    assert body.startswith(cm.MARKER + "\n# Kernel merge gate: passed")
    assert "`cc @everyone https://evil`" in body and "`Kernels gated: @rope`" in body
    assert "| `rope` | `bf16` | `tokens=1` | SLOWER | 1.200 | 1.100-1.300 |" in body
    for line in body.splitlines():  # outside code spans: no mention and no link but the run's own
        bare = "".join(part for i, part in enumerate(line.split("`")) if i % 2 == 0)
        assert "@" not in bare and ("http" not in bare or LINK in bare), line
    with pytest.raises(BadInput, match="not a workflow run's URL"):
        cm.render(st.verdict(AUTH, AUTH, NEEDS, True, [path]), AUTH, link="https://evil/x")


def test_render_fits_the_limit_by_cutting_case_rows(tmp_path):
    cases = [{"kernel": "k" * 90, "dtype": "bf16", "case_id": "c" * 190, "verdict": "SLOWER", "ratio": 1.5,
              "ratio_lo": 1.4, "ratio_hi": 1.6}] * 50
    paths = [write(tmp_path, f"gpu-report-{i}", ci_json(runner=f"sm{i}", gate_exit=1, counts={"SLOWER": 50},
                                                        cases=cases)) for i in range(8)]
    v = st.verdict(AUTH, AUTH, NEEDS, True, paths)
    body = cm.render(v, AUTH, link=LINK, limit=20_000)
    assert len(body.encode()) <= 20_000 and "cases cut to fit" in body and body.count("| `sm") >= 8


def test_find_sticky_matches_the_bot_s_own_login_only():
    forged = {"id": 1, "user": {"login": "mallory", "type": "User"}, "body": cm.MARKER + "\n# passed"}
    other_bot = {"id": 2, "user": {"login": "evil-app[bot]", "type": "Bot"}, "body": cm.MARKER}
    ours = {"id": 3, "user": {"login": cm.BOT_LOGIN, "type": "Bot"}, "body": cm.MARKER + "\n# FAILED"}
    assert cm.find_sticky([forged, other_bot, ours])["id"] == 3
    assert cm.find_sticky([forged, other_bot]) is None
    with pytest.raises(BadInput):
        cm.check_body("# no marker")


def _api(calls: list, comments: list):
    def call(args, stdin):
        method, path = args[args.index("--method") + 1], args[args.index("--method") + 2]
        calls.append((method, path, json.loads(stdin) if stdin else None))
        if method == "GET":
            return 0, json.dumps([comments]), ""
        return 0, json.dumps({"html_url": "https://github.com/o/r/pull/7#c"}), ""
    return call


def test_ci_gate_then_ci_post_end_to_end(tmp_path, monkeypatch):
    write(tmp_path / "reports", "gpu-report-0", ci_json())
    auth = tmp_path / "auth.json"
    auth.write_text(json.dumps(authorization_doc(AUTH)))
    out = tmp_path / "out.txt"
    monkeypatch.setenv("NEEDS", json.dumps(NEEDS))
    assert main(["ci-gate", str(tmp_path / "reports"), "--authorization", str(auth), "--fresh", str(auth),
                 "--plan-run", "true", "--link", LINK, "--github-output", str(out)]) == 0
    got = dict(line.split("=", 1) for line in out.read_text().splitlines())
    assert got["state"] == "success"
    monkeypatch.setenv("COMMENT", got["comment"])
    forged = {"id": 5, "user": {"login": "mallory"}, "body": cm.MARKER + " forged"}
    ours = {"id": 9, "user": {"login": cm.BOT_LOGIN}, "body": cm.MARKER + " old"}
    calls = []
    monkeypatch.setattr(github, "CALL", _api(calls, [forged, ours]))
    assert main(["ci-post", "--repo", "o/r", "--pr", "7", "--sha", HEAD, "--state", got["state"],
                 "--description", got["description"], "--target-url", LINK, "--comment-env", "COMMENT"]) == 0
    (m1, status_path, status), (_, _, _), (m3, edit_path, edit) = calls
    assert (m1, status_path, status["context"], status["state"]) == ("POST", f"repos/o/r/statuses/{HEAD}",
                                                                     st.CONTEXT, "success")
    assert (m3, edit_path) == ("PATCH", "repos/o/r/issues/comments/9")  # ours edited, the forged one untouched
    assert edit["body"] == base64.b64decode(got["comment"]).decode()
    advisory = tmp_path / "adv.txt"
    monkeypatch.setenv("NEEDS", json.dumps({**NEEDS, "gpu": {"result": "failure"}}))
    assert main(["ci-gate", "--authorization", str(auth), "--fresh", str(auth), "--plan-run", "true",
                 "--policy", "advisory", "--github-output", str(advisory)]) == 0
    assert "state=success" in advisory.read_text() and "description=advisory: " in advisory.read_text()


@pytest.mark.parametrize("argv", [["--sha", "abc", "--state", "success"], ["--sha", HEAD, "--state", "green"]])
def test_ci_post_refuses_what_is_not_a_status(argv, monkeypatch):
    monkeypatch.setattr(github, "CALL", lambda *a: pytest.fail("nothing may be posted"))
    assert main(["ci-post", "--repo", "o/r", "--pr", "7", *argv]) == 2
