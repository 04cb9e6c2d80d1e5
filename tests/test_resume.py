"""A benchmark killed halfway (SIGKILL) leaves a renderable partial report, and --resume completes it
without redoing the cases that had finished."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.results.io import append_case
from tests.e2e import REPO, case, write_spec

BENCH = "".join(f"\n[[cases.bench]]\nrows = {r}\ncols = 512\n" for r in (64, 128, 256, 512, 1024, 2048))


def _bench(specs: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "harness", "bench", "--specs-dir", str(specs), "--out", str(out),
            "--dtype", "fp32", "--provider", "reference", "--timeout", "1", "--min-time", "0.05", "--tier", "bench",
            *extra]


def test_killed_bench_renders_partially_and_resumes(tmp_path):
    specs, out = tmp_path / "specs", tmp_path / "out"
    specs.mkdir()
    write_spec(specs, "scale", "tests.planted.broken_kernels:scale", extra=BENCH)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(_bench(specs, out), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    journal = out / "cases.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and len(journal.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = [json.loads(line)["case"] for line in journal.read_text().splitlines() if line.strip()]
    assert 2 <= len(finished) < 6
    assert not (out / "results.json").exists()

    partial = tmp_path / "partial"
    report = subprocess.run([sys.executable, "-m", "harness", "report", str(journal), "--out", str(partial)],
                            cwd=REPO, env=env, capture_output=True, text=True)
    assert report.returncode == 0, report.stderr
    text = (partial / "report.md").read_text()
    assert "scale" in text and "rows=64" in text

    done = subprocess.run(_bench(specs, out, "--resume"), cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())
    assert results["complete"] is True and len(results["cases"]) == 6
    by_id = {c["case_id"]: c for c in results["cases"]}
    for done_case in finished:  # resumed, not re-measured: the very same raw samples
        assert by_id[done_case["case_id"]]["samples_us"] == done_case["samples_us"]
    assert not journal.exists()


def test_a_partial_report_compares_the_providers_that_finished(tmp_path):
    """The journal holds no speedups (the run attaches them at its end): the partial report works them out."""
    journal = tmp_path / "run" / "cases.jsonl"
    for c in (case(median=100.0), case(provider="torch", role="peer", median=150.0, seed=1)):
        append_case(journal, dataclasses.replace(c, headline=True))
    proc = subprocess.run([sys.executable, "-m", "harness", "report", str(journal), "--out", str(tmp_path / "r")],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "r" / "report.md").read_text()
    ratios = re.findall(r"\| ([0-9.]+)x\s\[", text)  # the summary's "vs torch" cell: 150 us over 100 us
    assert "vs torch" in text and ratios and all(abs(float(r) - 1.5) < 0.01 for r in ratios), text
