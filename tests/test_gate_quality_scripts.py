"""The gate's calibration scripts run end to end (on a CPU: --smoke, the reference provider, the host timer), so
one that stops setting up a kernel, or writes a calibration the gate cannot read, is caught before a GPU run.

bench/gate_quality.py (device time) over matmul, whose launcher module reads its .cu beside it: the A side's
copy of kernels/ must hold every file. bench/gate_host_quality.py (host time per call) over silu_and_mul: its
calibration entry is one harness.gate.calibration.host_threshold takes, and 20 us of host work planted in a
launcher of about 25 us per call is SLOWER.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from harness.gate.calibration import host_threshold
from tests.e2e import REPO


def _run(script: str, spec: str, out, tmp_path, *extra: str) -> subprocess.CompletedProcess:
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(REPO / "specs" / f"{spec}.toml", specs)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, str(REPO / "bench" / script), "--smoke", "--out", str(out),
                           "--specs-dir", str(specs), *extra], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_gate_quality_sets_up_a_kernel_that_reads_its_cuda_source(tmp_path):
    out = tmp_path / "gq"
    done = _run("gate_quality.py", "matmul", out, tmp_path, "--aa-reps", "2", "--planted-reps", "1",
                "--time-limit", "60")
    doc = json.loads((out / "gate_quality.json").read_text())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert doc["notes"] == [] and doc["errors"] == []
    assert doc["n_cases"] >= 2 and doc["aa"]["rates"]["n"] == 2 * doc["n_cases"]


@pytest.mark.slow
def test_gate_host_quality_calibrates_and_catches_added_host_work(tmp_path):
    out = tmp_path / "ghq"
    done = _run("gate_host_quality.py", "silu_and_mul", out, tmp_path, "--aa-reps", "3", "--planted-reps", "2",
                "--planted-cases", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((out / "host_quality.json").read_text())
    assert doc["errors"] == [] and doc["aa"]["rates"]["n"] == 3 * doc["n_cases"] >= 6
    rule = host_threshold(out / "calibration.json")  # the gate reads what the script wrote
    assert rule.source.startswith("calibrated host-time A/A") and rule.relative >= 0.10 and rule.floor_us >= 2.0
    planted = {(p["kind"], p["nominal"]): p for p in doc["planted"]}
    assert set(planted) == {("share", 0.10), ("share", 0.25), ("added", 5.0), ("added", 20.0)}
    twenty = planted[("added", 20.0)]
    assert twenty["host_us"] < 100.0 and twenty["SLOWER"] == twenty["reps"] == 2, twenty
    assert "| 20 us | silu_and_mul" in (out / "host_quality.md").read_text()
