"""Tolerances that grow with the case (``atol = "1e-5 + 1e-6 * K"``): evaluated per case, validated with one-line
errors, and tight enough that planted GEMM accumulation bugs (tests/planted/gemm_kernels.py) fail the generated
checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness.correctness.numerics import mismatch, norm_floor
from harness.spec.load import load as load_spec
from harness.spec.model import Case
from harness.spec.schema import SpecError
from tests.e2e import planted_spec, run_all

SPECS = Path(__file__).resolve().parent / "specs"
ROOT = Path(__file__).resolve().parent.parent


def variant(tmp_path: Path, old: str, new: str, impl: str = "matmul") -> Path:
    """tests/specs/planted_matmul.toml with its correct kernel and ``old`` replaced by ``new`` (each must occur)."""
    text = (SPECS / "planted_matmul.toml").read_text().replace("{impl}", impl)
    assert old in text
    path = tmp_path / "planted_matmul.toml"
    path.write_text(text.replace(old, new))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    return exc.value.problems


def case(spec, **given) -> Case:
    return next(c for cases in spec.cases.values() for c in cases if c.values == given)


def test_an_expression_bound_is_evaluated_at_each_case(tmp_path):
    spec = planted_spec(tmp_path, "planted_matmul", "matmul")
    small, large = case(spec, M=33, N=65, K=129, epilogue=1), case(spec, M=16, N=32, K=4100, epilogue=1)
    assert spec.tolerance("bf16", "c", small).atol == pytest.approx(1e-5 + 1e-6 * 129)
    assert spec.tolerance("fp16", "c", large).atol == pytest.approx(1e-5 + 1e-6 * 4100)
    assert spec.tolerance("fp16", "c", large).rtol == 1e-3  # the fields not given keep the dtype's default
    assert spec.tolerance("bf16", "c").atol == pytest.approx(1e-5 + 1e-6 * 4100)  # no case: the loosest of the spec's
    assert spec.tolerances["bf16"].describe() == "rtol=0.016 atol=1e-5 + 1e-6 * K"


def test_the_evaluated_bound_decides_the_comparison(tmp_path):
    """The same absolute error of 2e-3 on outputs near zero: within the bound at K = 4100, outside it at K = 129."""
    ref = torch.zeros(4, 8, dtype=torch.float32)
    ref[:, 0] = 100.0  # keeps the normwise bound out of it: the rows' norms are large
    got = (ref + 2e-3).to(torch.float16)
    tol = planted_spec(tmp_path, "planted_matmul", "matmul").tolerances["fp16"]
    assert mismatch(got, ref, tol.at({"K": 4100})) is None
    problem = mismatch(got, ref, tol.at({"K": 129}))
    assert problem and "outside atol=0.000139 rtol=0.001" in problem


def test_a_tensors_own_tolerance_may_scale_too(tmp_path):
    path = variant(tmp_path, 'shape = ["M", "N"]',
                   'shape = ["M", "N"]\ntolerance = { atol = "2e-6 * K", reason = "fp32 accumulation over K" }')
    spec = load_spec(path)
    assert spec.tolerance("fp16", "c", case(spec, M=64, N=64, K=1000, epilogue=0)).atol == pytest.approx(2e-3)


BF16 = ('atol = "1e-5 + 1e-6 * K"\nreason = "fp32 accumulation over K terms in another order than the reference: '
        'absolute error grows with K"\n\n[tolerance.fp16]')  # the spec's [tolerance.bf16] body


@pytest.mark.parametrize("old, new, expected", [
    (BF16, 'atol = "1e-6 * Q"\nreason = "x"\n\n[tolerance.fp16]',
     'planted_matmul.toml: tolerance.bf16.atol: expected a number, got "1e-6 * Q" (or an expression over the '
     "case's symbols: undefined symbol 'Q')"),
    (BF16, 'norm_rtol = "1e-3 *"\nreason = "x"\n\n[tolerance.fp16]',
     'planted_matmul.toml: tolerance.bf16.norm_rtol: expected a number, got "1e-3 *" (or an expression over the '
     "case's symbols: cannot parse '1e-3 *'"),
    (BF16, 'atol = "1e-6 * (K - 2)"\nreason = "x"\n\n[tolerance.fp16]',
     "planted_matmul.toml: cases.edge (M=33,N=65,K=0,epilogue=1): tolerance.bf16.atol '1e-6 * (K - 2)' = -2e-06: a "
     "bound must be a finite number >= 0"),
    (BF16, 'atol = "1e-6 * K"\n\n[tolerance.fp16]',
     "planted_matmul.toml: tolerance.bf16: scales its bounds with the case without a reason"),
    (BF16, 'max_mismatch = "K"\nmismatch_atol = 1\nreason = "x"\n\n'
     '[tolerance.fp16]', 'planted_matmul.toml: tolerance.bf16.max_mismatch: expected a number, got "K"'),
])
def test_bad_expression_bounds_are_one_line_errors_naming_file_and_key(tmp_path, old, new, expected):
    found = problems(variant(tmp_path, old, new))
    assert any(expected in p for p in found), found
    assert all("\n" not in p for p in found)


def test_validate_exits_2_on_an_unknown_symbol_in_a_bound(tmp_path):
    path = variant(tmp_path, 'atol = "1e-5 + 1e-6 * K"\nreason = "fp32', 'atol = "1e-5 + 1e-6 * KK"\nreason = "fp32')
    run = subprocess.run([sys.executable, "-m", "harness", "validate", str(path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert (f'{path}: tolerance.bf16.atol: expected a number, got "1e-5 + 1e-6 * KK" (or an expression over the '
            "case's symbols: undefined symbol 'KK' (did you mean 'K'?))") in run.stdout + run.stderr


def test_the_normwise_floor_allows_for_flushed_fp32_subnormals(tmp_path):
    """A GEMM row of one column whose gelu tail is below fp32's normal range: a GPU flushes it to zero."""
    ref = torch.tensor([[-3.0e-39]], dtype=torch.float32)
    got = torch.zeros(1, 1, dtype=torch.bfloat16)
    assert norm_floor(1, torch.bfloat16) == torch.finfo(torch.float32).smallest_normal
    assert norm_floor(4, torch.float16) == 2 * torch.finfo(torch.float16).smallest_normal * torch.finfo(
        torch.float16).eps  # fp16's own subnormals are exact conversions: unchanged
    spec = planted_spec(tmp_path, "planted_matmul", "matmul")
    assert mismatch(got, ref, spec.tolerances["bf16"].at({"K": 0})) is None
    assert mismatch(torch.full((1, 1), -3.0e-30, dtype=torch.bfloat16), torch.tensor([[-1.0e-30]]),
                    spec.tolerances["bf16"].at({"K": 0})) is not None  # normal values are still compared


def test_correct_gemm_passes_at_the_k_scaled_bound(tmp_path):
    assert run_all(planted_spec(tmp_path, "planted_matmul", "matmul")) == {}


@pytest.mark.parametrize("impl", ["matmul_drops_k_tail", "matmul_16bit_accumulator"])
def test_planted_gemm_bugs_fail_numerics_in_every_dtype(tmp_path, impl):
    """Dropping the ragged last K block, or rounding the accumulator to 16 bits after every 32-deep block: both
    fail the elementwise bound at K = 1000 (atol 1.01e-3) in fp16 and bf16."""
    spec = planted_spec(tmp_path, "planted_matmul", impl)
    failures = run_all(spec, tiers=("ci",))
    assert sorted(failures) == [(d, "numerics") for d in sorted(spec.dtypes)], failures
    for dtype in spec.dtypes:
        messages = failures[(dtype, "numerics")]
        ragged = [m for m in messages if m.startswith("M=64,N=64,K=1000,epilogue=0: ")]
        assert ragged and f"outside atol=0.00101 rtol={1e-3 if dtype == 'fp16' else 0.016:g}" in ragged[0], messages
