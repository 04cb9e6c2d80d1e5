"""FP8 in the spec language (``dtype = "fp8_e4m3"``, ``[roofline] compute = "fp8"``) and the FP8 GEMM's checks:
values saturate instead of overflowing to NaN, the reference sees fp32, poison and pads are NaNs the format
has, the roofline takes the FP8 ceiling, and planted FP8 bugs (tests/planted/fp8_kernels.py) fail the
generated checks of specs/matmul_fp8.toml while the shipped kernel passes them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.bench.roofline import roofline
from harness.correctness.args import make_args, reference_dtype
from harness.correctness.poison import PADS, POISON
from harness.spec.load import load as load_spec
from harness.spec.schema import SpecError
from tests.e2e import run_all, spec_variant, with_backend

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "specs" / "matmul_fp8.toml"


def variant(tmp_path: Path, old: str, new: str) -> Path:
    return spec_variant(tmp_path, "matmul_fp8", old, new)


def planted(tmp_path: Path, impl: str):
    return with_backend(tmp_path, "matmul_fp8", "kernels.matmul_fp8:matmul_fp8", f"tests.planted.fp8_kernels:{impl}")


def test_unknown_fp8_dtype_and_compute_precision_are_one_line_errors(tmp_path):
    path = variant(tmp_path, 'shape = ["M", "K"]\ndtype = "fp8_e4m3"', 'shape = ["M", "K"]\ndtype = "fp8_e4m3fn"')
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert [p.split("/")[-1] for p in exc.value.problems] == [
        "matmul_fp8.toml: inputs.a.dtype: unknown dtype \"fp8_e4m3fn\" (did you mean 'fp8_e4m3'?)"]
    path = variant(tmp_path, 'compute = "fp8"', 'compute = "fp9"')
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert [p.split("/")[-1] for p in exc.value.problems] == [
        "matmul_fp8.toml: roofline.compute: unknown precision \"fp9\" (did you mean 'fp8'?) (one of bf16, fp16, "
        "tf32, fp32, fp8)"]


def test_fp8_inputs_saturate_and_reach_the_reference_in_fp32(tmp_path):
    path = variant(tmp_path, 'shape = ["M", "K"]\ndtype = "fp8_e4m3"',
                   'shape = ["M", "K"]\ndtype = "fp8_e4m3"\nvalues = "normal(0, 1000)"')
    spec = load_spec(path)
    case = next(c for c in spec.cases["ci"] if c.values["M"] == 64)
    a = make_args(spec, case, "bf16", "cpu", 7).tensors["a"]
    assert a.dtype == torch.float8_e4m3fn
    values = a.float()
    assert not values.isnan().any()
    assert values.abs().max().item() == 448.0  # clamped to e4m3's largest finite value, not NaN
    assert reference_dtype(torch.float8_e4m3fn, "bf16") == torch.float32
    assert reference_dtype(torch.float8_e5m2, "fp32") == torch.float64


def test_fp8_poisons_and_pads_are_distinct_nans():
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        one = torch.empty(1, dtype=dtype)
        first, second = POISON[0][dtype], POISON[1][dtype]
        assert first != second
        for pattern in (first, second, *(p[dtype] for p in PADS)):
            one.view(torch.uint8).fill_(pattern)
            assert one.float().isnan().all(), (dtype, hex(pattern))
    assert len({p[torch.float8_e5m2] for p in PADS}) == 4  # e5m2 has six NaNs: neighbouring tensors differ


def test_the_fp8_roofline_uses_the_measured_fp8_rate_not_bf16():
    spec = load_spec(SPEC)
    case = next(c for c in spec.cases["bench"] if c.headline)
    env = {**spec.env(case), "bytes_a": 4096 * 4096, "bytes_b": 4096 * 4096, "bytes_scale_a": 4, "bytes_scale_b": 4,
           "bytes_c": 2 * 4096 * 4096}
    ceilings = {"matmul_tflops": {"bf16": 700.0, "fp8": 1400.0}, "bandwidth_gbps": {"copy": 4000.0},
                "copy_gbps": 4000.0}
    us = 2 * 4096 ** 3 / 1000e12 * 1e6  # 1000 TFLOP/s
    roof = roofline(spec, env, us, ceilings, "bf16")
    assert roof["compute"] == "fp8" and roof["bound"] == "compute"
    assert roof["pct_roofline"] == pytest.approx(100 * 1000 / 1400, rel=1e-3)


def test_the_shipped_fp8_kernel_passes_its_generated_checks(tmp_path):
    assert run_all(planted(tmp_path, "matmul_fp8")) == {}


@pytest.mark.parametrize("impl, check, where", [
    ("first_scale_only", "numerics", "per_row=1"),
    ("e5m2_bits", "numerics", "K="),
    ("drops_k_tail", "numerics", "K=129"),
    ("bf16_accumulator", "numerics", "K=1000"),
])
def test_planted_fp8_bugs_fail_the_generated_checks(tmp_path, impl, check, where):
    failures = run_all(planted(tmp_path, impl))
    assert ("bf16", check) in failures, failures
    assert any(where in line for line in failures["bf16", check]), failures["bf16", check]


def test_the_matrix_calls_a_target_below_the_backends_minimum_not_applicable():
    from harness.aot.summary import unclaimed_nvidia

    targets = ("sm_80", "sm_90", "sm_100", "gfx942")
    assert unclaimed_nvidia(("cpu", ">=sm_90"), targets) == ("sm_80",)  # FP8 tensor cores: not on sm_80
    assert unclaimed_nvidia(("cpu", ">=sm_80", "rocm"), targets) == ()
    assert unclaimed_nvidia(("cpu",), targets) == ()  # claims no NVIDIA target: compiled everywhere, as before


def test_a_promotion_interval_keeps_only_blocks_at_least_that_deep():
    """Triton promotes within one dot: a block shallower than the interval would never promote, so the autotuner
    must not pick one (the experiment's promote_every=128 would silently be fast_accum)."""
    from kernels import matmul_fp8 as f8

    configs = [c.as_triton() for c in f8.CONFIGS]
    t = torch.empty(64, dtype=torch.uint8)
    named = {"M": 4096, "N": 4096, "K": 4096, "a_ptr": t, "b_ptr": t, "stride_ak": 1, "stride_bk": 1,
             "stride_am": 4096, "stride_bn": 4096}
    for every in (64, 128, 256):
        kept = f8._prune(configs, named, IMPRECISE_ACC=every)
        assert kept and all(c.kwargs["BLOCK_K"] >= every for c in kept)
    assert {c.kwargs["BLOCK_K"] for c in f8._prune(configs, named, IMPRECISE_ACC=None)} == {64, 128, 256}
    a = torch.zeros(1, 32, dtype=torch.float8_e4m3fn)
    one = torch.ones(1, 1)
    for bad in (0, 48, -32):
        with pytest.raises(ValueError, match="multiple of 32"):
            f8.matmul_fp8(a=a, b=a, scale_a=one, scale_b=one, c=torch.empty(1, 1), promote_every=bad)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                    reason="the FP8 TMA route and its plans: needs sm_90 or newer")
