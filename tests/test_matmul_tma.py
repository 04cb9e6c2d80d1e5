"""matmul's TMA backend (kernels/matmul_tma.py): which launches take the descriptor path, that `harness matrix`
records each autotune config with its own boxes, and that the generated checks of specs/matmul.toml catch
planted bugs in the persistent kernel (tests/planted/tma_kernels.py) while the shipped kernel and a control
built like the planted ones pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.aot.launches import intercept_launches, record_launches
from kernels.matmul_tma import CONFIGS, matmul_tma, takes
from tests.e2e import run_all, with_backend


def _operands(m, n, k, device="cpu", dtype=torch.bfloat16):
    return {"a": torch.randn(m, k).to(dtype).to(device), "b": torch.randn(n, k).to(dtype).to(device),
            "bias": torch.randn(n).to(dtype).to(device), "c": torch.empty(m, n, dtype=dtype, device=device)}


def _kernels_launched(m, n, k, device="cpu", **layout) -> list[str]:
    ops = _operands(m, n, k, device)
    ops.update(layout)
    with intercept_launches() as records:
        matmul_tma(**ops, epilogue=3)
    return sorted({r.kernel_name for r in records})


def test_routing_on_the_interpreter():
    assert _kernels_launched(40, 48, 80) == ["_persistent_kernel"]
    assert _kernels_launched(40, 48, 81) == ["_matmul_kernel"]        # K * 2 bytes not a multiple of 16
    assert _kernels_launched(8, 48, 80) == ["_matmul_kernel"]         # no 16-row box fits
    padded = torch.randn(40, 83).to(torch.bfloat16)[:, :80]
    assert _kernels_launched(40, 48, 80, a=padded) == ["_matmul_kernel"]  # 166-byte rows
    weight_kn = torch.randn(80, 48).to(torch.bfloat16)
    assert _kernels_launched(40, 48, 80, b=weight_kn.T) == ["_matmul_kernel"]  # transposed weight


@pytest.mark.parametrize(("m", "n", "k", "tma"), [(4096, 4096, 4096, True), (1024, 128, 64, True),
                                                  (1023, 4096, 4096, False), (4096, 64, 4096, False),
                                                  (128, 14336, 4096, False)])
def test_routing_on_a_gpu_shape_rule(m, n, k, tma):
    meta = {"a": torch.empty(m, k, dtype=torch.bfloat16, device="meta"),
            "b": torch.empty(n, k, dtype=torch.bfloat16, device="meta"),
            "c": torch.empty(m, n, dtype=torch.bfloat16, device="meta")}
    assert takes(**meta) is tma


def test_matrix_records_every_config_with_its_boxes():
    args = {"a": torch.empty(4096, 4096, dtype=torch.float16), "b": torch.empty(4096, 4096, dtype=torch.float16),
            "bias": torch.empty(4096, dtype=torch.float16), "c": torch.empty(4096, 4096, dtype=torch.float16)}
    records = record_launches(lambda **kw: matmul_tma(**kw, epilogue=1), args)
    assert [r.kernel_name for r in records] == ["_persistent_kernel"] * len(CONFIGS)
    for r, cfg in zip(records, CONFIGS, strict=True):
        c_cols = cfg.block_n // 2 if cfg.subtile else cfg.block_n
        boxes = [r.signature[d].replace(" ", "") for d in ("a_desc", "b_desc", "c_desc")]
        assert boxes == [f"tensordesc<fp16[{cfg.block_m},{cfg.block_k}]>",
                         f"tensordesc<fp16[{cfg.block_n},{cfg.block_k}]>",
                         f"tensordesc<fp16[{cfg.block_m},{c_cols}]>"], boxes


def _spec_with(tmp_path: Path, impl: str):
    return with_backend(tmp_path, "matmul", "kernels.matmul:matmul", impl)


def test_shipped_kernel_and_control_pass(tmp_path):
    for impl in ("kernels.matmul_tma:matmul_tma", "tests.planted.tma_kernels:control"):
        assert run_all(_spec_with(tmp_path, impl)) == {}, impl


@pytest.mark.parametrize("bug", ["stale_tile", "same_half"])
def test_planted_bug_is_caught(tmp_path, bug):
    failures = run_all(_spec_with(tmp_path, f"tests.planted.tma_kernels:{bug}"))
    # a tile never stored is poison; a wrong one numerics; a padded case (the pointer kernel) fails `layout`
    # because its contiguous copy takes the descriptor path
    assert {dtype for dtype, _ in failures} == {"bf16", "fp16"}, failures
    assert {check for _, check in failures} <= {"poison", "numerics", "layout"}, failures
    failed_cases = {msg.split(":")[0] for msgs in failures.values() for msg in msgs}
    assert any(case.startswith("M=40,N=48,K=80") for case in failed_cases), failed_cases


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                    reason="the TMA path's plans: needs sm_90 or newer")
def test_a_planned_call_is_bitwise_the_autotuned_one_and_a_new_signature_is_planned_anew():
    from kernels import matmul_tma as mt

    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(s, device="cuda", generator=g).bfloat16() for s in ((1024, 512), (384, 512)))
    bias = torch.randn(384, device="cuda", generator=g).bfloat16()
    outs = []
    for epilogue in (0, 0, 0, 3, 3):  # the first call of each signature autotunes; the next ones are planned
        c = torch.empty(1024, 384, device="cuda", dtype=torch.bfloat16)
        mt.matmul_tma(a=a, b=b, bias=bias, c=c, epilogue=epilogue)
        outs.append(c)
    assert takes(a, b, outs[0]) and mt._signature(a, b, bias, outs[0], 0) in mt._PLANS
    assert mt._signature(a, b, bias, outs[0], 3) in mt._PLANS
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2]) and torch.equal(outs[3], outs[4])
    want = a.float() @ b.float().T
    assert torch.allclose(outs[0].float(), want, rtol=2e-2, atol=2e-2)
    assert not torch.equal(outs[0], outs[3])  # the epilogue is part of the signature
