"""harness.gate.ci's ``ci-gpu`` steps, each on its own; the command end to end is tests/test_ci_gpu.py, the
gate job's side (status, comment) tests/test_ci_comment.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from harness.gate import ci
from harness.gate.authorize import Acceptance, Decision, authorization_doc
from harness.gate.ci import CiRun, Outcome
from harness.steps import BadInput

HEAD = "a" * 40
ACCEPTED = Acceptance("regression", "maint", "known, see #12")
AUTH = Decision(True, True, 7, HEAD, "b" * 40, "pushed by maint (write)", "maint", (ACCEPTED,))


def _run(tmp_path: Path, **kw) -> CiRun:
    return CiRun(**{"against": "abc123", "kernel_list": "rmsnorm, rope,", "out": tmp_path / "o", "runner": "sm90",
                    "python": "py", **kw})


def _recording(rc: int, calls: list, write=None):
    def run(cmd, log, timeout, cwd=None):
        calls.append((cmd, log.name, timeout))
        if write:
            write(Path(cmd[cmd.index("--out") + 1]))
        return rc
    return run


def test_check_inputs_lists_the_kernels_and_refuses_what_a_command_line_would_misread(tmp_path):
    assert ci.check_inputs(_run(tmp_path)).kernels == ("rmsnorm", "rope")
    assert ci.check_inputs(_run(tmp_path, kernel_list="")).kernels == ()
    with pytest.raises(BadInput, match="not a git revision"):
        ci.check_inputs(_run(tmp_path, against="--upload-pack=x"))
    with pytest.raises(BadInput, match="not a kernel name: 'a;rm'"):
        ci.check_inputs(_run(tmp_path, kernel_list="rope,a;rm"))


def test_read_auth_reads_the_trusted_decision_before_anything_runs(tmp_path):
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(authorization_doc(AUTH)))
    assert ci.read_auth(_run(tmp_path, authorization=str(path))).auth == AUTH
    assert ci.read_auth(_run(tmp_path)).auth is None  # a nightly run: nothing accepted
    path.write_text(json.dumps(authorization_doc(replace(AUTH, run=False))))
    with pytest.raises(BadInput, match="does not authorize a run"):
        ci.read_auth(_run(tmp_path, authorization=str(path)))
    with pytest.raises(BadInput, match="unreadable"):
        ci.read_auth(_run(tmp_path, authorization=str(tmp_path / "missing.json")))


def test_a_child_that_rewrites_the_harness_fails_the_job(tmp_path, monkeypatch):
    root = tmp_path / "harness"
    (root / "gate").mkdir(parents=True)
    (root / "gate" / "verdict.py").write_text("SLOWER = 'SLOWER'\n")

    def child(cmd, log, timeout, cwd=None):  # the pull request's code, run by pytest, edits the harness on disk
        (root / "gate" / "verdict.py").write_text("SLOWER = 'SAME'\n")
        return 0

    monkeypatch.setattr(ci, "_run", child)
    run = ci.snapshot(_run(tmp_path, kernels=("rope",), harness_root=root))
    run = ci.run_tests(run)
    assert run.tampered == ("gate/verdict.py",)
    assert ci.run_gate(run).gate_rc is None  # nothing more runs over a changed harness
    assert not ci.decide_outcome(run).outcome.passed
    clean = ci.run_tests(ci.snapshot(_run(tmp_path, kernels=("rope",), harness_root=root)))
    assert clean.tampered == ()


def test_make_out_creates_the_folder(tmp_path):
    ci.make_out(_run(tmp_path, out=tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b").is_dir()


def test_run_tests_runs_the_full_tier_of_the_kernels_only(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ci, "_run", _recording(3, calls))
    run = _run(tmp_path, kernels=("rmsnorm", "rope"), tier="ci", tests_timeout=5.0)
    assert ci.run_tests(run).tests_rc == 3
    ((cmd, log, timeout),) = calls
    assert cmd[:4] == ["py", "-m", "pytest", "specs"] and cmd[cmd.index("--kernel") + 1] == "rmsnorm,rope"
    assert cmd[cmd.index("--tier") + 1] == "ci" and (log, timeout) == ("tests.log", 5.0)
    assert ci.run_tests(replace(run, kernels=())).tests_rc is None and len(calls) == 1


def test_run_gate_reads_the_verdict_counts_and_compare_md(tmp_path, monkeypatch):
    def write(gate: Path):
        gate.mkdir(parents=True)
        (gate / "compare.json").write_text(json.dumps({"counts": {"SLOWER": 1, "SAME": "2"}}))
        (gate / "compare.md").write_text("**Merge gate: 1 slower**\n")

    calls = []
    monkeypatch.setattr(ci, "_run", _recording(1, calls, write))
    run = ci.run_gate(_run(tmp_path, kernels=("rope",)))
    assert (run.gate_rc, ci.counts(run.compare), run.compare_md) == (1, {"SLOWER": 1, "SAME": 2},
                                                                     "**Merge gate: 1 slower**\n")
    assert calls[0][0][3:6] == ["bench", "--against", "abc123"] and calls[0][1] == "gate.log"
    assert "--candidate" not in calls[0][0]  # a nightly run: the working tree is the PR side
    monkeypatch.setattr(ci, "_run", _recording(137, []))  # killed: it wrote nothing
    killed = ci.run_gate(_run(tmp_path / "2", kernels=("rope",)))
    assert (killed.gate_rc, killed.compare, killed.compare_md) == (137, {}, "")
    assert ci.run_gate(_run(tmp_path)).gate_rc is None  # no kernel: no gate


def test_run_gate_judges_the_candidate_with_the_base_s_policy_unless_accepted(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ci, "_run", _recording(0, calls))
    ci.run_gate(_run(tmp_path, kernels=("rope",), candidate=HEAD, auth=replace(AUTH, accepts=())))
    ci.run_gate(_run(tmp_path, kernels=("rope",), candidate=HEAD,
                     auth=replace(AUTH, accepts=(Acceptance("policy", "maint", "looser on purpose"),))))
    (first, _, _), (second, _, _) = calls
    assert first[first.index("--candidate") + 1] == HEAD and "--accept-policy" not in first
    assert second[second.index("--accept-policy") + 1] == HEAD


def test_decide_outcome_accepts_a_slower_case_only_with_the_authorization_s_acceptance(tmp_path):
    slower = {"counts": {"SLOWER": 1}}
    run = _run(tmp_path, tests_rc=0, gate_rc=1, compare=slower, auth=AUTH)
    assert ci.decide_outcome(run).outcome == Outcome(True, True, "1 slower, accepted by maint: known, see #12")
    assert not ci.decide_outcome(replace(run, auth=replace(AUTH, accepts=()))).outcome.passed


def test_write_report_writes_report_md_and_ci_json(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    compare = {"counts": {"SLOWER": 1, "SAME": 1}, "comparison": {"cases": [
        {"kernel": "rope", "dtype": "bf16", "case_id": "t=1", "verdict": "SLOWER", "ratio": 1.2, "ratio_lo": 1.1,
         "ratio_hi": 1.3, "base_median_us": 3.0},
        {"kernel": "rope", "dtype": "bf16", "case_id": "t=2", "verdict": "SAME", "ratio": 1.0}]}}
    run = _run(tmp_path, kernels=("rope",), tests_rc=0, gate_rc=1, compare=compare, auth=AUTH,
               compare_md="compare table\n", outcome=Outcome(True, True, "1 slower, accepted by maint: known"))
    run = ci.write_report(run)
    assert run.report == (out / "report.md").read_text()
    assert run.report.startswith("## GPU gate on `sm90`: passed, regression accepted")
    assert f"regression accepted by maint for {HEAD[:12]}" in run.report and run.report.endswith("compare table\n")
    doc = json.loads((out / "ci.json").read_text())
    assert doc["format"] == ci.CI_FORMAT and doc["kernels"] == ["rope"] and doc["accepted"] is True
    assert doc["sha"] == HEAD and [c["case_id"] for c in doc["cases"]] == ["t=1"]  # SAME cases are not listed
    assert set(doc["cases"][0]) == {"kernel", "dtype", "case_id", "verdict", "ratio", "ratio_lo", "ratio_hi"}


def test_write_step_summary_appends_within_github_s_limit(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    ci.write_step_summary(_run(tmp_path, step_summary=str(summary), report="é" * ci.STEP_SUMMARY_LIMIT))
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "cut at 1 MiB" in text
    assert len(text.encode()) <= len("earlier step\n") + ci.STEP_SUMMARY_LIMIT
    ci.write_step_summary(_run(tmp_path, report="x"))  # no --step-summary: nothing to append to


def test_print_decision(tmp_path, capsys):
    ci.print_decision(_run(tmp_path, outcome=Outcome(False, False, "1 slower")))
    assert capsys.readouterr().out == "ci-gpu: FAILED: 1 slower\n"
