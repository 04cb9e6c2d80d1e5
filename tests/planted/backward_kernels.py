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
    sum_partials(partials, grad_weight, n_parts=x.shape[0] // cfg.rows_per_program)  # BUG: floor, not ceiling


def rmsnorm_bwd_ignores_weight(*, x, weight, grad_out, grad_x, grad_weight, eps, config=None) -> None:
    if x.numel() == 0:
        return rmsnorm_bwd(x=x, weight=weight, grad_out=grad_out, grad_x=grad_x, grad_weight=grad_weight, eps=eps)
    ones = torch.ones_like(weight)  # BUG: dx = rstd * (dy - xhat * mean(dy * xhat)), the weight left out
    partials, _ = rmsnorm_bwd_partials(x=x, weight=ones, grad_out=grad_out, grad_x=grad_x, eps=eps, config=config)
    sum_partials(partials, grad_weight)


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
    partials, _ = rmsnorm_bwd_partials(x=x, weight=weight, grad_out=grad_out, grad_x=grad_x, eps=eps, config=config)
    programs, n_cols = partials.shape
    order = torch.arange(programs, device=x.device).roll(next(_calls)).to(torch.int32)
    acc = torch.zeros(n_cols, dtype=partials.dtype, device=x.device)
    # BUG: floating-point addition does not commute with the order the adds land in
    _atomic_sum_kernel[(programs,)](partials, order, acc, n_cols, BLOCK_N=min(triton.next_power_of_2(n_cols), 1024))
    grad_weight.copy_(acc)
