"""The compile matrix's findings in the vendored vLLM kernels (known_defects.toml, [[matrix]]): Triton's real compiler,
no GPU needed. Every spec is compiled for each [[matrix]] target; each recorded problem must still be found and
every problem must be a recorded one. About 15 s for sm_90 on a 2-core machine, so only when asked:
`KH_VLLM_MATRIX=1 pytest tests/test_matrix.py`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.plugin.known_defects import read

ROOT = Path(__file__).resolve().parents[1]
KNOWN = read(ROOT / "known_defects.toml")  # its [[bench]] and [[matrix]]: this project's own tables
MATRIX = KNOWN.get("matrix", [])

pytestmark = pytest.mark.skipif(os.environ.get("KH_VLLM_MATRIX") != "1",
                                reason="the compile matrix takes a while: KH_VLLM_MATRIX=1 runs it")


@pytest.mark.parametrize("arch", sorted({m["arch"] for m in MATRIX}))
def test_the_matrix_finds_the_recorded_problems_and_no_other(arch, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-m", "harness", "matrix", "--arch", arch, "--out",
                           str(tmp_path / "matrix.json")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBLEM: ")]
    patterns = [p for m in MATRIX if m["arch"] == arch for p in m["problems"]]
    for pattern in patterns:
        assert any(re.search(pattern, line) for line in lines), f"no problem matches {pattern!r}:\n" + "\n".join(lines)
    other = [line for line in lines if not any(re.search(p, line) for p in patterns)]
    assert not other, "problems not in known_defects.toml:\n" + "\n".join(other)
