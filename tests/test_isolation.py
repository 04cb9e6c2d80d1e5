"""Crash isolation: a kernel that raises, hangs, kills its process or segfaults fails its own cases only.

The pool tests use tasks that never import torch, so their workers start in a blink; the end-to-end tests
run ``pytest --isolate`` and ``python -m harness bench --isolate`` over a directory of specs where faulty
kernels sit next to a good one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from harness.spec.load import load as load_spec
from harness.workers.pool import Task, WorkerPool
from tests.e2e import REPO, alive, fp32_items, outcomes, write_spec
from tests.planted.faulty_kernels import RAISE_MESSAGE

TASKS = "tests.planted.pool_tasks:"
FAULTY = "tests.planted.faulty_kernels:"
GOOD = "tests.planted.broken_kernels:scale"
CI_CASE = "rows=16,cols=128"
FAULT_TIMEOUT_S = 3


# --------------------------------------------------------------------------- the pool itself

def test_each_failure_kind_is_an_outcome_and_the_worker_is_replaced():
    with WorkerPool(["cpu"], timeout_s=30, initializer=None) as pool:
        ok = pool.run(Task(TASKS + "echo", {"value": 7}))
        error = pool.run(Task(TASKS + "fail", {"message": "boom"}))
        crashed = pool.run(Task(TASKS + "exit_with", {"code": 3}))
        killed = pool.run(Task(TASKS + "kill_self"))
        hung = pool.run(Task(TASKS + "sleep", {"seconds": 60}, timeout_s=0.5))
        capture = pool.run(Task(TASKS + "capture_error"))
        poisoned = pool.run(Task(TASKS + "cuda_error"))
        after = pool.run(Task(TASKS + "echo", {"value": 8}))
        unpicklable = pool.run(Task(TASKS + "echo", {"value": lambda: 0}))
    assert (ok.status, ok.value["value"], ok.error) == ("ok", 7, "")
    assert error.status == "error" and error.error.startswith("ValueError: boom")
    assert "pool_tasks.py" in error.error and "in fail" in error.error  # the worker's traceback comes along
    assert error.worker_pid == ok.worker_pid  # an exception does not cost the worker
    assert crashed.status == "crashed" and crashed.summary == "crashed (exit code 3)"
    assert hung.status == "timeout" and hung.summary == "timed out after 0.5 s"
    assert "in sleep" in hung.error  # faulthandler's dump says where it hung
    assert killed.status == "crashed" and killed.summary == "crashed (signal 9, SIGKILL)"
    assert crashed.worker_pid == ok.worker_pid != killed.worker_pid != hung.worker_pid  # fresh after each crash
    assert capture.status == "error" and "during capture" in capture.error
    assert poisoned.worker_pid == capture.worker_pid  # an error that is not sticky keeps the worker
    assert poisoned.status == "error" and "illegal memory access" in poisoned.error
    assert after.status == "ok" and after.worker_pid != poisoned.worker_pid  # a CUDA error retires the worker
    assert unpicklable.status == "error" and "could not be sent" in unpicklable.error
    for o in (ok, crashed, killed, hung, poisoned, after):
        assert not alive(o.worker_pid), f"worker {o.worker_pid} outlived the pool"


def test_a_crash_before_the_pool_runs_again_keeps_its_dying_words(monkeypatch):
    """On a loaded machine the worker can run and die between the pool's send and its next line: the words it
    wrote still reach the outcome (the log offset is taken before the send)."""
    from multiprocessing.connection import Connection

    real = Connection.send

    def send_then_stall(self, obj):
        real(self, obj)
        if isinstance(obj, tuple) and obj and obj[0] == TASKS + "say_and_exit":
            time.sleep(1.0)  # the worker writes and exits meanwhile

    monkeypatch.setattr(Connection, "send", send_then_stall)
    with WorkerPool(["cpu"], timeout_s=30, initializer=None) as pool:
        crashed = pool.run(Task(TASKS + "say_and_exit", {"words": "Fatal Python error: Segmentation fault",
                                                          "code": 3}))
    assert crashed.status == "crashed" and "Fatal Python error: Segmentation fault" in crashed.error, crashed.error


def test_tasks_shard_across_one_worker_per_device(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    tasks = [Task(TASKS + "sleep", {"seconds": 0.2}) for _ in range(6)]
    with WorkerPool(["cuda:0", "cuda:1"], timeout_s=30, initializer=None) as pool:
        done = dict(pool.map_unordered(tasks))
        seen = {pool.run(Task(TASKS + "echo", {"value": 0})).value["visible"] for _ in range(4)}
    assert sorted(done) == list(range(6)) and all(o.status == "ok" for o in done.values())
    assert len({o.value for o in done.values()}) == 2 and {o.device for o in done.values()} == {"cuda:0", "cuda:1"}
    assert seen <= {"4", "5"}  # each worker sees only its own GPU, through the parent's numbering


def test_interrupt_leaves_no_worker_behind():
    # Python leaves SIGINT ignored when it starts ignored (a run started in the background by a shell
    # without job control): Ctrl-C must reach this process as it does at a terminal for the test to mean it.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), WorkerPool(["cpu"], timeout_s=30, initializer=None) as pool:
            pid = pool.run(Task(TASKS + "echo", {"value": 0})).worker_pid
            pool.run(Task(TASKS + "interrupt_parent"))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not alive(pid)


# --------------------------------------------------------------------------- end to end

# Spec name -> (kernel, what its failure says). Each crash costs a fresh worker (a torch import, seconds),
# so SIGKILL and os._exit are covered by the pool tests above, not here.
FAULTS = {
    "faulty_hang": ("hangs", f"kernel timed out after {FAULT_TIMEOUT_S} s"),
    "faulty_raise": ("raises", f"RuntimeError: {RAISE_MESSAGE}"),
    "faulty_segv": ("segfault", "kernel crashed (signal 11, SIGSEGV)"),
}


@pytest.mark.slow
def test_pytest_isolate_reports_each_fault_and_the_good_kernel_passes(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the specs name tests.planted.* kernels
    monkeypatch.setenv("COLUMNS", "400")  # the short summary keeps each failure's first line whole
    specs = pytester.path / "specs"
    specs.mkdir()
    good = load_spec(write_spec(specs, "scale", GOOD))
    for name, (kernel, _) in FAULTS.items():
        write_spec(specs, name, FAULTY + kernel, timeout=FAULT_TIMEOUT_S)
    # One case per faulty kernel (each crash costs a fresh worker); every fp32 case of the good one but its two
    # compile items (a cold torch.compile each, in a worker). The directory is the default "specs", so the plugin
    # collects only what the arguments name.
    picked = [f"specs/{name}.toml::{name}[triton-fp32-{CI_CASE}]" for name in FAULTS]
    result = pytester.runpytest_subprocess("--specs", "specs", "--isolate", "--dtype", "fp32", "-p",
                                           "no:cacheprovider", "-k", "not compile", *picked, "specs/scale.toml",
                                           timeout=150)
    out = result.stdout.str()
    n_good = fp32_items(good) - 2
    assert outcomes(result) == {"failed": len(FAULTS), "passed": n_good, "deselected": 2}, out[-3000:]
    for name, (_, says) in FAULTS.items():
        line = re.search(rf"^FAILED .*{name}\.toml::{name}\[.*$", out, re.M)
        assert line and says in line.group(0), (name, says, line and line.group(0))
        assert f"[{name} backend=triton dtype=fp32 case=ci:{CI_CASE} seed=" in out  # the case's context
    assert "Segmentation fault" in out and "in segfault" in out  # the worker's dying words


@pytest.mark.slow
def test_bench_isolate_reports_each_fault_and_measures_the_rest(tmp_path):
    peers = "".join(f'\n[peers.{p}]\nimpl = "{impl}"\n' for p, impl in
                    (("raises", FAULTY + "raises"), ("hangs", FAULTY + "hangs"), ("segfault", FAULTY + "segfault"),
                     ("good", GOOD)))
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs, "faulty_bench", FAULTY + "raises", timeout=FAULT_TIMEOUT_S,
               extra=peers + "\n[[cases.bench]]\nrows = 16\ncols = 128\n")
    providers = ["reference", "raises", "hangs", "segfault", "good"]
    out_dir = tmp_path / "out"
    cmd = [sys.executable, "-m", "harness", "bench", "--specs-dir", str(specs), "--isolate", "--dtype", "fp32",
           "--provider", ",".join(providers), "--out", str(out_dir), "--timeout", "1", "--min-time", "0.05",
           "--tier", "bench"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    run = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=150)
    # the faults are peers': findings of the report, not a failed run (only a failing candidate exits 1)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("note (peer, does not fail the run)") == 3, run.stdout[-3000:]
    cases = json.loads((out_dir / "results.json").read_text())["cases"]
    assert [c["provider"] for c in cases] == providers  # the plan's order
    by = {c["provider"]: c for c in cases}
    assert by["reference"]["status"] == "ok" and by["good"]["status"] == "ok", run.stderr[-3000:]
    assert by["raises"]["status"] == "error" and RAISE_MESSAGE in by["raises"]["reason"]
    assert by["hangs"]["status"] == "error" and "timed out after 4 s" in by["hangs"]["reason"]
    assert by["segfault"]["status"] == "error" and "crashed (signal 11, SIGSEGV)" in by["segfault"]["reason"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="an illegal memory access needs a CUDA device")
def test_out_of_bounds_read_poisons_only_its_worker(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    specs = pytester.path / "specs"
    specs.mkdir()
    write_spec(specs, "faulty_oob", FAULTY + "out_of_bounds", timeout=30)
    good = load_spec(write_spec(specs, "scale", GOOD))
    result = pytester.runpytest_subprocess("--specs", "specs", "--isolate", "--dtype", "fp32", "-p",
                                           "no:cacheprovider", f"specs/faulty_oob.toml::faulty_oob[triton-fp32-"
                                           f"{CI_CASE}]", "specs/scale.toml", timeout=300)
    out = result.stdout.str()
    n_good = fp32_items(good)
    assert outcomes(result) == {"failed": 1, "passed": n_good}, out[-3000:]
    assert re.search(r"illegal memory access|CUDA error|cudaErrorIllegalAddress", out), out[-3000:]
