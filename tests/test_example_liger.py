"""examples/liger, the harness adopted by another project (Liger-Kernel 0.8.5 from the package index), seen from
this repository: its specs validate against this checkout's harness and its list of known Liger defects is
consistent with them, without Liger (its adapters import it only when called).

The example's generated tests need liger-kernel==0.8.5: .ci/run runs them from this repository's wheel in a
fresh venv, outside the checkout. Here they run only where liger_kernel imports (the slow test).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "liger"
LIGER = importlib.util.find_spec("liger_kernel") is not None and importlib.metadata.version("liger-kernel") == "0.8.5"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=EXAMPLE, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def test_the_examples_specs_validate():
    done = _run("-m", "harness", "validate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": ok (") >= 8, done.stdout  # at least eight of Liger's kernels


def test_the_examples_known_defects_are_consistent_with_its_specs():
    done = _run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_known_defects.py")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_ci_step_runs_the_example_outside_the_checkout():
    text = (EXAMPLE.parents[1] / ".ci" / "run").read_text()
    step = text[text.index("# ---- examples/liger:"):text.index("# ---- end of examples/liger")]
    for needed in ("pip wheel", "-m venv", "torch==2.13.0", "liger-kernel==0.8.5",
                   'cp -r examples/liger "$liger/example"', 'cd "$liger/example"', "env -u PYTHONPATH"):
        assert needed in step, needed
    assert step.index("torch==2.13.0") < step.index("liger-kernel==0.8.5")  # torch first: no CUDA build pulled


@pytest.mark.slow
@pytest.mark.skipif(not LIGER, reason="needs liger-kernel==0.8.5 (.ci/run installs it in a venv of its own)")
def test_the_examples_generated_tests_find_the_known_defects_and_nothing_else():
    done = _run("-m", "pytest", "-q", "-p", "no:cacheprovider", timeout=1800)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    assert " xfailed" in done.stdout and " failed" not in done.stdout.replace(" xfailed", ""), done.stdout[-3000:]
