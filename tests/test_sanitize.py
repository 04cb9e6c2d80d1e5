"""``python -m harness sanitize``: the plumbing on CPU (a stand-in sanitizer), the findings on a GPU.

On a GPU with compute-sanitizer the planted kernels prove the tools see what the generated tests cannot:
a one-element overread whose output is right (memcheck) and a missing ``__syncthreads()`` (racecheck).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from harness.cli import sanitize as cli_sanitize
from harness.cli.main import main
from tests.e2e import REPO, alive, write_spec

GOOD = "tests.planted.broken_kernels:scale"
PLANTED = "tests.planted.sanitizer_kernels:"
# Under the stand-in sanitizer what is tested is the command around pytest; the compile items would each add a
# cold torch.compile on the CPU (seconds apiece) and test nothing of it.
NO_COMPILE = ("--", "-k", "not compile")


def sanitize(tmp_path, *args, env=None, timeout=300):
    cmd = [sys.executable, "-m", "harness", "sanitize", "--specs-dir", "specs", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)


def verdicts(stdout: str) -> dict[tuple[str, str], str]:
    """(kernel, tool) -> status, from the per-kernel summary lines."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[1] in cli_sanitize.TOOLS:
            out[parts[0], parts[1]] = parts[2]
    return out


# --------------------------------------------------------------------- CPU: a stand-in sanitizer

@pytest.fixture
def fake(tmp_path):
    """A directory of specs (the good scale kernel) and a fake compute-sanitizer first on PATH."""
    (tmp_path / "specs").mkdir()
    write_spec(tmp_path / "specs", "scale", GOOD)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "compute-sanitizer"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{REPO}/tests/planted/fake_sanitizer.py" "$@"\n')
    exe.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.slow
def test_clean_run_runs_the_tests_with_the_caching_allocator_off(tmp_path, fake):
    run = sanitize(tmp_path, "--dtype", "fp32", "--log-dir", "logs", *NO_COMPILE, env=fake)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert verdicts(run.stdout) == {("scale", "memcheck"): "clean"}
    assert " passed" in run.stdout and "failed" not in run.stdout
    log = (tmp_path / "logs" / "scale.memcheck.log").read_text()
    # Without this memcheck sees 2 MiB allocator segments, not tensors, and misses small overreads.
    assert "tool=memcheck caching=1" in log
    assert " passed" in log  # pytest's own output, kept whole


@pytest.mark.parametrize("tool, mode, finding", [("memcheck", "errors", "Invalid __global__ read"),
                                                 ("racecheck", "hazards", "Error: Race reported between Write")])
@pytest.mark.slow
def test_findings_fail_the_run_and_are_printed(tmp_path, fake, tool, mode, finding):
    run = sanitize(tmp_path, "--dtype", "fp32", "--tool", tool, *NO_COMPILE, env={**fake, "FAKE_SANITIZER": mode})
    assert run.returncode == 1, run.stdout + run.stderr[-2000:]
    assert verdicts(run.stdout) == {("scale", tool): "ERRORS"}
    assert "sanitizer errors: 1;" in run.stdout and f"    ========= {finding}" in run.stdout
    assert " passed" in run.stdout  # the tests themselves passed: only the sanitizer saw it


def test_timeout_ends_the_sanitizer_and_everything_it_started(tmp_path, fake):
    pidfile = tmp_path / "pids"
    env = {**fake, "FAKE_SANITIZER": "hang", "FAKE_SANITIZER_PIDFILE": str(pidfile)}
    run = sanitize(tmp_path, "--timeout", "3", env=env, timeout=60)
    assert run.returncode == 1, run.stdout + run.stderr[-2000:]
    assert verdicts(run.stdout) == {("scale", "memcheck"): "TIMEOUT"}
    pids = [int(p) for p in pidfile.read_text().split()]
    deadline = time.monotonic() + 5
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(alive, pids)), "the sanitized process group outlived its timeout"


def test_bad_options_are_one_line_errors(monkeypatch, capsys):
    assert main(["sanitize", "--tool", "memchek"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'memchek' is not one of memcheck, racecheck" in err, err
    monkeypatch.setattr(cli_sanitize, "sanitizer", lambda: None)
    assert main(["sanitize"]) == 2
    err = capsys.readouterr().err
    assert "compute-sanitizer not found" in err and err.count("\n") == 1, err


def test_judge_reads_both_summaries():
    racecheck = ("========= Error: Race reported\n========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, "
                 "1 warning)\n========= ERROR SUMMARY: 0 errors\n4 passed in 1.0s\n")
    v = cli_sanitize.judge("k", "racecheck", racecheck, 97)
    assert (v.status, v.errors, v.warnings, v.tests) == ("ERRORS", 2, 1, "4 passed in 1.0s")
    assert v.findings == ("========= Error: Race reported",)
    assert cli_sanitize.judge("k", "memcheck", "1 failed, 3 passed in 2s\n========= ERROR SUMMARY: 0 errors",
                              1).status == "FAILED"
    assert cli_sanitize.judge("k", "memcheck", "", None).status == "TIMEOUT"


# ------------------------------------------------------------------ GPU: the real sanitizer

real = pytest.mark.skipif(not torch.cuda.is_available() or cli_sanitize.sanitizer() is None,
                          reason="needs a CUDA device and compute-sanitizer")


@real
def test_memcheck_finds_the_overread_the_generated_tests_miss(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "overread", PLANTED + "overread")
    write_spec(specs, "scale", GOOD)
    plain = subprocess.run([sys.executable, "-m", "pytest", "--specs", "specs", "--kernel", "overread", "--dtype",
                            "bf16", "-q", "-p", "no:cacheprovider", "specs"], cwd=tmp_path, capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    assert plain.returncode == 0, plain.stdout[-3000:]  # right outputs: no generated check can see the bug
    run = sanitize(tmp_path, "--tool", "memcheck", "--log-dir", "logs")
    print(run.stdout)
    assert run.returncode == 1, run.stdout + run.stderr[-3000:]
    assert verdicts(run.stdout) == {("overread", "memcheck"): "ERRORS", ("scale", "memcheck"): "clean"}
    assert "Invalid __global__ read" in (tmp_path / "logs" / "overread.memcheck.log").read_text()


@real
def test_racecheck_finds_the_missing_barrier(tmp_path):
    from tests.planted import sanitizer_kernels

    sanitizer_kernels.build_racy()  # torch caches the build: the sanitized run only loads it
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "racy", PLANTED + "racy")
    write_spec(specs, "scale", GOOD)
    run = sanitize(tmp_path, "--tool", "racecheck", "--dtype", "fp32", "--log-dir", "logs")
    print(run.stdout)
    assert run.returncode == 1, run.stdout + run.stderr[-3000:]
    assert verdicts(run.stdout) == {("racy", "racecheck"): "ERRORS", ("scale", "racecheck"): "clean"}
