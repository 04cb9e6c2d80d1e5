"""The compile matrix's findings in Liger (known_defects.toml, [[matrix]]): Triton's real compiler, no GPU needed.

About a minute per kernel and target on a 2-core machine, so only with KH_LIGER_MATRIX=1:
`KH_LIGER_MATRIX=1 pytest tests/test_matrix.py`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MATRIX = tomllib.loads((ROOT / "known_defects.toml").read_text(encoding="utf-8")).get("matrix", [])

pytestmark = pytest.mark.skipif(os.environ.get("KH_LIGER_MATRIX") != "1",
                                reason="the compile matrix takes minutes: KH_LIGER_MATRIX=1 runs it")


@pytest.mark.parametrize("defect", MATRIX, ids=[d["id"] for d in MATRIX])
def test_the_matrix_still_finds_it(defect, tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "matrix", "--kernel", defect["kernel"], "--arch",
                           defect["arch"], "--out", str(tmp_path / "matrix.json")], cwd=ROOT, capture_output=True,
                          text=True, timeout=1800)
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBLEM: ")]
    for pattern in defect["problems"]:
        assert any(re.search(pattern, line) for line in lines), f"{defect['id']}: no problem matches {pattern!r}:\n" + \
            "\n".join(lines)
