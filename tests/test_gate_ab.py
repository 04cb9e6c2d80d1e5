"""``bench --against REF``: the base tree under its own module root, an A/A run and a wrong PR candidate on the
CPU (eager torch timed by the host clock), bad refs, and one GPU per case in the benchmark's dispatch.

The smoke runs use a throwaway git repository with a tiny kernel package built from tests/specs/scale.toml;
they run the CLI in a subprocess, whose ``kernels`` package is that repository's, not this one's.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.gate.basetree import materialize, rewrite_imports, rewrite_spec
from tests.e2e import REPO, TINY_FILES, tiny_spec

TINY = TINY_FILES["kernels/tiny.py"]
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env={**os.environ, **GIT_ENV})


RULE = '\n[gate]\nmin_effect = 0.9\nreason = "host timing on a shared CPU: only the plumbing is tested"\n'


def _repo(repo: Path, files: dict) -> Path:
    """A git repository of ``files`` (path -> text), committed."""
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "tiny")
    return repo


@pytest.fixture
def tiny_repo(tmp_path) -> Path:
    return _repo(tmp_path / "repo", {**TINY_FILES, "specs/tiny.toml": tiny_spec(extra=RULE)})


def _against(repo: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([str(REPO), str(repo)])}
    return subprocess.run([sys.executable, "-m", "harness", "bench", "--against", "HEAD", "--out", str(out),
                           "--timeout", "1", "--no-isolate", *extra], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=240)


def test_rewrites_keep_line_numbers_and_other_strings():
    src = b"import os, kernels.a\nfrom kernels.b import (x,\n    y)\nimport kernels.c as c  # note\ns = 'kernels.d'\n"
    out = rewrite_imports(src, "kernels", "kh_base_1").decode()
    assert out.splitlines() == ["import os, kh_base_1.kernels.a; kernels = kh_base_1.kernels",
                                "from kh_base_1.kernels.b import (x,", "    y)",
                                "import kh_base_1.kernels.c as c  # note", "s = 'kernels.d'"]
    text = 'impl = "kernels.rope:rope"\nsummary = "kernels.rope: fast"\npeer = "liger_kernel.x:y"\n'
    assert rewrite_spec(text, "kernels", "kh_base_1").splitlines() == [
        'impl = "kh_base_1.kernels.rope:rope"', 'summary = "kernels.rope: fast"', 'peer = "liger_kernel.x:y"']


def test_base_tree_imports_its_own_helpers(tiny_repo, tmp_path):
    base = materialize("HEAD", tiny_repo, tmp_path / "base", tiny_repo / "specs")
    assert base.aa and base.package.startswith("kh_base_") and set(base.spec_sha256) == {"tiny.toml"}
    sys.path.append(base.root)
    try:
        tiny = importlib.import_module(f"{base.package}.kernels.tiny")
        assert tiny.FACTOR == 2.0 and sys.modules[f"{base.package}.kernels.helpers"].__file__.startswith(base.root)
        assert f'"{base.package}.kernels.tiny:scale_ref"' in (Path(base.specs_dir) / "tiny.toml").read_text()
    finally:
        sys.path.remove(base.root)
    (tiny_repo / "kernels" / "helpers.py").write_text("FACTOR = 3.0\n")   # an uncommitted change
    assert not materialize("HEAD", tiny_repo, tmp_path / "base2", tiny_repo / "specs").aa


def test_aa_run_on_cpu(tiny_repo, tmp_path):
    out = tmp_path / "aa"
    done = _against(tiny_repo, out)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((out / "compare.json").read_text())
    cmp = doc["comparison"]
    assert cmp["kind"] == "in-process interleaved" and cmp["aa"] and doc["exit_code"] == 0
    case, host = cmp["cases"]  # the device row, then the host-time row of the same case
    assert case["metric"] == "device" and host["metric"] == "host" and host["case_id"] == case["case_id"]
    assert host["verdict"] in ("SAME", "INCONCLUSIVE") and host["threshold"]["source"].startswith("host-time")
    assert case["verdict"] in ("SAME", "INCONCLUSIVE") and case["pr_provider"] == case["base_provider"] == "reference"
    assert case["blocks"] >= 6 and len(case["base_blocks_us"]) == len(case["pr_blocks_us"]) == case["blocks"]
    assert "kh_base_" in cmp["base"]["source"] and case["threshold"]["relative"] == 0.9
    assert (out / "compare.md").read_text().startswith("**Merge gate: 0 slower, 0 faster, ")
    assert json.loads((out / "noise.json").read_text())["cases"][0]["kernel"] == "tiny"


def test_wrong_pr_candidate_fails_the_gate(tiny_repo, tmp_path):
    (tiny_repo / "kernels" / "tiny.py").write_text(TINY.replace("out.copy_(x * w * FACTOR)",
                                                                "out.copy_(x * w * FACTOR * 1.5)"))
    out = tmp_path / "wrong"
    done = _against(tiny_repo, out, "--provider", "fast")
    assert done.returncode == 1, done.stderr[-3000:]
    (case,) = json.loads((out / "compare.json").read_text())["comparison"]["cases"]
    assert case["verdict"] == "WRONG" and "correctness check" in case["reason"] and case["blocks"] == 0
    assert "WRONG: tiny bf16 rows=64,cols=256" in done.stdout


def test_bad_ref_is_one_line(tiny_repo, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tiny_repo)
    assert main(["bench", "--against", "no-such-ref", "--out", str(tmp_path / "x"), "--no-isolate"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"--against 'no-such-ref': not a commit in {tiny_repo.resolve()}"


# ----------------------------------------------------------------------------- one GPU per case

def test_jobs_of_one_case_share_an_affinity():
    from types import SimpleNamespace

    from harness.bench.dispatch import case_key

    def job(kernel, case_id, dtype, provider):
        return SimpleNamespace(spec=SimpleNamespace(name=kernel), case=SimpleNamespace(id=case_id), dtype=dtype,
                               provider=SimpleNamespace(name=provider))

    assert case_key(job("k", "n=1", "bf16", "triton")) == case_key(job("k", "n=1", "bf16", "reference"))
    assert case_key(job("k", "n=1", "bf16", "triton")) != case_key(job("k", "n=2", "bf16", "triton"))
    assert case_key(job("k", "n=1", "bf16", "triton")) != case_key(job("k", "n=1", "fp16", "triton"))


def test_pool_runs_every_task_of_an_affinity_on_one_worker():
    from harness.workers.pool import Task, WorkerPool

    tasks = [Task("tests.planted.pool_tasks:echo", {"value": i}, f"t{i}", affinity=f"case{i % 3}")
             for i in range(12)]
    with WorkerPool(["cpu", "cpu"], initializer=None) as pool:
        pool._pump(lambda: all(w is not None and w.ready for w in pool._workers))  # both up: a fair start
        slots = {}
        for i, outcome in pool.map_unordered(tasks):
            assert outcome.status == "ok"
            slots.setdefault(tasks[i].affinity, set()).add(outcome.worker_pid)
    assert all(len(pids) == 1 for pids in slots.values()), slots
    assert len(set().union(*slots.values())) == 2   # the groups still spread over both workers


def test_gate_flags_a_pr_time_beyond_the_roofline(tmp_path):
    """On cold GPU timing the gate's record turns a PR time faster than the measured roof (beyond the interval of
    its median) into WRONG; the base's time is only reported. The roofline model is the spec given (the base's)."""
    from harness.gate.ab import record
    from harness.spec.load import load
    from tests.e2e import write_spec

    spec = load(write_spec(tmp_path, "scale", "tests.planted.broken_kernels:scale"))
    case_id = spec.cases["ci"][0].id
    spec = replace(spec, cases={**spec.cases, "bench": spec.cases["ci"]})
    ceilings = {"bandwidth_gbps": {"copy": 1000.0}, "copy_gbps": 1000.0, "matmul_tflops": {}}
    # 16 x 128 fp32 x and out plus 128 w: 16.9 KB, 16.9 ns at 1 TB/s; 100 blocks of a 1 ns PR time
    d = dict(kernel="scale", dtype="fp32", case_id=case_id, shape={}, headline=False, verdict="FASTER", reason="",
             base_provider="triton", pr_provider="triton", base_median_us=0.02, pr_median_us=0.001, ratio=0.05,
             ratio_lo=0.04, ratio_hi=0.06, effect=0.03, threshold=None, noise=None, base_spread=None, pr_spread=None,
             blocks=10, stop="decided", dropped=0, gpu_index=0, gpu_uuid=None, wall_s=1.0,
             base_blocks_us=[[0.02] * 10] * 10, pr_blocks_us=[[0.001] * 10] * 10, method="events")
    flagged = record(d, spec, ceilings, judge_plausible=True)
    assert flagged.verdict == "WRONG" and flagged.reason.startswith("PR triton: implausible:")
    assert record(d, spec, ceilings, judge_plausible=False).verdict == "FASTER"  # warm or host timing: no judgement
    honest = record({**d, "pr_median_us": 0.05, "pr_blocks_us": [[0.05] * 10] * 10}, spec, ceilings, True)
    assert honest.verdict == "FASTER" and honest.pr_pct_roofline < 100


def test_a_backward_rows_roofline_reads_the_gradients_sizes(tmp_path):
    """A bwd row's % of roofline is the backward's model, which names the gradients' tensors (bytes_grad_out,
    bytes_grad_x): the gate's record gives them to it as the benchmark does (the H200's first gate run in bwd mode
    raised "undefined symbol 'bytes_grad_out'")."""
    from harness.gate.ab import record
    from harness.spec.load import load
    from tests.e2e import write_spec

    roofline = ('\n[backward.roofline]\nbytes = "bytes_x + bytes_w + bytes_grad_out + bytes_grad_x + bytes_grad_w"\n'
                'flops = "3 * numel_x"\n')
    extra = BACKWARD.replace("backends.fast", "backends.triton") + roofline
    spec = load(write_spec(tmp_path, "scale", "tests.planted.broken_kernels:scale", extra=extra))
    spec = replace(spec, cases={**spec.cases, "bench": spec.cases["ci"]})
    ceilings = {"bandwidth_gbps": {"copy": 1000.0}, "copy_gbps": 1000.0, "matmul_tflops": {}}
    d = dict(kernel="scale", dtype="fp32", case_id=spec.cases["ci"][0].id, mode="bwd", shape={}, headline=False,
             verdict="SAME", reason="", base_provider="triton", pr_provider="triton", base_median_us=1.0,
             pr_median_us=1.0, ratio=1.0, ratio_lo=0.99, ratio_hi=1.01, effect=0.0, threshold=None, noise=None,
             base_spread=None, pr_spread=None, blocks=10, stop="decided", dropped=0, gpu_index=0, gpu_uuid=None,
             wall_s=1.0, base_blocks_us=[[1.0] * 10] * 10, pr_blocks_us=[[1.0] * 10] * 10, method="events")
    row = record(d, spec, ceilings, judge_plausible=True)
    # 16 x 128 fp32 x, grad_out and grad_x, 128 w and grad_w: 25.6 KB in 1 us at 1 TB/s, 2.56% of the roof
    assert row.pr_pct_roofline == pytest.approx(100 * (3 * 16 * 128 + 2 * 128) * 4 / 1e6, rel=1e-6)
    assert record({**d, "mode": "fwd"}, spec, ceilings).pr_pct_roofline < row.pr_pct_roofline


BACKWARD = '''
[backward]
inputs = ["x", "w"]

[backward.backends.fast]
differentiable = true
'''
RETURNING = TINY.replace("def scale_fast(*, x, w, out):\n    out.copy_(x * w * FACTOR)",
                         "def scale_fast(*, x, w, out):\n    return x * w * FACTOR  # its own output, with a grad_fn")


@pytest.fixture
def backward_repo(tmp_path) -> Path:
    """tiny with a backward: its peer ``fast`` returns a differentiable output (differentiable = true)."""
    return _repo(tmp_path / "bwd-repo", {**TINY_FILES, "kernels/tiny.py": RETURNING,
                                         "specs/tiny.toml": tiny_spec(extra=RULE + BACKWARD)})


def test_the_gate_times_and_judges_the_backward_as_rows_of_their_own(backward_repo, tmp_path):
    """--mode fwd,bwd: each case's forward and backward are compared apart; a pull request whose forward is
    right and whose gradient is wrong (w detached: no dw) is WRONG in its bwd row only. fp32: eager bf16 sums dw
    over the rows in bf16, outside the bf16 bound (an A/A run said so)."""
    out = tmp_path / "aa-bwd"
    done = _against(backward_repo, out, "--mode", "fwd,bwd", "--provider", "fast", "--dtype", "fp32")
    assert done.returncode == 0, done.stderr[-3000:]
    cases = json.loads((out / "compare.json").read_text())["comparison"]["cases"]
    rows = [c for c in cases if c["metric"] == "device"]
    assert sorted(c["mode"] for c in rows) == ["bwd", "fwd"]
    # each pass's host time per call is a row of that pass (the H200's A/A run listed all three as fwd)
    assert sorted(c["mode"] for c in cases if c["metric"] == "host") == ["bwd", "fwd"]
    assert all(c["verdict"] in ("SAME", "INCONCLUSIVE") for c in rows), rows
    assert "| bwd |" in (out / "compare.md").read_text()
    (backward_repo / "kernels" / "tiny.py").write_text(RETURNING.replace("return x * w * FACTOR",
                                                                         "return x * w.detach() * FACTOR"))
    out = tmp_path / "wrong-bwd"
    done = _against(backward_repo, out, "--mode", "fwd,bwd", "--provider", "fast", "--dtype", "fp32")
    assert done.returncode == 1, done.stderr[-3000:]
    rows = {c["mode"]: c for c in json.loads((out / "compare.json").read_text())["comparison"]["cases"]
            if c["metric"] == "device"}
    assert rows["fwd"]["verdict"] in ("SAME", "INCONCLUSIVE"), rows["fwd"]
    assert rows["bwd"]["verdict"] == "WRONG" and "grad_w" in rows["bwd"]["reason"], rows["bwd"]


@pytest.fixture
def own_kernels_package():
    """Let a test import another repository's ``kernels`` package and leave none of it behind: every ``kernels``
    module is dropped for the test and put back as it was after it. (monkeypatch.delitem puts back what was there
    but keeps what the test added: the tiny repository's ``kernels`` stayed, and a later test in the same worker
    imported its kernels from it: test_distributed's ``kernels.all_reduce`` was not found.)"""
    saved = {m: mod for m, mod in sys.modules.items() if m == "kernels" or m.startswith("kernels.")}
    for name in saved:
        del sys.modules[name]
    yield
    for name in [m for m in sys.modules if m == "kernels" or m.startswith("kernels.")]:
        del sys.modules[name]
    sys.modules.update(saved)


def _tiny_case(tiny_repo, monkeypatch, expected: dict | None = None) -> dict:
    """The tiny repository's first bench case against itself, run by the gate's case runner in this process
    (``expected``: the tripwire's fingerprints, as the deciding process passes them)."""
    import dataclasses

    from harness.gate.abcase import run_ab_case
    from harness.gate.interleave import BlockConfig
    from harness.spec.load import load

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.syspath_prepend(str(tiny_repo))
    spec = str(tiny_repo / "specs" / "tiny.toml")
    case = load(spec).cases["bench"][0]
    return run_ab_case(pr_spec_path=spec, base_spec_path=spec, roots=[str(tiny_repo)], case_id=case.id,
                       dtype="fp32", seed=1, provider=None,
                       blocks=dataclasses.asdict(BlockConfig(method="host", host_blocks=0, budget_s=0.5)),
                       threshold={"relative": 0.9, "floor_us": 0.0, "source": "test"}, noise=None, confidence=0.95,
                       expected=expected)


def test_each_side_s_peak_memory_goes_into_the_gates_row(tiny_repo, monkeypatch, own_kernels_package):
    """The gate measures each side's peak device memory as the bench does (one call after the timing) and its
    row carries both; on a CPU peak_bytes is None, so the measurement is stood in for by a counter of calls."""
    from harness.timing import memory

    calls = []

    def fake_peak(fn, device):
        calls.append(fn)
        fn()  # the side's timed call, once more
        return 1000 * len(calls)

    monkeypatch.setattr(memory, "peak_bytes", fake_peak)
    d = _tiny_case(tiny_repo, monkeypatch)
    assert d["verdict"] in ("SAME", "INCONCLUSIVE"), d
    assert (d["base_peak_mem_bytes"], d["pr_peak_mem_bytes"]) == (1000, 2000) and len(calls) == 2


@pytest.mark.parametrize("outcome", ["shifted", "refused", "tampered"])
def test_the_event_pairs_recheck_reaches_the_gates_row(tiny_repo, monkeypatch, own_kernels_package, outcome):
    """The timer's re-check of the empty event pair's cost (tests/test_event_overhead.py plants the measures) as
    the gate's row shows it: samples shifted are said in the reason; samples no measure can make a time of leave
    the case NOT-COMPARED, a failure of the harness's measure that neither fails nor passes the pull request,
    unless a clock was patched while they were taken (a kernel that zeroes every event span reads below zero):
    then the tripwire's WRONG. On a CPU the host clock has no event pair, so the re-check is stood in for."""
    import time

    from harness.gate import integrity, interleave
    from harness.timing.sampler import OverheadMismeasured

    def planted(self, base, pr):
        if outcome == "tampered":
            real = time.perf_counter_ns
            monkeypatch.setattr(time, "perf_counter_ns", lambda: real())
        if outcome in ("refused", "tampered"):
            raise OverheadMismeasured("events: the timed calls' median read -11.70 us")
        return {"event_overhead_first_us": 17.6, "event_overhead_again_us": 1.6, "event_overhead_us": 1.6}

    monkeypatch.setattr(interleave._Timer, "recheck", planted)
    d = _tiny_case(tiny_repo, monkeypatch, expected=integrity.fingerprints())
    if outcome == "tampered":
        assert d["verdict"] == "WRONG" and "timing or checking code changed while both sides were timed" in \
            d["reason"] and "perf_counter_ns" in d["reason"], d
    elif outcome == "refused":
        assert d["verdict"] == "NOT-COMPARED" and d["reason"] == "while timing, events: the timed calls' median " \
                                                                 "read -11.70 us", d
    else:
        assert d["verdict"] in ("SAME", "INCONCLUSIVE"), d
        assert "cost read 17.60 us before the samples and 1.60 us after: the smaller, 1.60 us" in d["reason"], d
