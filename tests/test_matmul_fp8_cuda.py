"""The FP8 wgmma kernel's launcher (kernels/matmul_fp8_cuda.py) on a CPU: its configuration checks and the reasons it
gives for operands it does not take (a caller falls back to the Triton kernel on them). Its CUDA source is
matmul_fp8's cuda backend, so `matrix` builds it for sm_90a and fails it on a spill; what only a GPU can show
(right answers, speed) is its generated tests' and reports/h200/experiments/fp8/wgmma/wgmma_probe.py's."""

from __future__ import annotations

import pytest
import torch

from kernels.matmul_fp8 import matmul_fp8, plan_for
from kernels.matmul_fp8_cuda import WgmmaConfig, matmul_fp8_cuda, unsupported


@pytest.mark.parametrize("bad", [dict(stages=3), dict(stages=7), dict(mode="promote"), dict(cluster=3)])
def test_a_bad_configuration_is_refused(bad):
    with pytest.raises(ValueError, match="WgmmaConfig"):
        WgmmaConfig(**bad)


def test_a_cluster_takes_whole_pairs_or_squares_of_tiles_only():
    assert WgmmaConfig(cluster=2).takes(256, 128) and not WgmmaConfig(cluster=2).takes(128, 256)
    assert WgmmaConfig(cluster=4).takes(256, 256) and not WgmmaConfig(cluster=4).takes(256, 128)
    assert not WgmmaConfig(cluster=4).takes(128, 256)
    assert WgmmaConfig().takes(128, 128)


def _operands(m=128, n=128, k=128):
    a = torch.zeros(m, k).to(torch.float8_e4m3fn)
    b = torch.zeros(n, k).to(torch.float8_e4m3fn)
    return a, b, torch.ones(1, 1), torch.ones(1, 1), torch.empty(m, n, dtype=torch.bfloat16)


def test_each_operand_problem_has_its_reason():
    a, b, sa, sb, c = _operands()
    assert "[M, K]" in unsupported(a, b[:, :64], sa, sb, c)  # K disagrees
    assert unsupported(a, b, torch.ones(2, 1), sb, c).startswith("scale_a must be fp32 [1, 1] (per tensor) or [128, 1]")
    assert unsupported(a, b, sa, sb, c) == "every operand must be on a CUDA device"


def test_with_a_configuration_an_operand_it_does_not_take_is_a_value_error():
    a, b, sa, sb, c = _operands()
    with pytest.raises(ValueError, match="^matmul_fp8_cuda: every operand must be on a CUDA device"):
        matmul_fp8_cuda(a=a, b=b, scale_a=sa, scale_b=sb, c=c, config=WgmmaConfig())
    with pytest.raises(ValueError, match="scale_a must be fp32"):
        matmul_fp8_cuda(a=a, b=b, scale_a=torch.ones(3, 1), scale_b=sb, c=c, config=WgmmaConfig())


def test_without_one_the_call_goes_to_the_triton_kernel():
    torch.manual_seed(0)
    a = torch.randn(16, 64).to(torch.float8_e4m3fn)
    b = torch.randn(32, 64).to(torch.float8_e4m3fn)
    sa, sb = torch.rand(16, 1) + 0.5, torch.rand(32, 1) + 0.5
    c, want = torch.empty(16, 32, dtype=torch.bfloat16), torch.empty(16, 32, dtype=torch.bfloat16)
    matmul_fp8_cuda(a=a, b=b, scale_a=sa, scale_b=sb, c=c)
    matmul_fp8(a=a, b=b, scale_a=sa, scale_b=sb, c=want)
    assert torch.equal(c.view(torch.int16), want.view(torch.int16))



def test_a_call_routed_to_the_triton_kernel_then_takes_its_plan_directly():
    import kernels.matmul_fp8_cuda as mod
    torch.manual_seed(1)
    a = torch.randn(8, 64).to(torch.float8_e4m3fn)
    b = torch.randn(24, 64).to(torch.float8_e4m3fn)
    sa, sb, c = torch.ones(1, 1), torch.ones(1, 1), torch.empty(8, 24, dtype=torch.bfloat16)
    matmul_fp8_cuda(a=a, b=b, scale_a=sa, scale_b=sb, c=c)
    first = c.clone()
    planned = plan_for(a, b, sa, sb, c)
    assert planned is not None and mod._PLANS.get((mod.signature(a, b, sa, sb, c), False)) is planned
    c.fill_(0)
    matmul_fp8_cuda(a=a, b=b, scale_a=sa, scale_b=sb, c=c)  # now through that plan alone
    assert torch.equal(c.view(torch.int16), first.view(torch.int16))


def test_a_call_the_kernel_takes_goes_to_the_kernel(monkeypatch):
    # the route alone: the checks pass (patched), the built module is a recorder
    import kernels.matmul_fp8_cuda as mod

    calls = []

    class Module:
        def matmul_fp8_wgmma(self, *args):
            calls.append(args[5:])  # the scales' strides, stages, mode, cluster, SMs

    monkeypatch.setattr(mod, "_PLANS", mod.Plans())
    monkeypatch.setattr(mod, "unsupported", lambda *operands: None)
    monkeypatch.setattr(mod, "_module", lambda capability: Module())
    monkeypatch.setattr(mod, "cuda_capability", lambda device: (9, 0))
    monkeypatch.setattr(mod, "sm_count", lambda device: 132)
    monkeypatch.setattr(mod, "matmul_fp8", lambda **kw: pytest.fail("routed to the Triton kernel"))
    a, b, _, _, c = _operands()
    mod.matmul_fp8_cuda(a=a, b=b, scale_a=torch.ones(128, 1), scale_b=torch.ones(1, 1), c=c)
    mod.matmul_fp8_cuda(a=a, b=b, scale_a=torch.ones(128, 1), scale_b=torch.ones(1, 1), c=c, fast_accum=True)
    assert calls == [(1, 0, 6, mod.MODES["overlap"], 1, 132), (1, 0, 6, mod.MODES["fast"], 1, 132)]


def test_large_outputs_take_pairs_of_ctas_and_the_rest_single_ones():
    from kernels.matmul_fp8_cuda import CLUSTER_MIN_OUTPUT, WgmmaConfig, default_config

    assert default_config(8192, 8192, False) == WgmmaConfig(cluster=2)
    assert default_config(8192, 8192, True) == WgmmaConfig(mode="fast", cluster=2)
    assert default_config(4096, 4096, False) == WgmmaConfig()
    # a pair needs M a multiple of 256: an odd count of tile rows stays single however large the output
    assert 8320 * 8192 >= CLUSTER_MIN_OUTPUT and default_config(8320, 8192, False).cluster == 1
