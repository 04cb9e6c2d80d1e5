"""Hostile pull requests against the gate's policy and timing, played through the real trusted gate.

Each test builds a throwaway git repository: a base commit with a tiny kernel module and its spec, and a pull
request commit on a branch. The repository stays checked out at the base, as the trusted workflow checks it
out, and the gate runs as the trusted job runs it, in a subprocess: ``python -m harness bench --against BASE
--candidate PR`` (this checkout's harness, the pull request's kernels and specs only, every kernel in a worker
process). On a CPU the timing is the host sampler's and the kernels are eager torch (the ``fast`` peer); on a
GPU the same tests time CUDA events on the GPU, at a larger shape.

Each test prints one line ``REDTEAM <attack>: caught|no effect: <what the gate said>``, which bench/redteam.sh
collects into its summary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.gate.calibration import default_threshold
from harness.gate.model import IN_PROCESS
from tests.e2e import REPO, TINY_FILES, tiny_spec

GPU = torch.cuda.is_available()
# A GPU case large enough that memory traffic sets its time; on a CPU a small one, whose time is the ops' fixed
# cost (the re-checks of the timed outputs, in fp64 on the host, then stay cheap). Either way one more
# elementwise op is about +30%.
SHAPE = "rows = 4096\ncols = 4096" if GPU else "rows = 64\ncols = 256"
KERNEL = TINY_FILES["kernels/tiny.py"]
SLOWER = KERNEL + '''

def scale_fast(*, x, w, out):  # the pull request: a redundant pass over the output, same values
    out.copy_(x * w * FACTOR)
    out.mul_(1.0)
'''
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def spec(extra: str = "") -> str:
    return tiny_spec(SHAPE, extra)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def _write(repo: Path, files: dict) -> None:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)


def pull_request(tmp_path: Path, files: dict) -> tuple[Path, str, str]:
    """(repository checked out at the base, base SHA, pull request SHA): the PR commit changes ``files``."""
    repo = tmp_path / "repo"
    _write(repo, {**TINY_FILES, "specs/tiny.toml": spec()})
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    base, branch = _git(repo, "rev-parse", "HEAD"), _git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    _git(repo, "checkout", "-q", "-b", "pr")
    _write(repo, files)
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "pull request")
    pr = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", branch)
    return repo, base, pr


def gate(repo: Path, out: Path, against: str, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """The gate in a subprocess from the checkout ``repo`` (its compare.json, parsed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(repo)])}
    done = subprocess.run([sys.executable, "-m", "harness", "bench", "--against", against, "--kernel", "tiny",
                           "--provider", "fast", "--out", str(out), "--timeout", "3", *extra], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900)
    assert (out / "compare.json").is_file(), f"exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done, json.loads((out / "compare.json").read_text())


def trusted(repo: Path, out: Path, base: str, pr: str, *extra: str):
    return gate(repo, out, base, "--candidate", pr, *extra)


def only_case(doc: dict) -> dict:
    """The one case's device-time row (each case also has a host-time row, judged on its own)."""
    (case,) = [c for c in doc["comparison"]["cases"] if c.get("metric", "device") == "device"]
    return case


def changed_fields(doc: dict) -> dict:
    return {c["field"]: c for c in doc["policy_changes"]}


# ----------------------------------------------------------------------------- policy in the spec

@pytest.mark.slow
def test_raised_min_effect_is_not_applied(tmp_path):
    gate_rule = '\n[gate]\nmin_effect = 0.99\nreason = "this kernel is noisy (it is not)"\n'
    repo, base, pr = pull_request(tmp_path, {"kernels/tiny.py": SLOWER, "specs/tiny.toml": spec(gate_rule)})
    done, doc = trusted(repo, tmp_path / "gate", base, pr)
    case, calibrated = only_case(doc), default_threshold(IN_PROCESS)
    assert changed_fields(doc)["gate.min_effect"]["pr"] == "0.99" and not doc["policy_applied"]
    assert case["threshold"]["relative"] == calibrated.relative and case["threshold"]["source"] == calibrated.source
    assert case["verdict"] == "SLOWER" and done.returncode == 1, done.stdout[-2000:]
    assert "Not applied: the base's values judged this" in (tmp_path / "gate" / "compare.md").read_text()
    # The control: accepted for the pull request's exact commit, its rule applies and hides the slowdown.
    _, accepted = trusted(repo, tmp_path / "accepted", base, pr, "--accept-policy", pr)
    assert accepted["policy_applied"] and only_case(accepted)["threshold"]["relative"] == 0.99
    assert only_case(accepted)["verdict"] != "SLOWER"
    print(f"REDTEAM raise-min-effect: no effect: the PR's 0.99 is listed and not applied; {case['verdict']} "
          f"{100 * (case['ratio'] - 1):+.0f}% at the base's minimum effect {100 * case['effect']:.1f}% "
          f"(accepted for {pr[:12]}: {only_case(accepted)['verdict']})")


@pytest.mark.slow
def test_loosened_tolerance_is_not_applied(tmp_path):
    wrong = KERNEL.replace("out.copy_(x * w * FACTOR)", "out.copy_(x * w * FACTOR * 1.1)")
    loose = ('\n[tolerance.bf16]\nrtol = 0.5\natol = 0.5\nnorm_rtol = 0.5\n'
             'reason = "bf16 is imprecise (not this imprecise)"\n')
    repo, base, pr = pull_request(tmp_path, {"kernels/tiny.py": wrong, "specs/tiny.toml": spec(loose)})
    done, doc = trusted(repo, tmp_path / "gate", base, pr)
    case = only_case(doc)
    assert "tolerance.bf16" in changed_fields(doc) and not doc["policy_applied"]
    assert case["verdict"] == "WRONG" and "correctness check" in case["reason"] and done.returncode == 1
    _, accepted = trusted(repo, tmp_path / "accepted", base, pr, "--accept-policy", pr)
    assert accepted["policy_applied"] and only_case(accepted)["verdict"] not in ("WRONG", "ERROR")  # the control
    print(f"REDTEAM loosen-tolerance: caught: WRONG at the base's tolerance: {case['reason'][:160]}")


