"""harness.gate.ci's ``ci-gpu`` steps and harness.gate.comment's ``ci-comment`` steps, each on its own; the
commands end to end are tests/test_ci_gpu.py and tests/test_ci_comment.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from harness.gate import ci
from harness.gate import comment as cm
from harness.gate.ci import ACCEPT_LABEL, Acceptance, CiRun, Outcome
from harness.steps import BadInput

ACCEPTED = Acceptance(True, "known, see #12", "maint")


def _run(tmp_path: Path, **kw) -> CiRun:
    return CiRun(**{"against": "abc123", "kernel_list": "rmsnorm, rope,", "out": tmp_path / "o", "runner": "sm90",
                    "python": "py", **kw})


def _recording(rc: int, calls: list, write=None):
    def run(cmd, log, timeout):
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


def test_read_acceptance_from_the_event_file(tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"labels": [{"name": ACCEPT_LABEL}],
                                                  "body": f"{ACCEPT_LABEL}: known"}}))
    assert ci.read_acceptance(_run(tmp_path, event=str(event))).acceptance == Acceptance(True, "known", "")
    assert not ci.read_acceptance(_run(tmp_path)).acceptance.labelled  # no event: a nightly run
    event.write_text("[]")
    with pytest.raises(BadInput, match="expected a JSON object"):
        ci.read_acceptance(_run(tmp_path, event=str(event)))
    with pytest.raises(BadInput, match="unreadable"):
        ci.read_acceptance(_run(tmp_path, event=str(tmp_path / "missing.json")))


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
    assert (run.gate_rc, run.counts, run.compare_md) == (1, {"SLOWER": 1, "SAME": 2}, "**Merge gate: 1 slower**\n")
    assert calls[0][0][3:6] == ["bench", "--against", "abc123"] and calls[0][1] == "gate.log"
    monkeypatch.setattr(ci, "_run", _recording(137, []))  # killed: it wrote nothing
    killed = ci.run_gate(_run(tmp_path / "2", kernels=("rope",)))
    assert (killed.gate_rc, killed.counts, killed.compare_md) == (137, {}, "")
    assert ci.run_gate(_run(tmp_path)).gate_rc is None  # no kernel: no gate


def test_decide_outcome_accepts_a_labelled_slower_case(tmp_path):
    run = _run(tmp_path, tests_rc=0, gate_rc=1, counts={"SLOWER": 1}, acceptance=ACCEPTED)
    assert ci.decide_outcome(run).outcome == Outcome(True, True, "1 slower, accepted: known, see #12")
    assert not ci.decide_outcome(replace(run, acceptance=Acceptance(False, "", ""))).outcome.passed


def test_write_report_writes_report_md_and_ci_json(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    run = _run(tmp_path, kernels=("rope",), tests_rc=0, gate_rc=1, counts={"SLOWER": 1}, acceptance=ACCEPTED,
               compare_md="compare table\n", outcome=Outcome(True, True, "1 slower, accepted: known, see #12"))
    run = ci.write_report(run)
    assert run.report == (out / "report.md").read_text()
    assert run.report.startswith("## GPU gate on `sm90`: passed, regression accepted")
    assert "(label added by @maint)" in run.report and run.report.endswith("compare table\n")
    doc = json.loads((out / "ci.json").read_text())
    assert doc["format"] == ci.CI_FORMAT and doc["kernels"] == ["rope"] and doc["accepted"] is True
    assert doc["acceptance"] == {"labelled": True, "reason": "known, see #12", "by": "maint", "accepted": True}


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


def test_parse_needs_refuses_what_is_not_a_job_table():
    assert ci.parse_needs('{"gpu": {"result": "success"}}', "NEEDS") == {"gpu": {"result": "success"}}
    for text, problem in (("not json", "is not JSON"), ("{}", "non-empty"), ("[1]", "non-empty")):
        with pytest.raises(BadInput, match=problem):
            ci.parse_needs(text, "NEEDS")


# ----------------------------------------------------------------------------- ci-comment

def test_read_reports_takes_files_and_artifact_folders_in_order(tmp_path):
    for name in ("gpu-report-sm90", "gpu-report-sm80"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.md").write_text(f"## {name}\n")
    (tmp_path / "one.md").write_text("## one\n")
    run = cm.read_reports(cm.CommentRun(paths=(str(tmp_path / "one.md"), str(tmp_path)), out=tmp_path / "c.md"))
    assert run.reports == ("## one\n", "## gpu-report-sm80\n", "## gpu-report-sm90\n")
    with pytest.raises(BadInput, match="no such report or folder"):
        cm.read_reports(cm.CommentRun(paths=(str(tmp_path / "missing"),), out=tmp_path / "c.md"))


def test_build_body_uses_the_limit_link_and_note(tmp_path):
    run = cm.CommentRun(paths=(), out=tmp_path / "c.md", link="https://x/runs/1", note="Kernels gated: rope",
                        reports=("## GPU gate on `sm90`: passed\n" + "row\n" * 2000,), limit=cm.MIN_LIMIT)
    body = cm.build_body(run).body
    assert body.startswith(cm.MARKER) and len(body) <= cm.MIN_LIMIT and "https://x/runs/1" in body
    assert "Kernels gated: rope" in body and "- GPU gate on `sm90`: passed" in body
    with pytest.raises(BadInput, match="--limit"):
        cm.build_body(replace(run, limit=10))


def test_write_body_writes_and_says_how_long(tmp_path, capsys):
    out = tmp_path / "pr-comment" / "comment.md"
    cm.write_body(cm.CommentRun(paths=(), out=out, body="x" * 1234))
    assert out.read_text() == "x" * 1234 and capsys.readouterr().out == f"wrote {out} (1,234 characters)\n"
