"""Which kernel int4_matmul's CUDA backend (kernels/int4_cuda.py) sends a call to, checked on the CPU: the CUDA
kernel's module is replaced by a recorder and ``applies`` by its answer on a GPU, so the routing and the
configuration by shape are what is tested; the kernel itself runs in the GPU tiers."""

from __future__ import annotations

import pytest
import torch

from kernels import int4_cuda as cu


class _Recorder:
    def __init__(self):
        self.launches = []

    def int4_gemv(self, c, a, w, scales, zeros, ws, cnt, warps, row_tiles, splits, depth, stages, preload):
        self.launches.append((a.shape[0], cu.CudaGemvConfig(warps, row_tiles, splits, depth, stages, preload)))


@pytest.fixture
def routed(monkeypatch):
    """(recorder, Triton calls): the CUDA kernel taken to apply wherever its shape rules allow."""
    recorder, triton_calls = _Recorder(), []
    monkeypatch.setattr(cu, "applies", lambda a, w: 1 <= a.shape[0] <= cu.MAX_M and a.shape[1] % 32 == 0)
    monkeypatch.setattr(cu, "_module", lambda capability: recorder)
    monkeypatch.setattr(cu, "cuda_capability", lambda device: (9, 0))
    monkeypatch.setattr(cu, "int4_matmul", lambda **kw: triton_calls.append(kw["a"].shape[0]))
    monkeypatch.setattr(cu, "plan_for", lambda *operands: None)  # the recorder above stands for the Triton kernel
    monkeypatch.setattr(cu, "_PLANS", cu.Plans())
    return recorder, triton_calls