def test_the_tma_routes_planned_calls_are_bitwise_its_autotuned_one():
    from kernels import matmul_fp8 as f8

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(1024, 512, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(384, 512, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sa = torch.rand(1024, 1, device="cuda", generator=g) * 0.75 + 0.25  # the spec's scales: uniform(0.25, 1)
    sb = torch.rand(384, 1, device="cuda", generator=g) * 0.75 + 0.25
    outs = []
    for fast in (False, False, False, True, True):  # each signature's first call autotunes, the next are planned
        c = torch.empty(1024, 384, device="cuda", dtype=torch.bfloat16)
        f8.matmul_fp8(a=a, b=b, scale_a=sa, scale_b=sb, c=c, fast_accum=fast)
        outs.append(c)
    assert f8.descriptor_path(a, b, outs[0], f8.TMA_CONFIGS)
    assert len([s for s in f8._PLANS._plans if s[0] == f8.signature(a, b, sa, sb, outs[0])]) == 2
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2]) and torch.equal(outs[3], outs[4])
    want = torch.empty(1024, 384, device="cuda")
    f8.matmul_fp8_ref(a=a, b=b, scale_a=sa, scale_b=sb, c=want)
    err = (outs[0].float() - want).abs() - 1.6e-2 * want.abs()
    assert err.max().item() <= 1e-5 + 5e-4 * 512 ** 0.5, err.max().item()  # the spec's tolerance
