"""known_defects.toml is consistent with the specs, checked without running a kernel.

The harness's known-defects plugin ([tool.kernel-harness] known-defects) reads the file when pytest starts and
checks it against the generated items once they are collected: every items pattern names an item, every exact
item is generated. A collection of the specs alone is that check; the full `pytest` here is where each defect is
found, as an expected failure with its message.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_known_defects_name_generated_items():
    done = _run("-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "specs")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_adapters_and_references_take_the_specs_arguments():
    """What `python -m harness validate` checks, for every spec: each implementation's keyword parameters are
    the spec's tensors and params."""
    done = _run("-m", "harness", "validate")
    assert done.returncode == 0, done.stdout + done.stderr
