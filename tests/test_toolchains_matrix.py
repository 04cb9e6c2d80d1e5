"""``matrix --triton 3.6.0,3.9.0`` for real, on planted kernels using a real API difference between the two
releases (tests/planted/toolchain_kernels.py): each is caught, with a message naming both releases.

One of the two releases is installed into the release cache (``$KH_TOOLCHAINS_CACHE``, else the user cache)
the first time, from the package index: triton 3.6.0 where 3.9.0 runs the tests (this machine), 3.9.0 where
3.6.0 does (the GPU machine). The other is the running environment's own. Also: recording launches works
under the releases before 3.6 (the interpreter's ``run`` and Triton's Python specialisation).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.aot import toolchains
from harness.steps import BadInput
from tests.test_matrix import SPEC as MATRIX_SPEC

REPO = Path(__file__).resolve().parents[1]
RELEASES = ("3.6.0", "3.9.0")
SPEC = MATRIX_SPEC.replace("tests.planted.aot_kernels", "tests.planted.toolchain_kernels")  # same shape, these kernels


@pytest.fixture(scope="module")
def releases_built():
    """Both releases, built once (or found in the cache); a skip, with pip's reason, where one cannot be."""
    try:
        return [toolchains.ensure(toolchains.Release("triton", v), toolchains.cache_root()) for v in RELEASES]
    except BadInput as exc:
        pytest.skip(f"a release of {', '.join(RELEASES)} is not installable here: {exc}")


def _matrix(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    for name in ("unsqueeze_copy", "advance_copy"):
        (specs / f"{name}.toml").write_text(SPEC.format(name=name))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "harness", "matrix", "--triton", ",".join(RELEASES),
                           "--specs", str(specs), "--arch", "sm_90,gfx942", "--jobs", "1", "--out", str(out), *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    doc = json.loads((out / "toolchains.json").read_text()) if (out / "toolchains.json").is_file() else {}
    return proc, doc


@pytest.mark.slow
def test_a_kernel_that_compiles_under_one_release_and_not_the_other_is_caught(releases_built, tmp_path):
    proc, doc = _matrix(tmp_path, "--fail-on-regression")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    flagged = [ln for ln in proc.stdout.splitlines() if ln.startswith("FLAGGED: ")]
    for arch in ("sm_90", "gfx942"):
        assert any(ln.startswith(f"FLAGGED: unsqueeze_copy {arch} unsqueeze_copy_kernel") and
                   "compiles with triton 3.9.0, fails with triton 3.6.0" in ln and "unsqueeze" in ln
                   for ln in flagged), out
        assert any(ln.startswith(f"FLAGGED: advance_copy {arch} advance_copy_kernel") and
                   "compiles with triton 3.6.0, fails with triton 3.9.0" in ln and "Block pointers" in ln
                   for ln in flagged), out
    assert len(flagged) == 4, out
    assert doc["releases"] == ["triton 3.6.0", "triton 3.9.0"]
    assert {(f["kernel"], f["kind"]) for f in doc["findings"]} == {("unsqueeze_copy", "compile"),
                                                                   ("advance_copy", "compile")}
    page = (tmp_path / "out" / "toolchains.md").read_text()
    assert "## Flagged: 4" in page and "| **advance_copy** | sm_90 | 1 → 0/1 |" in page
    for release in RELEASES:  # each release's own matrix: its figures per config, and what compiled it
        matrix = json.loads((tmp_path / "out" / f"triton-{release}" / "matrix.json").read_text())
        assert matrix["toolchain"]["triton"] == release
        ok = [r for r in matrix["rows"] if r["status"] == "ok"]
        assert len(ok) == 2 and all(r["code_bytes"] > 0 and r["occupancy"] > 0 for r in ok), matrix["rows"]


@pytest.mark.slow
def test_reported_only_unless_told_to_fail(releases_built, tmp_path):
    proc, doc = _matrix(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(doc["findings"]) == 4 and "reported only" in proc.stdout


RECORD = """
import json, sys
from harness.spec.imports import use_interpreter_if_no_gpu
use_interpreter_if_no_gpu()
import torch
from harness.aot.launches import record_launches
from tests.planted import aot_kernels as k
x = torch.empty(3000, device="meta")
recs = record_launches(k.tuned_copy, {"x": x, "out": x}) + record_launches(k.scale_add, {"x": x, "y": x, "out": x})
print(json.dumps([[r.kernel_name, r.config_label(), sorted(r.divisible_by_16)] for r in recs]))
"""


@pytest.mark.slow
def test_launches_record_alike_under_a_release_before_3_6(tmp_path):
    """3.5 has no native_specialize_impl and an interpreter whose `run` is an instance attribute."""
    try:
        old = toolchains.ensure(toolchains.Release("triton", "3.5"), toolchains.cache_root())
    except BadInput as exc:
        pytest.skip(f"triton 3.5 is not installable here: {exc}")
    got = {}
    for name, overlays in (("old", [old]), ("here", [])):
        env = {**toolchains.child_env(overlays), "TRITON_INTERPRET": "1"}  # interpreted on a GPU machine too
        proc = subprocess.run([sys.executable, "-c", RECORD], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got[name] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["old"] == got["here"] and len(got["here"]) == 3, got
