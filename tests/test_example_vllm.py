"""examples/vllm, the harness adopted on vLLM's pure-Triton kernels (vendored, as vLLM does not install on a CPU
machine), seen from this repository: its specs validate against this checkout's harness and its list of known
vLLM defects is consistent with them.

The example's generated tests and its bench run in .ci/run from this repository's wheel in a fresh venv, outside
the checkout (about a minute on the 2-core machine), so here they run only when asked: KH_VLLM_EXAMPLE=1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "vllm"
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
SPECS = sorted(p.stem for p in (EXAMPLE / "specs").glob("*.toml"))


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=EXAMPLE, env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def _ci_block(name: str) -> str:
    text = (EXAMPLE.parents[1] / ".ci" / "run").read_text()
    return text[text.index(f"# ---- examples/{name}:"):text.index(f"# ---- end of examples/{name}")]


def test_the_examples_specs_validate():
    done = _run("-m", "harness", "validate")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("per_token_group_quant_fp8", "per_token_group_quant_fp8_batched", "rms_norm_gated"):
        assert f"specs/{name}.toml: ok (" in done.stdout, done.stdout
    assert done.stdout.count(": ok (") == len(SPECS), done.stdout


def test_every_vendored_file_names_its_vllm_source_and_commit():
    for path in (EXAMPLE / "kh_vllm").glob("*.py"):
        head = path.read_text().splitlines()[:12]
        if not any("Vendored from vLLM" in line for line in head):
            continue
        assert head[0] == "# SPDX-License-Identifier: Apache-2.0", path.name
        assert any("https://github.com/vllm-project/vllm" in line for line in head), path.name
        assert any("at commit " in line and len(line.split("at commit ")[1].split()[0].strip(":,")) == 40
                   for line in head), f"{path.name}: no 40-digit commit"


def test_the_examples_known_defects_are_consistent_with_its_specs():
    done = _run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_known_defects.py")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_ci_step_runs_the_example_and_its_bench_outside_the_checkout():
    step, setup = _ci_block("vllm"), _ci_block("liger")  # liger's block builds the venv and wheel both reuse
    # the examples' python: the venv's, with this checkout kept off the path
    assert re.search(r'^example=\(env -u PYTHONPATH [^)]*"\$liger_venv/venv/bin/python"\)', setup, re.M), setup
    assert "pip wheel" in setup and "-m venv" in setup
    python = '"${example[@]}"'
    pytest_cmd = f'cd "$vllm/example" && {python} -m pytest -q -p no:cacheprovider'
    bench_cmd = f'cd "$vllm/example" && {python} -m harness bench'
    for needed in ('cp -r examples/vllm "$vllm/example"', pytest_cmd, bench_cmd, 'test -s "$vllm/bench/report.md"'):
        assert needed in step, needed
    assert step.index(pytest_cmd) < step.index(bench_cmd)
    assert f'cd "$liger/example" && {python} -m harness bench' in setup, "liger's bench from its temporary copy"


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("KH_VLLM_EXAMPLE") != "1",
                    reason="about a minute on a 2-core machine; .ci/run runs it from the wheel (KH_VLLM_EXAMPLE=1)")
def test_the_examples_generated_tests_find_the_known_defects_and_nothing_else():
    done = _run("-m", "pytest", "-q", "-p", "no:cacheprovider", timeout=1800)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    assert " xfailed" in done.stdout and " failed" not in done.stdout.replace(" xfailed", ""), done.stdout[-3000:]
