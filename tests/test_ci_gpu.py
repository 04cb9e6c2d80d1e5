"""``harness ci-gpu``: the GPU job's decision (tests, gate exit code, verdict counts, the maintainer's
acceptance from the trusted authorization) and its report, with the two subprocesses replaced by recorded
outcomes."""

from __future__ import annotations

import json

import pytest

import harness.gate.ci as ci
from harness.cli.main import main
from harness.gate.authorize import Acceptance, Decision, authorization_doc
from harness.gate.ci import decide, truncate_bytes

NONE = None
ACCEPTED = Acceptance("regression", "maintainer", "vectorised path trades 4% at decode sizes for 20% at prefill")
HEAD = "a" * 40


def _authorization(tmp_path, accepts=()) -> str:
    d = Decision(True, True, 7, HEAD, "b" * 40, "pushed by maintainer (write)", "maintainer", tuple(accepts))
    path = tmp_path / "authorization.json"
    path.write_text(json.dumps(authorization_doc(d)))
    return str(path)


@pytest.mark.parametrize("tests_rc,gate_rc,counts,acc,passed,accepted", [
    (0, 0, {"SAME": 3}, NONE, True, False),
    (None, None, {}, NONE, True, False),                      # nothing affected
    (1, 0, {"SAME": 3}, ACCEPTED, False, False),              # a failing test is never accepted
    (0, 1, {"SLOWER": 1}, NONE, False, False),
    (0, 1, {"SLOWER": 1}, ACCEPTED, True, True),
    (0, 1, {"SLOWER": 1, "WRONG": 1}, ACCEPTED, False, False),  # a wrong result is never accepted
    (0, 1, {"ERROR": 1}, ACCEPTED, False, False),
    (0, 1, {}, ACCEPTED, False, False),                        # exit 1 without a verdict that explains it
    (0, 2, {}, ACCEPTED, False, False),                        # bad input
    (0, 137, {}, NONE, False, False),                          # killed
])
def test_decide(tests_rc, gate_rc, counts, acc, passed, accepted):
    got = decide(tests_rc, gate_rc, counts, acc)
    assert (got.passed, got.accepted) == (passed, accepted), got.why


def test_decide_fails_when_the_harness_changed_on_disk_whatever_the_verdicts():
    got = decide(0, 0, {"SAME": 3}, ACCEPTED, tampered=("gate/verdict.py",))
    assert not got.passed and "gate/verdict.py" in got.why


def test_truncate_bytes_keeps_utf8_and_limit():
    text = "é" * 1000
    cut = truncate_bytes(text, 101, "\n(cut)\n")
    assert len(cut.encode()) <= 101 and cut.endswith("(cut)\n")
    assert truncate_bytes("short", 100, "x") == "short"


def _fake_run(tests_rc: int, gate_rc: int, counts: dict):
    def run(cmd, log, timeout, cwd=None):
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


@pytest.mark.parametrize("accepts,rc,status", [((), 1, "FAILED"), ((ACCEPTED,), 0, "regression accepted")])
def test_command_slower(tmp_path, monkeypatch, accepts, rc, status):
    monkeypatch.setattr(ci, "_run", _fake_run(0, 1, {"SLOWER": 1, "SAME": 2}))
    summary = tmp_path / "summary.md"
    argv = ["ci-gpu", "--against", "abc123", "--kernels", "rmsnorm,rope", "--out", str(tmp_path / "o"),
            "--runner", "sm90", "--authorization", _authorization(tmp_path, accepts),
            "--step-summary", str(summary)]
    assert main(argv) == rc
    report = (tmp_path / "o" / "report.md").read_text()
    assert status in report and "Merge gate: 1 slower" in report and summary.read_text() == report
    doc = json.loads((tmp_path / "o" / "ci.json").read_text())
    assert doc["passed"] is (rc == 0) and doc["gate_exit"] == 1 and doc["counts"]["SLOWER"] == 1
    assert doc["sha"] == HEAD
    if accepts:
        assert "accepted by maintainer" in report and "vectorised path" in report


def test_command_refuses_an_authorization_that_does_not_authorize(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(json.dumps(authorization_doc(Decision(True, False, 7, HEAD, "b" * 40, "waiting"))))
    assert main(["ci-gpu", "--against", "H", "--kernels", "a", "--out", str(tmp_path), "--authorization",
                 str(path)]) == 2


def test_command_nothing_affected(tmp_path, monkeypatch):
    monkeypatch.setattr(ci, "_run", lambda *a: pytest.fail("nothing should run"))
    assert main(["ci-gpu", "--against", "HEAD", "--kernels", "", "--out", str(tmp_path)]) == 0
    assert "not run" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize("argv", [["--against=-x", "--kernels", "a"], ["--against", "H", "--kernels", "a;rm"]])
def test_command_bad_input(tmp_path, argv):
    assert main(["ci-gpu", *argv, "--out", str(tmp_path)]) == 2
