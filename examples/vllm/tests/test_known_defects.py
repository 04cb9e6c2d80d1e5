"""known_defects.toml is consistent with the specs, checked without running a kernel.

The harness's known-defects plugin ([tool.kernel-harness] known-defects) reads its [[defect]] entries when pytest
starts and checks them against the generated items once they are collected: every items pattern names an item,
every exact item is generated. A collection of the specs alone is that check; the full `pytest` here is where each
defect is found, as an expected failure with its message. The [[bench]] and [[matrix]] entries are this project's
own (tests/test_bench_findings.py, tests/test_matrix.py): checked here against the specs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.plugin.known_defects import read
from harness.spec.load import load

ROOT = Path(__file__).resolve().parents[1]
KNOWN = read(ROOT / "known_defects.toml")
SPECS = {p.stem: load(p) for p in sorted((ROOT / "specs").glob("*.toml"))}


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_the_known_defects_name_generated_items():
    done = _run("-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "specs")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_the_ids_are_unique():
    ids = [d["id"] for table in ("defect", "bench") for d in KNOWN.get(table, [])]
    assert len(ids) == len(set(ids)), ids


@pytest.mark.parametrize("finding", KNOWN.get("bench", []), ids=lambda f: f["id"])
def test_every_bench_finding_names_a_peer_and_a_cpu_case_of_its_spec(finding):
    spec = SPECS[finding["kernel"]]
    assert finding["provider"] in spec.peers, f"{finding['id']}: {finding['provider']} is not a peer of {spec.name}"
    assert finding["dtype"] in spec.dtypes
    assert finding["case"] in {c.id for c in spec.cases["cpu"]}, f"{finding['id']}: no cpu-tier case {finding['case']}"
    assert re.search(finding["match"], finding["exact"]), f"{finding['id']}: exact does not match match"


def test_the_adapters_and_references_take_the_specs_arguments():
    """What `python -m harness validate` checks, for every spec: each implementation's keyword parameters are
    the spec's tensors and params."""
    done = _run("-m", "harness", "validate")
    assert done.returncode == 0, done.stdout + done.stderr
