"""kernels.common.Plans: a launcher's work per call signature, done once. On the CPU the interpreter runs the same
plans a GPU would keep (int4_matmul's tile kernel and decode GEMV), so these tests replay them for real."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from kernels import int4_matmul as q4
from kernels import layernorm_bwd, rmsnorm_bwd
from kernels.common import Plans, signature
from tests.e2e import seeded

# on a GPU the compiled kernels, on a CPU the interpreter (tests/conftest.py's on_device)
pytestmark = pytest.mark.usefixtures("on_device")


def _operands(m, n, k, dtype=torch.bfloat16, seed=0):
    g = seeded(seed)
    a = torch.randn(m, k, generator=g).to(dtype)
    w = torch.randint(0, 256, (n, k // 2), generator=g, dtype=torch.uint8)
    groups = -(-k // q4.GROUP_SIZE)
    s = (torch.rand(n, groups, generator=g) * 0.1 + 0.01).to(dtype)
    z = torch.randint(0, 16, (n, groups), generator=g, dtype=torch.uint8)
    return a, w, s, z


def _call(a, w, s, z):
    c = torch.full((a.shape[0], w.shape[0]), float("nan"), dtype=a.dtype)
    q4.int4_matmul(a=a, w=w, scales=s, zeros=z, c=c)
    return c


@pytest.fixture
def plans(monkeypatch):
    fresh = Plans()
    monkeypatch.setattr(q4, "_PLANS", fresh)
    return fresh


@pytest.mark.parametrize("m", [1, 3], ids=["gemv", "tile"])
def test_a_second_call_of_a_signature_is_planned_and_bitwise_a_fresh_one(plans, m):
    first = _operands(m, 40, 512, seed=1)
    _call(*first)
    assert len(plans) == 1
    other = _operands(m, 40, 512, seed=2)  # same signature, other values
    planned = _call(*other)
    assert len(plans) == 1
    plans._plans.clear()
    assert torch.equal(planned, _call(*other))  # planned afresh: the same bits
    want = torch.empty_like(planned)
    q4.int4_matmul_ref(a=other[0], w=other[1], scales=other[2], zeros=other[3], c=want)
    assert torch.allclose(planned.float(), want.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("change", ["dtype", "shape", "stride", "alignment"])
def test_a_changed_signature_gets_its_own_plan(plans, change):
    a, w, s, z = _operands(3, 40, 512)
    _call(a, w, s, z)
    if change == "dtype":
        a, s = a.half(), s.half()
    elif change == "shape":
        a = torch.cat([a, a])
    elif change == "stride":
        a = torch.empty(3, 1024, dtype=a.dtype)[:, ::2].copy_(a)
    else:
        a = torch.empty(3 * 512 + 2, dtype=a.dtype)[2:].view(3, 512).copy_(a)  # 4 bytes past 16-byte alignment
    assert signature(a) != signature(_operands(3, 40, 512)[0])
    _call(a, w, s, z)
    assert len(plans) == 2


def test_bad_operands_raise_on_every_call_and_are_never_planned(plans):
    a, w, s, z = _operands(3, 40, 512)
    for _ in range(2):
        with pytest.raises(ValueError, match="int4_matmul"):
            q4.int4_matmul(a=a, w=w, scales=s, zeros=z, c=torch.empty(3, 41, dtype=a.dtype))
    assert len(plans) == 0


def test_a_plan_holds_no_operand(plans):
    a, w, s, z = _operands(3, 40, 512)
    refs = [weakref.ref(t) for t in (a, w, s, z)]
    _call(a, w, s, z)
    del a, w, s, z
    gc.collect()
    assert len(plans) == 1 and all(r() is None for r in refs)



def test_a_delegated_plan_routes_until_the_other_launcher_has_planned_then_is_that_plan():
    mine, theirs, calls = Plans(), {}, []

    def call(x):  # another launcher: plans on its second call
        calls.append(x)
        if len(calls) == 2:
            theirs["plan"] = lambda x: calls.append(("planned", x))

    mine.keep(("sig",), mine.delegate(("sig",), call, lambda x: theirs.get("plan")))
    for x in range(4):
        mine.run(("sig",), lambda: None, x)
    assert calls == [0, 1, ("planned", 2), ("planned", 3)] and mine.get(("sig",)) is theirs["plan"]
    untracked = Plans()
    untracked.delegate(None, call, lambda x: theirs["plan"])(5)  # no signature: nothing is kept
    assert len(untracked) == 0

def test_past_capacity_new_signatures_are_planned_every_call():
    kept = Plans(capacity=1)
    assert kept.keep(("a",), 1) == 1 and kept.keep(("b",), 2) == 2
    assert ("a",) in kept and ("b",) not in kept and len(kept) == 1


@pytest.mark.parametrize("module", ["matmul", "matmul_tma"])
def test_the_gemms_plan_each_signature_once_and_replay_it_bitwise(monkeypatch, module):
    """matmul's pointer kernel, and matmul_tma's route to it for operands TMA cannot take (a transposed b)."""
    import importlib

    from kernels import matmul as mm

    mod = importlib.import_module(f"kernels.{module}")
    fresh = Plans()
    monkeypatch.setattr(mm, "_PLANS", Plans())
    monkeypatch.setattr(mod, "_PLANS", fresh)
    launch = mod.matmul if module == "matmul" else mod.matmul_tma
    outs = []
    for seed in (1, 2, 2):
        g = seeded(seed)
        a = torch.randn(17, 64, generator=g).bfloat16()
        b = torch.randn(64, 48, generator=g).bfloat16().t()  # [N, K] with unit stride along N: not TMA's
        bias = torch.randn(48, generator=g).bfloat16()
        c = torch.full((17, 48), float("nan"), dtype=torch.bfloat16)
        launch(a=a, b=b, bias=bias, c=c, epilogue=3)
        outs.append(c)
    assert len(fresh) == 1 and torch.equal(outs[1], outs[2]) and not torch.equal(outs[0], outs[1])
    fresh._plans.clear()
    c = torch.empty_like(outs[2])
    launch(a=a, b=b, bias=bias, c=c, epilogue=3)  # planned afresh
    assert torch.equal(c, outs[2])


@pytest.mark.parametrize("stats", [False, True])
def test_layernorm_plans_a_signature_once_and_each_call_passes_its_own_eps(monkeypatch, stats):
    from kernels import layernorm as ln

    fresh = Plans()
    monkeypatch.setattr(ln, "_PLANS", fresh)
    x, w = torch.randn(6, 96).bfloat16(), torch.randn(96).bfloat16()
    outs = []
    for eps in (1e-5, 1e-5, 0.5):  # eps is an argument of each call, not of the plan
        out = torch.empty_like(x)
        mean, rstd = (torch.empty(6), torch.empty(6)) if stats else (None, None)
        ln.layernorm(x=x, weight=w, bias=None, out=out, eps=eps, has_bias=False, mean=mean, rstd=rstd)
        outs.append((out, rstd))
    assert len(fresh) == 1 and torch.equal(outs[0][0], outs[1][0]) and not torch.equal(outs[0][0], outs[2][0])
    fresh._plans.clear()
    out = torch.empty_like(x)
    ln.layernorm(x=x, weight=w, bias=None, out=out, eps=0.5, has_bias=False,
                 mean=torch.empty(6) if stats else None, rstd=torch.empty(6) if stats else None)
    assert torch.equal(out, outs[2][0])


def _norm_bwd(module, x, w, dy, eps):
    """grad_x and the weight's (and LayerNorm's bias's) gradients of one backward call, into new tensors."""
    gx, gw, gb = torch.empty_like(x), torch.full_like(w, float("nan")), torch.full_like(w, float("nan"))
    if module is layernorm_bwd:
        layernorm_bwd.layernorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, grad_bias=gb,
                                    eps=eps, has_bias=True)
        return gx, gw, gb
    rmsnorm_bwd.rmsnorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, eps=eps)
    return gx, gw