def _call(m: int, n: int, k: int, config=None):
    a = torch.randn(m, k, dtype=torch.bfloat16)
    w = torch.zeros(n, k // 2, dtype=torch.uint8)
    scales = torch.ones(n, k // 128, dtype=torch.bfloat16)
    zeros = torch.zeros(n, k // 128, dtype=torch.uint8)
    c = torch.empty(m, n, dtype=torch.bfloat16)
    cu.int4_matmul_cuda(a=a, w=w, scales=scales, zeros=zeros, c=c, config=config)


@pytest.mark.parametrize("m", [1, 4, 8])
def test_up_to_eight_rows_run_the_cuda_kernel(routed, m):
    recorder, triton_calls = routed
    _call(m, 256, 512)
    assert [launch[0] for launch in recorder.launches] == [m] and triton_calls == []


@pytest.mark.parametrize("m", [9, 16, 17])
def test_more_rows_run_the_triton_kernels(routed, m):
    recorder, triton_calls = routed
    _call(m, 256, 512)
    assert recorder.launches == [] and triton_calls == [m]


def test_a_given_config_runs_the_cuda_kernel_up_to_its_sixteen_rows(routed):
    recorder, triton_calls = routed
    cfg = cu.CudaGemvConfig(4, 2, 2, 1)
    _call(16, 256, 512, config=cfg)
    assert recorder.launches == [(16, cfg)] and triton_calls == []
    with pytest.raises(ValueError, match="does not take these operands"):
        _call(17, 256, 512, config=cfg)


@pytest.mark.parametrize(("n", "depth"), [(4096, 2), (256, 2), (14336, 1)])
def test_a_second_group_in_flight_only_where_n_gives_few_blocks(routed, n, depth):
    recorder, _ = routed
    _call(1, n, 256)
    assert recorder.launches == [(1, cu.CudaGemvConfig(8, 1, 1, depth))]


def test_a_signature_is_planned_once(routed):
    recorder, _ = routed
    for _ in range(3):
        _call(1, 256, 512)
    assert len(recorder.launches) == 3 and len(cu._PLANS) == 1


def test_a_ring_config_reaches_the_launcher(routed):
    recorder, _ = routed
    cfg = cu.CudaGemvConfig(8, 1, 1, 1, stages=4)
    _call(1, 256, 512, config=cfg)
    assert recorder.launches == [(1, cfg)]


@pytest.mark.parametrize("stages", [-1, 1, 5, 6, 8])
def test_stages_outside_the_instantiated_rings_are_refused(stages):
    with pytest.raises(ValueError, match="stages"):
        cu.CudaGemvConfig(8, stages=stages)


def test_a_ring_takes_no_second_register_group():
    with pytest.raises(ValueError, match="depth 1 with a ring"):
        cu.CudaGemvConfig(8, depth=2, stages=4)


def test_the_ring_shared_memory_matches_the_kernel_formula():
    # the partial tiles, then stages x (16 rows a row tile x (warps x 64 + 64) bytes + two barriers), + `last`
    assert cu.CudaGemvConfig(8, stages=4).smem_bytes(1, 4096) == 8 * 128 * 4 + 4 * (16 * 576 + 16) + 16
    assert cu.CudaGemvConfig(4, 2, stages=3).smem_bytes(16, 4096) == 4 * 2 * 2 * 128 * 4 + 3 * (32 * 320 + 16) + 16
    assert cu.CudaGemvConfig(8, 2).smem_bytes(16, 4096) == 8 * 2 * 2 * 128 * 4 + 16


def test_a_preload_config_reaches_the_launcher_and_takes_no_ring():
    cfg = cu.CudaGemvConfig(8, 1, 1, 2, preload=1)
    assert cfg.preload == 1
    with pytest.raises(ValueError, match="preload 0 or 1"):
        cu.CudaGemvConfig(8, stages=4, preload=1)
    with pytest.raises(ValueError, match="preload 0 or 1"):
        cu.CudaGemvConfig(8, preload=2)


def test_a_preload_config_is_launched_as_given(routed):
    recorder, _ = routed
    cfg = cu.CudaGemvConfig(8, 1, 2, 1, preload=1)
    _call(1, 256, 512, config=cfg)
    assert recorder.launches == [(1, cfg)]


def test_the_preload_shared_memory_matches_the_kernel_formula():
    # the partial tiles; the scales and zero points (16 rows a row tile x (slots + 1) words); m rows
    # of activations, slots x 256 + 16 bytes each; + `last`. Slots: the block's groups rounded up to its warps'.
    # 4096: 32 groups, one split of eight warps -> 32 slots
    assert cu.CudaGemvConfig(8, preload=1).smem_bytes(1, 4096) == 8 * 128 * 4 + 16 * 33 * 4 + (32 * 256 + 16) + 16
    # 14336 = 112 groups over two splits of eight warps: 7 stages of 8 groups each -> 56 slots; two row tiles, 16 rows
    assert cu.CudaGemvConfig(8, 2, 2, preload=1).smem_bytes(16, 14336) == (
        8 * 2 * 2 * 128 * 4 + 32 * 57 * 4 + 16 * (56 * 256 + 16) + 16)
    # a partial last group (K = 4128: 33 groups) still takes a slot, and the slots round up to the warps (40)
    assert cu.CudaGemvConfig(8, preload=1).smem_bytes(3, 4128) == 8 * 128 * 4 + 16 * 41 * 4 + 3 * (40 * 256 + 16) + 16


def test_a_call_routed_to_the_triton_kernels_then_takes_their_plan_directly():
    from kernels import int4_matmul as q4
    torch.manual_seed(2)
    m, n, k = 12, 24, 256  # above the kernel's ROUTE_MAX_M, and CPU operands: the Triton kernels' call
    a = torch.randn(m, k, dtype=torch.bfloat16)
    w = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8)
    scales = torch.rand(n, k // 128, dtype=torch.bfloat16) * 0.01
    zeros = torch.randint(0, 16, (n, k // 128), dtype=torch.uint8)
    c = torch.empty(m, n, dtype=torch.bfloat16)
    cu.int4_matmul_cuda(a=a, w=w, scales=scales, zeros=zeros, c=c)
    first = c.clone()
    planned = q4.plan_for(a, w, scales, zeros, c)
    assert planned is not None and cu._PLANS.get(cu.signature(a, w, scales, zeros, c)) is planned
    c.fill_(0)
    cu.int4_matmul_cuda(a=a, w=w, scales=scales, zeros=zeros, c=c)  # now through that plan alone
    assert torch.equal(c.view(torch.int16), first.view(torch.int16))
