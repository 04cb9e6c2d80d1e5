"""A benchmark killed halfway (SIGKILL) leaves a renderable partial report, and --resume completes it
without redoing the cases that had finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e import REPO, write_spec

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
    for case in finished:  # resumed, not re-measured: the very same raw samples
        assert by_id[case["case_id"]]["samples_us"] == case["samples_us"]
    assert not journal.exists()