NORM_BACKWARDS = pytest.mark.parametrize("module", [layernorm_bwd, rmsnorm_bwd], ids=["layernorm", "rmsnorm"])


@NORM_BACKWARDS
def test_the_norm_backwards_plan_a_signature_once_and_each_call_passes_its_own_tensors_and_eps(monkeypatch, module):
    fresh = Plans()
    monkeypatch.setattr(module, "_BWD_PLANS", fresh)
    g = seeded(3)
    draws = [(torch.randn(5, 80, generator=g).bfloat16(), torch.randn(80, generator=g).bfloat16(),
              torch.randn(5, 80, generator=g).bfloat16()) for _ in range(2)]
    calls = [(draws[0], 1e-5), (draws[1], 1e-5), (draws[0], 0.5)]  # new tensors, then a new eps, one signature
    outs = [_norm_bwd(module, *operands, eps) for operands, eps in calls]
    assert len(fresh) == 1
    for (operands, eps), got in zip(calls, outs, strict=True):
        fresh._plans.clear()  # each call's tensors and eps, not the first call's: the same as planned afresh
        for a, b in zip(got, _norm_bwd(module, *operands, eps), strict=True):
            assert torch.equal(a, b)
    assert not torch.equal(outs[0][0], outs[1][0]) and not torch.equal(outs[0][0], outs[2][0])


@NORM_BACKWARDS
def test_a_planned_backward_of_no_rows_zeroes_each_calls_gradients(monkeypatch, module):
    monkeypatch.setattr(module, "_BWD_PLANS", Plans())
    x, w = torch.empty(0, 16).bfloat16(), torch.randn(16).bfloat16()
    for _ in range(2):  # the second call through the plan the first kept
        grads = _norm_bwd(module, x, w, torch.empty_like(x), 1e-5)
        assert all(torch.equal(t, torch.zeros_like(t)) for t in grads[1:])


