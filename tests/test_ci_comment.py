"""``harness ci-comment``: the sticky comment's body from runners' report.md files, within GitHub's limit."""

from __future__ import annotations

import pytest

from harness.cli.main import main
from harness.gate.comment import COMMENT_LIMIT, MARKER, MIN_LIMIT, comment_body
from harness.steps import BadInput

LINK = "https://github.example/o/r/actions/runs/1"


def _report(arch: str, size: int) -> str:
    return f"## GPU gate on `{arch}`: FAILED\n\n- decision: 1 slower\n\n" + "| row |\n" * (size // 8)


def test_short_body_is_whole():
    body = comment_body([_report("sm90", 100), _report("sm80", 100)], link=LINK, note="Kernels gated: rope")
    assert body.startswith(MARKER + "\n")
    assert "- GPU gate on `sm90`: FAILED" in body and "- GPU gate on `sm80`: FAILED" in body
    assert "Kernels gated: rope" in body and "cut to fit" not in body


@pytest.mark.parametrize("n,size", [(1, 200_000), (2, 70_000), (3, 40_000), (8, 1_000_000)])
def test_long_reports_are_cut_to_the_limit_with_a_link(n, size):
    reports = [_report(f"sm{80 + i}", size) for i in range(n)]
    body = comment_body(reports, link=LINK)
    assert len(body) <= COMMENT_LIMIT
    assert body.startswith(MARKER)
    assert body.count("cut to fit one comment") == n and LINK in body
    for i in range(n):  # every runner's status line survives
        assert f"- GPU gate on `sm{80 + i}`: FAILED" in body


def test_exactly_at_the_limit_is_not_cut():
    body = comment_body([_report("sm90", 5_000)])
    assert comment_body([_report("sm90", 5_000)], limit=len(body)) == body
    assert "cut to fit" in comment_body([_report("sm90", 100_000)], limit=len(body) + 10)


def test_no_report_says_so():
    body = comment_body([], note="Kernels gated: none (documentation only)")
    assert body.startswith(MARKER) and "No GPU report" in body and "documentation only" in body


def test_tiny_limit_is_bad_input():
    with pytest.raises(BadInput):
        comment_body([_report("sm90", 10)], limit=100)


def test_command_reads_downloaded_artifact_folders(tmp_path, capsys):
    for arch in ("sm80", "sm90"):
        (tmp_path / "reports" / f"gpu-report-{arch}").mkdir(parents=True)
        (tmp_path / "reports" / f"gpu-report-{arch}" / "report.md").write_text(_report(arch, 50_000))
    out = tmp_path / "pr-comment" / "comment.md"
    assert main(["ci-comment", str(tmp_path / "reports"), "--out", str(out), "--link", LINK]) == 0
    body = out.read_text()
    assert body.startswith(MARKER) and len(body) <= COMMENT_LIMIT and body.index("sm80") < body.index("sm90")
    assert main(["ci-comment", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "missing" in capsys.readouterr().err


def test_smallest_limit_with_many_reports_still_fits():
    reports = [_report(f"sm{80 + i}", 10_000) for i in range(12)]
    body = comment_body(reports, limit=MIN_LIMIT, link=LINK + "/" + "x" * 300)
    assert len(body) <= MIN_LIMIT and body.startswith(MARKER)
