"""The host path of the norms' autograd.Functions (RMSNorm's in kernels/rmsnorm_bwd.py, LayerNorm's in
kernels/layernorm_bwd.py): what an eager training step waits on between its kernels.

Host time per call is the bench's ``full`` mode's other figure. On an H100's host (reports/h100/README.md, verify)
LayerNorm's forward and backward took 303 us against 155 for F.layer_norm's, where a Function that only passes
its gradient through took 107; inside autograd the launchers' own plan lookups, signatures of six and eight
tensors, ran twice as slowly as when timed alone. So a norm's Function plans once per call signature of its
inputs, not per launcher: the forward's plan holds the forward launcher's plan, the output's layout and the
statistics' type, and it keeps the backward's plans by grad_out's signature alone, since everything else the
backward takes (x's rows, weight, the statistics) is saved by that forward or allocated here, so is fixed by it.

:class:`PlannedFunction` also skips what ``torch.autograd.Function.apply`` does in Python on every call where no
functorch transform is active (a closure, ``setup_context`` looked up, the arguments re-tupled): the C++ apply
it ends in is called directly, after the same unwrapping of dead functorch wrappers. Under a transform (vmap,
grad) the call takes torch's route unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch._C._functorch import unwrap_if_dead

from kernels.common import Plans, accumulation_dtype, signature

_transforms_active = torch._C._are_functorch_transforms_active
_C_APPLY = torch._C._FunctionBase.__dict__["apply"]


class PlannedFunction(torch.autograd.Function):
    """An autograd.Function whose ``apply`` goes straight to autograd's C++ apply when no functorch transform is
    active (torch's own ``Function.apply`` otherwise)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._c_apply = _C_APPLY.__get__(None, cls)

    @classmethod
    def apply(cls, *args):
        if _transforms_active():
            return super().apply(*args)
        return cls._c_apply(*[unwrap_if_dead(a) if isinstance(a, torch.Tensor) else a for a in args])


@dataclass(frozen=True)
class NormLaunchers:
    """How a norm's Function plans its launches. Each builder checks its operands and returns the launcher's plan
    for their signature; every call then passes its own tensors.

    - ``forward(rows, weight, bias, out, mean, rstd)`` -> ``launch(rows, weight, bias, out, mean, rstd, eps)``
    - ``backward(rows, weight, grad_rows, grad_x, grad_weight, grad_bias, mean, rstd)`` -> ``launch(the same,
      eps)``

    ``bias``: the norm takes a bias (None where the caller passes none). ``stats``: the forward writes each
    row's mean and rstd (in the accumulation type) and the backward reads them."""

    forward: Callable[..., Callable[..., None]]
    backward: Callable[..., Callable[..., None]]
    bias: bool
    stats: bool


class NormPlans:
    """One norm Function's plans, by the signature of (x, weight, bias)."""

    def __init__(self, launchers: NormLaunchers) -> None:
        self.launchers = launchers
        self._plans = Plans()

    def forward(self, ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                eps: float) -> torch.Tensor:
        sig = signature(x, weight, bias)
        plan = self._plans.get(sig)
        if plan is None:
            plan = self._plans.keep(sig, _NormPlan(self.launchers, x, weight, bias))
        return plan.forward(ctx, x, weight, bias, eps)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor) -> tuple:
        """grad_x, grad_weight and (where the norm takes one) grad_bias, each None where autograd needs none."""
        return ctx.plan.backward(ctx, grad_out)


class _NormPlan:
    """A forward's plan for one signature of its inputs, and its backward's plans by grad_out's signature."""

    def __init__(self, launchers: NormLaunchers, x: torch.Tensor, weight: torch.Tensor,
                 bias: torch.Tensor | None) -> None:
        self.launchers = launchers
        self.flat = x.dim() == 2  # x is its rows: neither x nor its output needs a reshape or a view
        # x's rows (reshape(-1, 0) cannot infer the row count)
        self.rows_shape = tuple(x.shape) if self.flat else (math.prod(x.shape[:-1]), x.shape[-1])
        self.acc = accumulation_dtype(x)
        self.has_bias = bias is not None
        rows = x if self.flat else x.reshape(self.rows_shape)
        mean, rstd = self._stats(rows)
        out = torch.empty_like(rows, memory_format=torch.contiguous_format)
        self.fwd = launchers.forward(rows, weight, bias, out, mean, rstd)
        self._bwd = Plans()

    def _stats(self, rows: torch.Tensor):
        if not self.launchers.stats:
            return None, None
        n = self.rows_shape[0]
        return torch.empty(n, dtype=self.acc, device=rows.device), torch.empty(n, dtype=self.acc, device=rows.device)

    def forward(self, ctx, x, weight, bias, eps):
        rows = x if self.flat else x.reshape(self.rows_shape)
        # empty_like parses no dtype or device: a third of torch.empty's host time on a CPU
        out = torch.empty_like(rows, memory_format=torch.contiguous_format)
        if self.launchers.stats:
            mean, rstd = self._stats(rows)
            self.fwd(rows, weight, bias, out, mean, rstd, eps)
            ctx.save_for_backward(rows, weight, mean, rstd)
        else:
            self.fwd(rows, weight, bias, out, None, None, eps)
            ctx.save_for_backward(rows, weight)
        ctx.plan = self
        ctx.eps = eps
        return out if self.flat else out.view(x.shape)

    def backward(self, ctx, grad_out):
        saved = ctx.saved_tensors
        rows, weight = saved[0], saved[1]
        mean, rstd = (saved[2], saved[3]) if self.launchers.stats else (None, None)
        grad_rows = grad_out if self.flat else grad_out.reshape(self.rows_shape)
        grad_x = torch.empty_like(rows, memory_format=torch.contiguous_format)
        grad_w = torch.empty_like(weight)
        grad_b = torch.empty_like(weight) if self.has_bias else None
        # the one operand the forward's plan does not fix; a reshaped copy of it is new, so fixed too
        sig = signature(grad_out)
        launch = self._bwd.get(sig)
        if launch is None:
            launch = self._bwd.keep(sig, self.launchers.backward(rows, weight, grad_rows, grad_x, grad_w, grad_b,
                                                                 mean, rstd))
        launch(rows, weight, grad_rows, grad_x, grad_w, grad_b, mean, rstd, ctx.eps)
        need = ctx.needs_input_grad
        grad_x = grad_x if self.flat else grad_x.view(grad_out.shape)
        if not self.launchers.bias:
            return grad_x, grad_w if need[1] else None
        return grad_x, grad_w if need[1] else None, grad_b if need[2] else None
