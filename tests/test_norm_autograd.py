"""kernels/norm_autograd.py: the norms' Functions plan once per signature of their inputs, and each call still
computes on its own tensors and eps; ``PlannedFunction.apply`` takes torch's route under a functorch transform."""

from __future__ import annotations

import pytest
import torch

from kernels import layernorm_bwd, rmsnorm_bwd
from kernels.common import Plans
from kernels.norm_autograd import NormPlans, PlannedFunction
from tests.e2e import seeded

pytestmark = pytest.mark.usefixtures("on_device")

FUNCTIONS = pytest.mark.parametrize("module", [layernorm_bwd, rmsnorm_bwd], ids=["layernorm", "rmsnorm"])


def _fresh(monkeypatch, module) -> NormPlans:
    plans = NormPlans(module._AUTOGRAD.launchers)
    monkeypatch.setattr(module, "_AUTOGRAD", plans)
    return plans


def _call(module, x, w, b, eps, dy):
    """Output and every input's gradient of one forward and backward through the module's Function."""
    leaves = [t.detach().requires_grad_() for t in ((x, w, b) if module is layernorm_bwd else (x, w))]
    if module is layernorm_bwd:
        y = module.LayerNormFunction.apply(*leaves, eps)
    else:
        y = module.RMSNormFunction.apply(*leaves, eps)
    return (y.detach(), *torch.autograd.grad(y, leaves, dy))


def _draw(g, shape, dtype=torch.bfloat16):
    return (torch.randn(shape, generator=g).to(dtype), torch.randn(shape[-1], generator=g).to(dtype),
            torch.randn(shape[-1], generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype))


@FUNCTIONS
@pytest.mark.parametrize("shape", [(5, 80), (2, 3, 48)], ids=["rows", "batched"])
def test_a_function_plans_a_signature_once_and_each_call_computes_on_its_own_tensors_and_eps(monkeypatch, module,
                                                                                           shape):
    plans = _fresh(monkeypatch, module)
    g = seeded(5)
    draws = [_draw(g, shape) for _ in range(2)]
    calls = [(draws[0], 1e-5), (draws[1], 1e-5), (draws[0], 0.5)]
    got = [_call(module, x, w, b, eps, dy) for (x, w, b, dy), eps in calls]
    assert len(plans._plans) == 1
    plan = next(iter(plans._plans._plans.values()))
    assert len(plan._bwd) == 1  # grad_out's signature, the same each call
    for ((x, w, b, dy), eps), outs in zip(calls, got, strict=True):
        _fresh(monkeypatch, module)  # planned afresh from this call's tensors: the same results
        for a, c in zip(outs, _call(module, x, w, b, eps, dy), strict=True):
            assert torch.equal(a, c)
    assert not torch.equal(got[0][0], got[1][0]) and not torch.equal(got[0][0], got[2][0])
    assert not torch.equal(got[0][1], got[1][1]) and not torch.equal(got[0][1], got[2][1])


@FUNCTIONS
def test_a_new_grad_out_layout_gets_a_backward_plan_of_its_own(monkeypatch, module):
    plans = _fresh(monkeypatch, module)
    x, w, b, dy = _draw(seeded(6), (6, 64))
    dense = _call(module, x, w, b, 1e-5, dy)
    strided = _call(module, x, w, b, 1e-5, dy.t().contiguous().t())  # the same values, column-major
    expanded = _call(module, x, w, b, 1e-5, dy[:1].expand_as(dy))  # zero row stride, as from a broadcast
    for a, c in zip(dense, strided, strict=True):
        assert torch.equal(a, c)
    ref = _call(module, x, w, b, 1e-5, dy[:1].expand_as(dy).contiguous())
    for a, c in zip(expanded, ref, strict=True):
        assert torch.equal(a, c)
    plan = next(iter(plans._plans._plans.values()))
    assert len(plan._bwd) == 3


def test_layernorm_without_bias_and_without_a_weight_gradient_returns_none_for_them(monkeypatch):
    _fresh(monkeypatch, layernorm_bwd)
    x, w, _, dy = _draw(seeded(7), (4, 32))
    xl = x.detach().requires_grad_()
    y = layernorm_bwd.LayerNormFunction.apply(xl, w, None, 1e-5)  # weight needs no gradient, no bias
    grads = layernorm_bwd.LayerNormFunction.backward(y.grad_fn, dy)  # the node is the Function's ctx
    assert len(grads) == 4 and all(g is None for g in grads[1:])
    ref = _call(layernorm_bwd, x, w, torch.zeros_like(w), 1e-5, dy)  # a zero bias: the same x and its gradient
    assert torch.equal(y.detach(), ref[0]) and torch.equal(grads[0], ref[1])


class _Twice(PlannedFunction):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_planned_apply_builds_the_same_graph_as_torchs_apply():
    x = torch.randn(3, requires_grad=True)
    y = _Twice.apply(x)
    assert type(y.grad_fn).__name__ == "_TwiceBackward"
    (gx,) = torch.autograd.grad(y.sum(), x)
    assert torch.equal(gx, torch.full_like(x, 2.0))


def test_planned_apply_takes_torchs_route_under_a_functorch_transform():
    # torch's route under a transform: a Function without setup_context is refused with torch's own error, where
    # autograd's C++ apply called directly would have run it unchecked
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda x: _Twice.apply(x).sum())(torch.randn(3))


def test_plans_hold_no_tensor_of_a_call(monkeypatch):
    import gc
    import weakref

    plans = _fresh(monkeypatch, layernorm_bwd)
    x, w, b, dy = _draw(seeded(8), (4, 32))
    xl = x.detach().requires_grad_()
    torch.autograd.grad(layernorm_bwd.LayerNormFunction.apply(xl, w, b, 1e-5), (xl,), dy)
    ref = weakref.ref(xl)
    del xl
    gc.collect()
    assert ref() is None and len(plans._plans) == 1
    assert isinstance(plans._plans, Plans)
