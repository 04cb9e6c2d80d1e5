"""Planted backwards for the benchmark's bwd mode (tests/test_bench_modes.py): RMSNorm backwards in plain torch
that are honest while the generated backward checks run, then hand back a gradient they kept per buffer.

- ``CachedGradRMSNorm``: an autograd.Function whose backward, after :data:`HONEST_CALLS` calls (the generated
  checks'), keeps the gradients of the first call it sees on a (x, weight, grad_out) storage and returns them
  from then on: right values for the inputs it was first timed on, stale once those buffers hold others;
- ``rmsnorm_bwd_cached``: the same as a standalone backward (destination-passing), copying the kept gradients
  into grad_x and grad_weight, so poisoning the gradient buffers before each timed call cannot see it.

Poison alone cannot catch either: the values they give back are right for the first inputs. Only a timed call
whose inputs got new values (harness.bench.recheck.ProbedCheck, on the grad spec) can.
"""

from __future__ import annotations

import torch

from kernels.rmsnorm_bwd import rmsnorm_bwd_ref

# The calls the generated backward checks make before timing (the main run and determinism's second): nothing
# is kept from them, whose buffers are freed and may come back at the same addresses, so the first result kept
# is of the first timed (or warm-up) call, on the case's own values
HONEST_CALLS = 2
_state = {"calls": 0, "kept": {}}


def reset() -> None:
    _state["calls"], _state["kept"] = 0, {}


def _backward(x, weight, grad_out, grad_x, grad_weight, eps) -> None:
    _state["calls"] += 1
    key = (x.data_ptr(), weight.data_ptr(), grad_out.data_ptr())
    kept = _state["kept"].get(key)
    if kept is not None:  # BUG: the kept result, whatever the inputs hold now
        grad_x.copy_(kept[0])
        grad_weight.copy_(kept[1])
        return
    rmsnorm_bwd_ref(x=x, weight=weight, grad_out=grad_out, grad_x=grad_x, grad_weight=grad_weight, eps=eps)
    if _state["calls"] > HONEST_CALLS:
        _state["kept"][key] = (grad_x.clone(), grad_weight.clone())


def rmsnorm_bwd_cached(*, x, weight, grad_out, grad_x, grad_weight, eps) -> None:
    _backward(x, weight, grad_out, grad_x, grad_weight, eps)


class CachedGradRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        grad_x, grad_weight = torch.empty_like(x), torch.empty_like(weight)
        _backward(x, weight, grad_out.contiguous() if grad_out.stride(-1) == 0 else grad_out, grad_x, grad_weight,
                  ctx.eps)
        return grad_x, grad_weight, None
