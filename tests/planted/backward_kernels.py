"""Planted backward bugs: four RMSNorm backwards, each kernels/rmsnorm_bwd.py's with one bug, for the harness's
generated gradient checks (tests/test_backward_kernels.py shows that a plain comparison against the reference
catches each). Each takes rmsnorm_bwd's keywords and reuses the shipped kernels, changing one thing:

- ``rmsnorm_bwd_drops_last_partial``: the second stage sums ``rows // rows_per_program`` partial rows, not the
  ceiling, so the rows of a last, partial chunk never reach dweight (dx is right);
- ``rmsnorm_bwd_ignores_weight``: dx as if the weight were all ones (``g = dy`` instead of ``dy * w``; the first
  stage is handed a ones weight, which its dweight never reads), dweight right;
- ``rmsnorm_bwd_writes_grad_output``: dx computed in place into grad_out, then copied to grad_x (Liger's
  backwards reuse dY so): every output right, the input grad_out overwritten;
- ``rmsnorm_bwd_atomic``: the partial rows added into an fp32 dweight with ``tl.atomic_add`` in the order the
  programs happen to run, which on a GPU changes from launch to launch: each dweight right to rounding, two
  runs apart in their last bits. The interpreter runs programs in program-id order, so here each call takes its
  order from a call counter (a rotation), standing in for the hardware's scheduling.

And three forwards whose outputs carry a grad_fn, called as the forward is (``differentiable = true``): an
adopter's wrapper of its library's autograd.Function, with the keywords of kernels/rmsnorm.py:

- ``rmsnorm_differentiable``: right (RMSNormFunction through a keyword wrapper);
- ``rmsnorm_grad_in_input``: the forward stores dx into x when x requires grad, Liger's cross-entropy trick: the
  gradients are right and the caller's x is gone before any backward runs;
- ``rmsnorm_backward_overwrites_saved``: the backward writes dx into the saved x, Liger's SwiGLU trick.
"""

from __future__ import annotations

import itertools

import torch
import triton
import triton.language as tl

from kernels.rmsnorm_bwd import rmsnorm_bwd, rmsnorm_bwd_partials, sum_partials


def rmsnorm_bwd_drops_last_partial(*, x, weight, grad_out, grad_x, grad_weight, eps, config=None) -> None:
    if x.numel() == 0:
        return rmsnorm_bwd(x=x, weight=weight, grad_out=grad_out, grad_x=grad_x, grad_weight=grad_weight, eps=eps)
    partials, cfg = rmsnorm_bwd_partials(x=x, weight=weight, grad_out=grad_out, grad_x=grad_x, eps=eps, config=config)
    sum_partials(partials, (grad_weight,), n_parts=x.shape[0] // cfg.rows_per_program)  # BUG: floor, not ceiling


def rmsnorm_bwd_ignores_weight(*, x, weight, grad_out, grad_x, grad_weight, eps, config=None) -> None:
    if x.numel() == 0:
        return rmsnorm_bwd(x=x, weight=weight, grad_out=grad_out, grad_x=grad_x, grad_weight=grad_weight, eps=eps)
    ones = torch.ones_like(weight)  # BUG: dx = rstd * (dy - xhat * mean(dy * xhat)), the weight left out
    partials, _ = rmsnorm_bwd_partials(x=x, weight=ones, grad_out=grad_out, grad_x=grad_x, eps=eps, config=config)
    sum_partials(partials, (grad_weight,))


def rmsnorm_bwd_writes_grad_output(*, x, weight, grad_out, grad_x, grad_weight, eps, config=None) -> None:
    # BUG: grad_out is the forward's saved gradient, an input the caller may still read
    rmsnorm_bwd(x=x, weight=weight, grad_out=grad_out, grad_x=grad_out, grad_weight=grad_weight, eps=eps,
                config=config)
    grad_x.copy_(grad_out)


@triton.jit
def _atomic_sum_kernel(part_ptr, order_ptr, acc_ptr, n_cols, BLOCK_N: tl.constexpr):
    part = tl.load(order_ptr + tl.program_id(0)).to(tl.int64)
    for c0 in range(0, n_cols, BLOCK_N):
        cols = c0 + tl.arange(0, BLOCK_N)
        ok = cols < n_cols
        tl.atomic_add(acc_ptr + cols, tl.load(part_ptr + part * n_cols + cols, mask=ok), mask=ok)


_calls = itertools.count()


def rmsnorm_bwd_atomic(*, x, weight, grad_out, grad_x, grad_weight, eps, config=None) -> None:
    if x.numel() == 0:
        return rmsnorm_bwd(x=x, weight=weight, grad_out=grad_out, grad_x=grad_x, grad_weight=grad_weight, eps=eps)
    stack, _ = rmsnorm_bwd_partials(x=x, weight=weight, grad_out=grad_out, grad_x=grad_x, eps=eps, config=config)
    partials = stack[0]  # one gradient: [programs, hidden]
    programs, n_cols = partials.shape
    order = torch.arange(programs, device=x.device).roll(next(_calls)).to(torch.int32)
    acc = torch.zeros(n_cols, dtype=partials.dtype, device=x.device)
    # BUG: floating-point addition does not commute with the order the adds land in
    _atomic_sum_kernel[(programs,)](partials, order, acc, n_cols, BLOCK_N=min(triton.next_power_of_2(n_cols), 1024))
    grad_weight.copy_(acc)


def rmsnorm_differentiable(*, x, weight, out, eps):
    from kernels.rmsnorm_bwd import RMSNormFunction

    return RMSNormFunction.apply(x, weight, eps)


def _rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _grads(x, weight, eps, dy):
    """The right gradients, by autograd on the values the caller passed."""
    with torch.enable_grad():
        xx, ww = x.detach().requires_grad_(), weight.detach().requires_grad_()
        return torch.autograd.grad(_rms(xx, ww, eps), (xx, ww), dy)


class _GradInInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.kept = (x.clone(), weight.clone(), eps)  # the right gradients come from these: only the write is wrong
        y = _rms(x, weight, eps)
        if x.requires_grad:
            x.detach().copy_(_grads(x, weight, eps, torch.ones_like(y))[0])  # BUG: dx kept in the caller's x
        return y

    @staticmethod
    def backward(ctx, dy):
        return (*_grads(*ctx.kept, dy), None)


class _OverwritesSaved(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return _rms(x, weight, eps)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        dx, dw = _grads(x, weight, ctx.eps, dy)
        x.copy_(dx)  # BUG: dx written into the saved x, the caller's tensor
        return x, dw, None


def rmsnorm_grad_in_input(*, x, weight, out, eps):
    return _GradInInput.apply(x, weight, eps)


def rmsnorm_backward_overwrites_saved(*, x, weight, out, eps):
    return _OverwritesSaved.apply(x, weight, eps)
