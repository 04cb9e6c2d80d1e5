"""The tripwire on the harness's timing and checking code (harness.gate.integrity): a fresh process agrees with
this one's fingerprints, and each kind of patch a kernel module could make is named."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import torch

import harness.correctness.numerics as numerics
import harness.timing.sampler as sampler
from harness.gate.integrity import changed, fingerprint, fingerprints


@pytest.fixture(scope="module")
def expected():
    return fingerprints()


def _fresh(code: str, stdin: str = "") -> str:
    return subprocess.run([sys.executable, "-c", "import json, sys; from harness.gate import integrity; " + code],
                          input=stdin, capture_output=True, text=True, timeout=300, check=True).stdout


def test_a_fresh_process_has_the_same_fingerprints():
    # Two fresh processes, as the gate's parent and worker are: this one runs under pytest, whose assertion
    # rewriter compiles the harness (its pytest plugin) differently.
    theirs = _fresh("print(json.dumps(integrity.fingerprints()))")
    assert json.loads(_fresh("print(json.dumps(integrity.changed(json.load(sys.stdin))))", theirs)) == []
    expected = json.loads(theirs)
    assert len(expected) > 200 and {"time:perf_counter_ns", "harness.timing.sampler:GpuSampler"} <= set(expected)


def _patched(monkeypatch, owner, name, value):
    monkeypatch.setattr(owner, name, value)


@pytest.mark.parametrize("owner, name, value, key", [
    (time, "perf_counter_ns", lambda: 0, "time.perf_counter_ns: now function"),
    (time, "perf_counter_ns", time.monotonic_ns, "time.perf_counter_ns: now builtin_function_or_method monotonic_ns"),
    (torch.cuda.Event, "elapsed_time", lambda self, end: 0.0, "torch.cuda.streams.Event.elapsed_time: now function"),
    (torch.cuda, "synchronize", lambda *a: None, "torch.cuda.synchronize"),
    (sampler, "time", None, "harness.timing.sampler.time: now NoneType"),
    (sampler, "SPIN_MIN_US", 0.0, "harness.timing.sampler.SPIN_MIN_US"),
    (sampler.HostSampler, "sample", lambda self, fn, before=None: (0.001, None),
     "harness.timing.sampler.HostSampler.sample: now function"),
    (numerics, "mismatch", lambda *a, **k: "", "harness.correctness.numerics.mismatch"),
], ids=["clock-lambda", "clock-swapped", "event-method", "synchronize", "module-global", "constant", "sampler-method",
        "check"])
def test_each_patch_is_named(expected, monkeypatch, owner, name, value, key):
    assert changed(expected) == []
    _patched(monkeypatch, owner, name, value)
    lines = changed(expected)
    assert any(line.startswith(key) for line in lines), lines


def test_a_replacement_says_where_it_came_from(expected, monkeypatch):
    def fake_clock():
        return 0

    monkeypatch.setattr(time, "perf_counter", fake_clock)
    (line,) = [ln for ln in changed(expected) if ln.startswith("time.perf_counter:")]
    assert "fake_clock" in line and f"{__file__}:" in line


def test_fingerprint_ignores_the_string_hash_seed():
    code = "from harness.gate.integrity import fingerprint; print(fingerprint(lambda: frozenset({'a', 'b', 'c'})))"
    seen = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120,
                           env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout for seed in ("1", "2", "3")}
    assert len(seen) == 1 and fingerprint(len) != fingerprint(min)