def test_swapped_reference_is_not_applied(tmp_path):
    wrong = KERNEL.replace("out.copy_(x * w * FACTOR)", "out.copy_(x * w * FACTOR * 1.1)").replace(
        "out.copy_(x.to(acc) * w.to(acc) * FACTOR)", "out.copy_(x.to(acc) * w.to(acc) * FACTOR * 1.1)")
    repo, base, pr = pull_request(tmp_path, {"kernels/tiny.py": wrong})
    done, doc = trusted(repo, tmp_path / "gate", base, pr)
    case = only_case(doc)
    assert "kernel.reference (its code)" in changed_fields(doc)
    assert case["verdict"] == "WRONG" and done.returncode == 1, case
    print(f"REDTEAM swap-reference: caught: WRONG against the base's reference: "
          f"{case['reason'][:140]}")


@pytest.mark.slow
def test_edited_calibration_has_no_effect(tmp_path):
    cal = json.loads((REPO / "harness" / "gate" / "calibration.json").read_text())
    cal["in_process"]["min_effect"], cal["in_process"]["floor_us"] = 0.99, 1e6
    pyproject = '[tool.kernel-harness.gate]\nmin-effect = 0.99\ncalibration = "harness/gate/calibration.json"\n'
    repo, base, pr = pull_request(tmp_path, {"kernels/tiny.py": SLOWER, "pyproject.toml": pyproject,
                                             "harness/gate/calibration.json": json.dumps(cal)})
    _, doc = trusted(repo, tmp_path / "gate", base, pr)
    case, calibrated = only_case(doc), default_threshold(IN_PROCESS)
    assert (case["threshold"]["relative"], case["threshold"]["floor_us"]) == (calibrated.relative, calibrated.floor_us)
    assert case["verdict"] == "SLOWER"
    # The control: the same pull request checked out and gated the old way (its own working tree and
    # configuration) reads its own calibration, and the slowdown passes.
    _git(repo, "checkout", "-q", pr)
    _, untrusted = gate(repo, tmp_path / "untrusted", base, "--no-isolate")
    assert only_case(untrusted)["threshold"]["relative"] == 0.99 and only_case(untrusted)["verdict"] != "SLOWER"
    print(f"REDTEAM edit-calibration: no effect: the trusted gate used {100 * calibrated.relative:g}% / "
          f"{calibrated.floor_us:.3f} us ({calibrated.source[:60]}) and said {case['verdict']}; the PR's own "
          f"checkout would have used 99% and said {only_case(untrusted)['verdict']}")


# ----------------------------------------------------------------------------- kernel code against the timing

HOST_CLOCK_PATCH = '''
import time as _time

_real_clock = _time.perf_counter_ns
_hidden = [0]


def _clock():  # the host clock, minus the time spent in this kernel
    return _real_clock() - _hidden[0]


_time.perf_counter_ns = _clock


def scale_fast(*, x, w, out):
    start = _real_clock()
    out.copy_(x * w * FACTOR)
    _hidden[0] += _real_clock() - start
'''
EVENT_PATCH = '''
_elapsed = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: 0.5 * _elapsed(self, end)  # every timed span halved
'''


@pytest.mark.parametrize("patch, what", [
    pytest.param(HOST_CLOCK_PATCH, "time.perf_counter_ns", id="host-clock"),
    pytest.param(EVENT_PATCH, "Event.elapsed_time", id="cuda-event", marks=pytest.mark.skipif(
        not GPU, reason="needs a CUDA device: a CPU gate times with the host clock and never reads CUDA events")),
])
def test_timer_monkeypatch_is_caught(tmp_path, patch, what):
    repo, base, pr = pull_request(tmp_path, {"kernels/tiny.py": KERNEL + patch})
    done, doc = trusted(repo, tmp_path / "gate", base, pr)
    case = only_case(doc)
    assert case["verdict"] == "WRONG" and what in case["reason"] and done.returncode == 1, case
    assert "timing or checking code changed" in case["reason"]
    scan = [f for f in doc["comparison"]["scan"] if f["category"] == "monkeypatch" and not f["in_base"]]
    assert any(what in f["what"] for f in scan), scan
    print(f"REDTEAM monkeypatch-timer: caught: {what} patched at import, WRONG: {case['reason'][:160]}; "
          f"the static scan lists {scan[0]['path']}:{scan[0]['line']} {scan[0]['what']}")


CACHED = KERNEL + '''

_calls, _kept = [0], {}


def scale_fast(*, x, w, out):  # honest while the checks run, then the first result these buffers gave
    _calls[0] += 1
    key = (x.data_ptr(), w.data_ptr(), out.data_ptr())
    if _calls[0] > 60 and key in _kept:
        out.copy_(_kept[key])
        return
    out.copy_(x * w * FACTOR)
    _kept.setdefault(key, out.clone())
'''


def test_cached_output_is_caught(tmp_path):
    repo, base, pr = pull_request(tmp_path, {"kernels/tiny.py": CACHED})
    done, doc = trusted(repo, tmp_path / "gate", base, pr)
    case = only_case(doc)
    assert case["verdict"] == "WRONG" and "whose inputs got new values" in case["reason"] and done.returncode == 1, case
    print(f"REDTEAM cached-output: caught: WRONG while timing: {case['reason'][:170]}")
