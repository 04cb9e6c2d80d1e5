"""harness.aot.parallel and compile_all's worker processes: same results as the serial path, in the same order,
and a worker that dies or raises fails its own item only. No GPU needed; Linux (fork) only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.aot import parallel
from harness.aot import triton as aot
from harness.cli.main import main
from tests.test_aot import load_planted

pytestmark = pytest.mark.skipif(not parallel.fork_available(), reason="worker processes need fork (Linux)")

ARCHS = ("sm_90", "gfx942")


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _records():
    """A plain kernel, an autotuned one (two configs) and an fp8 one, each launched twice: 4 distinct launches."""
    k, recs = load_planted(False), []  # JITFunctions, whatever TRITON_INTERPRET says (see tests/test_aot.py)
    for _ in range(2):  # the duplicates must be dropped in both paths alike
        recs += aot.record_launches(k.scale_add, dict(x=meta(4096), y=meta(4096), out=meta(4096)))
        recs += aot.record_launches(k.tuned_copy, dict(x=meta(4096), out=meta(4096)))
        recs += aot.record_launches(k.to_fp8, dict(x=meta(4096), out=meta(4096, dtype=torch.float8_e4m3fn)))
    return recs


@pytest.fixture(scope="module")
def records():
    return _records()


def _summary(results) -> list:
    return [[r.kernel_name, r.arch, r.ok, r.config, repr(r.resources), r.error, r.num_warps, r.dynamic_shared_bytes]
            for r in results]


def _crashing(real, doomed: tuple, how: str):
    def planted(record, arch):  # monkeypatched in the parent, inherited by the forked workers
        result = real(record, arch)
        if (result.kernel_name, result.config, result.arch) == doomed:
            if how == "exit":
                os._exit(1)
            if how == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            raise RuntimeError("planted")
        return result
    return planted


def _compile_in_fresh_process() -> None:
    """Run by `compiled` below in a process of its own: prints the results of each way to compile as JSON."""
    recs, out, real = _records(), {}, aot.compile_launch
    serial = aot.compile_all(recs, ARCHS, jobs=1)
    par = aot.compile_all(recs, ARCHS, jobs=2)
    out["serial"], out["parallel"] = _summary(serial), _summary(par)
    out["same_records"] = all(p.record is s.record for p, s in zip(par, serial, strict=True))
    doomed = (serial[1].kernel_name, serial[1].config, serial[1].arch)  # the 2nd item (gfx942)
    for how in ("exit", "segv", "raise"):
        aot.compile_launch = _crashing(real, doomed, how)
        try:
            crashed = aot.compile_all(recs, ARCHS, jobs=2)
        finally:
            aot.compile_launch = real
        out[how] = _summary(crashed)
        out[how + "_check"] = aot.check(crashed[1])
        out[how + "_record"] = crashed[1].record is serial[1].record
    print("RESULTS " + json.dumps(out))


@pytest.fixture(scope="module")
def compiled():
    # A fresh process, as `nox -s matrix` runs it: once the Triton interpreter has run a kernel in a process
    # (tests/test_aot.py's last test does), Triton 3.9 fails to compile kernels there afterwards
    code = "from tests.test_aot_parallel import _compile_in_fresh_process as f; f()"
    proc = subprocess.run([sys.executable, "-c", code],
                          cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=240)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULTS ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULTS "))


def test_parallel_results_equal_serial_in_order(compiled):
    serial = compiled["serial"]
    assert len(serial) == 4 * len(ARCHS) and [r[1] for r in serial] == list(ARCHS) * 4
    assert compiled["parallel"] == serial
    assert compiled["same_records"]  # the parent's own record objects, put back
    assert sum(r[2] for r in serial) >= 6, serial  # compiled for real, not all failures alike


@pytest.mark.parametrize("how, expect", [
    ("exit", "worker process died (exit code 1)"),
    ("segv", "worker process died (killed by SIGSEGV)"),
    ("raise", "worker raised RuntimeError: planted"),
])
def test_a_worker_crash_fails_that_item_only(compiled, how, expect):
    serial, crashed = compiled["serial"], compiled[how]
    name, arch, ok, config, resources, error = crashed[1][:6]
    assert (name, arch, config) == tuple(serial[1][i] for i in (0, 1, 3))
    assert (ok, resources, error) == (False, "None", expect)
    assert compiled[how + "_check"] == [f"{name} [{config}] gfx942: compile error: {expect}"]
    assert compiled[how + "_record"]
    assert crashed[:1] + crashed[2:] == serial[:1] + serial[2:]


def _fake_compile(record, arch):
    """Stands in for a Triton compile (fast): says which process ran it."""
    return aot.CompileResult(kernel_name=record.kernel_name, arch=str(arch), config=str(os.getpid()), ok=True,
                             record=record)


def test_jobs_1_compiles_in_this_process(records, monkeypatch):
    monkeypatch.setattr(parallel, "fork_map", lambda *a, **k: pytest.fail("jobs=1 must not fork"))
    monkeypatch.setattr(aot, "compile_launch", _fake_compile)
    out = aot.compile_all(records, ARCHS, jobs=1)
    assert len(out) == 8 and {r.config for r in out} == {str(os.getpid())}
    monkeypatch.setenv(parallel.JOBS_ENV, "1")  # the default follows $KH_MATRIX_JOBS
    assert {r.config for r in aot.compile_all(records, ARCHS)} == {str(os.getpid())}


def test_jobs_2_compiles_in_workers(records, monkeypatch):
    monkeypatch.setattr(aot, "compile_launch", _fake_compile)
    out = aot.compile_all(records, ARCHS, jobs=2)
    assert len(out) == 8 and str(os.getpid()) not in {r.config for r in out}
    assert all(r.record is not None for r in out)


def test_jobs_default_and_env(monkeypatch):
    monkeypatch.delenv(parallel.JOBS_ENV, raising=False)
    assert parallel.jobs() == len(os.sched_getaffinity(0))
    assert parallel.jobs(3) == 3 and parallel.jobs(0) == 1
    monkeypatch.setenv(parallel.JOBS_ENV, "5")
    assert parallel.jobs() == 5 and parallel.jobs(2) == 2  # an explicit count wins
    monkeypatch.setenv(parallel.JOBS_ENV, "many")
    with pytest.raises(ValueError, match="KH_MATRIX_JOBS"):
        parallel.jobs()
    monkeypatch.setattr(parallel, "fork_available", lambda: False)
    monkeypatch.setenv(parallel.JOBS_ENV, "5")
    assert parallel.jobs() == 1 and parallel.jobs(8) == 1  # no fork: serial


def _cheap(i):
    if i in (3, 11):
        os._exit(3)
    if i == 7:
        raise ValueError(i)
    if i == 15:
        os.kill(os.getpid(), signal.SIGKILL)
    return i * i


def test_fork_map_isolates_every_crash_and_keeps_order():
    out = parallel.fork_map(_cheap, 20, 3, lambda i, why: (i, why))
    expect = [i * i for i in range(20)]
    expect[3] = (3, "worker process died (exit code 3)")
    expect[11] = (11, "worker process died (exit code 3)")
    expect[7] = (7, "worker raised ValueError: 7")
    expect[15] = (15, "worker process died (killed by SIGKILL)")
    assert out == expect
    assert parallel._FN is None and parallel._STATE is None


def test_matrix_passes_jobs_through(tmp_path, monkeypatch, capsys):
    from tests.test_matrix import SPEC

    seen = []
    monkeypatch.setattr(aot, "compile_all", lambda records, archs, jobs=None: seen.append(jobs) or [])
    (tmp_path / "spill.toml").write_text(SPEC.format(name="spill"))
    main(["matrix", "--specs-dir", str(tmp_path), "--arch", "sm_90", "--jobs", "3"])
    err = capsys.readouterr().err
    assert seen == [3], err
    assert err.count("worker process") == 1 and "in 3 worker processes" in err
