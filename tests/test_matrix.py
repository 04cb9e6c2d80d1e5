"""`python -m harness matrix` on planted kernels: a spill and a one-architecture compile error fail it."""

from __future__ import annotations

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


def test_default_targets_are_nvidia_and_amd():
    from harness.spec.archs import DEFAULT_ARCHS

    assert DEFAULT_ARCHS == ("sm_80", "sm_90", "sm_100", "gfx942", "gfx950")


def test_a_launch_two_backends_share_compiles_once_per_target(monkeypatch):
    """matmul's triton_tma (sm_90+) records the pointer kernel's launches too: the second backend, which also
    claims sm_80, gets the shared results for sm_90 and compiles only sm_80, and nothing is lost or doubled."""
    from types import SimpleNamespace

    import harness.aot.triton as aot_triton
    from harness.cli import matrix

    calls = []

    def fake_compile_all(records, archs, jobs=None):
        calls.append(([r.kernel_name for r in records], tuple(archs)))
        return [SimpleNamespace(record=r, arch=a) for r in records for a in archs]

    monkeypatch.setattr(aot_triton, "compile_all", fake_compile_all)
    rec = lambda name: SimpleNamespace(kernel_name=name, constexprs={}, specialised=(), num_warps=4, num_stages=3,
                                       signature={})
    shared, tma, ptr_only = rec("pointer"), rec("persistent"), rec("pointer_small")
    compiled = {}
    first, fresh1 = matrix.compile_once([tma, shared], ("sm_90",), compiled, "matmul", None)
    assert [(r.record.kernel_name, r.arch) for r in first] == [("persistent", "sm_90"), ("pointer", "sm_90")]
    assert len(fresh1) == 2
    second, fresh2 = matrix.compile_once([shared, ptr_only], ("sm_80", "sm_90"), compiled, "matmul", None)
    assert [(r.record.kernel_name, r.arch) for r in second] == [
        ("pointer", "sm_80"), ("pointer", "sm_90"), ("pointer_small", "sm_80"), ("pointer_small", "sm_90")]
    assert calls[1:] == [(["pointer"], ("sm_80",)), (["pointer_small"], ("sm_80", "sm_90"))]
    assert second[1] is first[1] and id(second[1]) not in fresh2 and len(fresh2) == 3
