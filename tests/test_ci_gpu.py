"""``harness ci-gpu`` and ``ci-needs``: the GPU job's decision (tests, gate exit code, verdict counts, the
maintainer's acceptance) and its report, with the two subprocesses replaced by recorded outcomes."""

from __future__ import annotations

import json

import pytest

import harness.gate.ci as ci
from harness.cli.main import main
from harness.gate.ci import ACCEPT_LABEL, Acceptance, acceptance, decide, needs_code, truncate_bytes

NONE = Acceptance(False, "", "")
ACCEPTED = Acceptance(True, "vectorised path trades 4% at decode sizes for 20% at prefill", "maintainer")


def _event(labels=(), body="", action="synchronize", label=None, sender="alice"):
    ev = {"action": action, "sender": {"login": sender},
          "pull_request": {"labels": [{"name": n} for n in labels], "body": body}}
    if label:
        ev["label"] = {"name": label}
    return ev


def test_acceptance_needs_label_and_reason():
    body = f"Faster prefill.\n\n{ACCEPT_LABEL}: decode is 4% slower, prefill 20% faster\n"
    assert acceptance(_event([ACCEPT_LABEL], body)).accepted
    assert acceptance(_event([ACCEPT_LABEL], body)).reason == "decode is 4% slower, prefill 20% faster"
    assert not acceptance(_event([ACCEPT_LABEL], "no reason line")).accepted      # label alone
    assert not acceptance(_event(["other"], body)).accepted                       # reason alone (the author's)
    assert not acceptance(_event([ACCEPT_LABEL], f"{ACCEPT_LABEL}:   \n")).accepted  # an empty reason
    assert not acceptance({}).accepted                                            # nightly: no pull request
    by = acceptance(_event([ACCEPT_LABEL], body, action="labeled", label=ACCEPT_LABEL, sender="maint"))
    assert by.by == "maint"


@pytest.mark.parametrize("tests_rc,gate_rc,counts,acc,passed,accepted", [
    (0, 0, {"SAME": 3}, NONE, True, False),
    (None, None, {}, NONE, True, False),                      # nothing affected
    (1, 0, {"SAME": 3}, ACCEPTED, False, False),              # a failing test is never accepted
    (0, 1, {"SLOWER": 1}, NONE, False, False),
    (0, 1, {"SLOWER": 1}, ACCEPTED, True, True),
    (0, 1, {"SLOWER": 1}, Acceptance(True, "", ""), False, False),
    (0, 1, {"SLOWER": 1, "WRONG": 1}, ACCEPTED, False, False),  # a wrong result is never accepted
    (0, 1, {"ERROR": 1}, ACCEPTED, False, False),
    (0, 1, {}, ACCEPTED, False, False),                        # exit 1 without a verdict that explains it
    (0, 2, {}, ACCEPTED, False, False),                        # bad input
    (0, 137, {}, NONE, False, False),                          # killed
])
def test_decide(tests_rc, gate_rc, counts, acc, passed, accepted):
    got = decide(tests_rc, gate_rc, counts, acc)
    assert (got.passed, got.accepted) == (passed, accepted), got.why


def test_truncate_bytes_keeps_utf8_and_limit():
    text = "é" * 1000
    cut = truncate_bytes(text, 101, "\n(cut)\n")
    assert len(cut.encode()) <= 101 and cut.endswith("(cut)\n")
    assert truncate_bytes("short", 100, "x") == "short"


def _fake_run(tests_rc: int, gate_rc: int, counts: dict):
    def run(cmd, log, timeout):
        log.write_text("log\n")
        if "bench" in cmd:
            out = cmd[cmd.index("--out") + 1]
            from pathlib import Path
            Path(out).mkdir(parents=True, exist_ok=True)
            (Path(out) / "compare.json").write_text(json.dumps({"counts": counts}))
            (Path(out) / "compare.md").write_text("**Merge gate: 1 slower, 0 faster**\n")
            return gate_rc
        return tests_rc
    return run


@pytest.mark.parametrize("labels,rc,status", [((), 1, "FAILED"), ((ACCEPT_LABEL,), 0, "regression accepted")])
def test_command_slower(tmp_path, monkeypatch, labels, rc, status):
    monkeypatch.setattr(ci, "_run", _fake_run(0, 1, {"SLOWER": 1, "SAME": 2}))
    event = tmp_path / "event.json"
    event.write_text(json.dumps(_event(labels, f"{ACCEPT_LABEL}: known, see #12")))
    summary = tmp_path / "summary.md"
    argv = ["ci-gpu", "--against", "abc123", "--kernels", "rmsnorm,rope", "--out", str(tmp_path / "o"),
            "--runner", "sm90", "--event", str(event), "--step-summary", str(summary)]
    assert main(argv) == rc
    report = (tmp_path / "o" / "report.md").read_text()
    assert status in report and "Merge gate: 1 slower" in report and summary.read_text() == report
    doc = json.loads((tmp_path / "o" / "ci.json").read_text())
    assert doc["passed"] is (rc == 0) and doc["gate_exit"] == 1 and doc["counts"]["SLOWER"] == 1
    if labels:
        assert "known, see #12" in report


def test_command_nothing_affected(tmp_path, monkeypatch):
    monkeypatch.setattr(ci, "_run", lambda *a: pytest.fail("nothing should run"))
    assert main(["ci-gpu", "--against", "HEAD", "--kernels", "", "--out", str(tmp_path)]) == 0
    assert "not run" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("argv", [["--against=-x", "--kernels", "a"], ["--against", "H", "--kernels", "a;rm"]])
def test_command_bad_input(tmp_path, argv):
    assert main(["ci-gpu", *argv, "--out", str(tmp_path)]) == 2


def test_needs():
    assert needs_code({"plan": {"result": "success"}, "gpu": {"result": "skipped"}}) == 0
    assert needs_code({"plan": {"result": "success"}, "gpu": {"result": "failure"}}) == 1
    assert needs_code({"plan": {"result": "success"}, "gpu": {"result": "cancelled"}}) == 1


def test_needs_command(monkeypatch):
    monkeypatch.setenv("NEEDS", json.dumps({"gpu": {"result": "failure", "outputs": {}}}))
    assert main(["ci-needs"]) == 1
    monkeypatch.setenv("NEEDS", "not json")
    assert main(["ci-needs"]) == 2
