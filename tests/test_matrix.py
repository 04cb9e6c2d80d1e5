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