def _fp8_operands(m, n, k, seed, per_row=True):
    g = seeded(seed)
    a = torch.randn(m, k, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, generator=g).to(torch.float8_e4m3fn)
    sa = torch.rand(m if per_row else 1, 1, generator=g) + 0.25
    sb = torch.rand(n if per_row else 1, 1, generator=g) + 0.25
    return a, b, sa, sb


def test_matmul_fp8_plans_a_signature_once_and_replays_it_bitwise(monkeypatch):
    """The pointer route (K = 72: rows not 16-byte aligned, so not TMA's) is planned on the CPU too."""
    from kernels import matmul_fp8 as f8

    fresh = Plans()
    monkeypatch.setattr(f8, "_PLANS", fresh)
    outs = []
    for seed in (1, 2, 2):
        a, b, sa, sb = _fp8_operands(20, 24, 72, seed)
        c = torch.full((20, 24), float("nan"), dtype=torch.bfloat16)
        f8.matmul_fp8(a=a, b=b, scale_a=sa, scale_b=sb, c=c)
        outs.append(c)
    assert len(fresh) == 1 and torch.equal(outs[1], outs[2]) and not torch.equal(outs[0], outs[1])
    f8.matmul_fp8(a=a, b=b, scale_a=sa[:1], scale_b=sb[:1], c=torch.empty_like(c))  # per-tensor scales: a new plan
    assert len(fresh) == 2
    fresh._plans.clear()
    c = torch.empty_like(outs[2])
    f8.matmul_fp8(a=a, b=b, scale_a=sa, scale_b=sb, c=c)  # planned afresh
    assert torch.equal(c, outs[2])
    for _ in range(2):  # bad operands are never planned: they raise every time
        with pytest.raises(ValueError, match="scale_a"):
            f8.matmul_fp8(a=a, b=b, scale_a=sa[:3], scale_b=sb, c=c)
    assert len(fresh) == 1


def test_flash_attentions_plan_takes_each_calls_sm_scale_and_tensors(monkeypatch):
    """The plan binds no value of a call: a second call of the signature with another sm_scale and other tensors
    is what a fresh plan computes, and what the reference computes."""
    from kernels import flash_attention as fa

    fresh = Plans()
    monkeypatch.setattr(fa, "_PLANS", fresh)
    g = seeded(3)

    def qkvo():
        q, k, v = (torch.randn(1, 2, 16, 64, generator=g) for _ in range(3))
        return q, k, v, torch.full_like(q, float("nan"))

    first = qkvo()
    fa.flash_attention(q=first[0], k=first[1], v=first[2], out=first[3], causal=True, sm_scale=0.125)
    q, k, v, out = qkvo()
    fa.flash_attention(q=q, k=k, v=v, out=out, causal=True, sm_scale=0.3)
    assert len(fresh) == 1
    want = torch.empty_like(out)
    fa.flash_attention_ref(q=q, k=k, v=v, out=want, causal=True, sm_scale=0.3)
    assert torch.allclose(out, want, rtol=1e-4, atol=1e-5)
    fresh._plans.clear()
    again = torch.full_like(out, float("nan"))
    fa.flash_attention(q=q, k=k, v=v, out=again, causal=True, sm_scale=0.3)
    assert torch.equal(out, again)


@pytest.mark.parametrize(("op", "shape", "transposed"), [("gelu_tanh", (3, 5, 70), False),
                                                         ("gelu_tanh", (40, 96), True),
                                                         ("gelu_tanh_and_mul", (9, 2 * 48), False)])
def test_the_gelu_plans_follow_each_calls_tensors(monkeypatch, op, shape, transposed):
    """gelu_tanh's flat pass is planned on views of its first call's tensors and launched on later calls'
    own: a second call with other tensors of the signature writes their values, not the first call's."""
    import importlib

    mod = importlib.import_module(f"kernels.{op}")
    fresh = Plans()
    monkeypatch.setattr(mod, "_PLANS", fresh)
    g = seeded(5)
    fn, ref = getattr(mod, op), getattr(mod, f"{op}_ref")

    def operands():
        x = torch.randn(shape[::-1] if transposed else shape, generator=g)
        x = x.t() if transposed else x
        out_shape = (*x.shape[:-1], x.shape[-1] // 2) if op.endswith("_and_mul") else x.shape
        return x, torch.full(out_shape, float("nan"))

    fn(**dict(zip(("x", "out"), operands(), strict=True)))
    x, out = operands()
    fn(x=x, out=out)
    assert len(fresh) == 1
    want = torch.empty_like(out)
    ref(x=x, out=want)
    assert torch.allclose(out, want, rtol=1e-5, atol=1e-6)
