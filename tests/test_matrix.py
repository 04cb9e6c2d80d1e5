"""`python -m harness matrix` on planted kernels: a spill and a one-architecture compile error fail it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import main

SPEC = """
[kernel]
name = "{name}"
reference = "tests.planted.aot_kernels:copy_ref"
dtypes = ["fp32"]
layouts = ["padded", "strided", "transposed"]

[backends.triton]
impl = "tests.planted.aot_kernels:{name}"
requires = ["triton"]

[inputs.x]
shape = ["rows", "cols"]

[outputs.out]
shape = ["rows", "cols"]

[cases.edge]
base = {{ rows = 2, cols = 8192 }}
vary = {{ rows = [0, 1, 3] }}
"""


@pytest.mark.parametrize("name, arch, problem", [
    ("spill", "sm_90", "spill"),
    ("to_fp8", "sm_80", "compile error"),
])
def test_matrix_fails_on_planted_kernel(tmp_path, capsys, name, arch, problem):
    (tmp_path / f"{name}.toml").write_text(SPEC.format(name=name))
    code = main(["matrix", "--specs-dir", str(tmp_path), "--arch", arch])
    out = capsys.readouterr().out
    assert code == 1, out
    assert any(line.startswith("PROBLEM:") and problem in line for line in out.splitlines()), out


@pytest.mark.slow
def test_matrix_passes_and_prints_the_table():
    # A fresh process, as `nox -s matrix` runs it: in a process where the Triton interpreter has already run a
    # kernel (other tests here do), Triton 3.9 fails to compile jit helpers that return tuples afterwards.
    proc = subprocess.run([sys.executable, "-m", "harness", "matrix", "--kernel", "softmax", "--arch", "sm_90"],
                          cwd=Path(__file__).parents[1], capture_output=True, text=True, timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "regs" in out and "spills st/ld" in out and "smem" in out
    assert "softmax:" in out and "0 problem(s)" in out


def test_bad_arch_is_one_line(capsys):
    assert main(["matrix", "--arch", "sm_90,mi300"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--arch" in err[0] and "'mi300'" in err[0], err


def test_without_arch_the_matrix_compiles_for_nvidia_and_amd(tmp_path, monkeypatch, capsys):
    import harness.aot.triton as aot_triton
    from harness.spec.archs import is_amd

    asked = []
    monkeypatch.setattr(aot_triton, "compile_all", lambda records, archs, jobs=None: asked.append(tuple(archs)) or [])
    (tmp_path / "spill.toml").write_text(SPEC.format(name="spill"))
    assert main(["matrix", "--specs-dir", str(tmp_path), "--out", str(tmp_path / "m.json")]) == 0, capsys.readouterr()
    (archs,) = asked
    assert {is_amd(a) for a in archs} == {True, False}, archs
    doc = json.loads((tmp_path / "m.json").read_text())
    assert tuple(doc["archs"]) == archs and {e["arch"] for e in doc["entries"]} == set(archs)
    assert f"x archs ({', '.join(archs)})" in capsys.readouterr().out


def test_a_launch_two_backends_share_compiles_once_per_target(monkeypatch):
    """matmul's triton_tma (sm_90+) records the pointer kernel's launches too: the second backend, which also
    claims sm_80, gets the shared results for sm_90 and compiles only sm_80, and nothing is lost or doubled."""
    from types import SimpleNamespace

    import harness.aot.triton as aot_triton
    from harness.aot import workflow

    calls = []

    def fake_compile_all(records, archs, jobs=None):
        calls.append(([r.kernel_name for r in records], tuple(archs)))
        return [SimpleNamespace(record=r, arch=a) for r in records for a in archs]

    monkeypatch.setattr(aot_triton, "compile_all", fake_compile_all)
    rec = lambda name: SimpleNamespace(kernel_name=name, constexprs={}, specialised=(), num_warps=4, num_stages=3,
                                       signature={})
    shared, tma, ptr_only = rec("pointer"), rec("persistent"), rec("pointer_small")
    compiled = {}
    first, fresh1 = workflow.compile_once([tma, shared], ("sm_90",), compiled, "matmul", None)
    assert [(r.record.kernel_name, r.arch) for r in first] == [("persistent", "sm_90"), ("pointer", "sm_90")]
    assert len(fresh1) == 2
    second, fresh2 = workflow.compile_once([shared, ptr_only], ("sm_80", "sm_90"), compiled, "matmul", None)
    assert [(r.record.kernel_name, r.arch) for r in second] == [
        ("pointer", "sm_80"), ("pointer", "sm_90"), ("pointer_small", "sm_80"), ("pointer_small", "sm_90")]
    assert calls[1:] == [(["pointer"], ("sm_80",)), (["pointer_small"], ("sm_80", "sm_90"))]
    assert second[1] is first[1] and id(second[1]) not in fresh2 and len(fresh2) == 3
