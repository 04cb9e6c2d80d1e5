"""A backward pass seen as a kernel of its own, so the forward's machinery times and re-checks it unchanged.

:func:`grad_spec` turns a spec with ``[backward]`` into one whose inputs are the forward's inputs plus a grad
output per output (``grad_<output>``), and whose outputs are the gradients (``grad_<input>``, one per
``backward.inputs``), each compared at its ``[backward.tolerance]``. Its arguments (``make_args``), reference
copies (``reference_args``), poisoned outputs and value probes are then the forward's: the timed-output re-check
(harness.correctness.checks.TimedCheck, harness.bench.recheck.ProbedCheck) covers the gradients as it covers a
forward's outputs, with :func:`reference_backward` (autograd through the spec's reference) as its reference.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from harness.correctness.args import returned_outputs, shape_of, tensor_dtype
from harness.spec.backward import grad_name
from harness.spec.model import Distribution, Spec, Tolerance
from harness.target.providers import compiled


@dataclasses.dataclass(frozen=True)
class GradSpec(Spec):
    """The backward of ``forward`` as a spec: gradients are its outputs, compared at their own tolerances."""

    forward: Spec | None = None
    # its outputs are gradients: compared as the generated backward items compare them (numerics.mismatch)
    atol_floor: ClassVar[bool] = True

    def tolerance(self, dtype: str, tensor: str | None = None, case=None) -> Tolerance:
        name = tensor.removeprefix("grad_") if tensor else None
        return self.forward.grad_tolerance(dtype, name, case)


def grad_spec(spec: Spec) -> GradSpec:
    b = spec.backward
    normal = Distribution("normal", ())

    def like(t, output: bool):
        return dataclasses.replace(t, name=grad_name(t.name), output=output, values=normal, inplace=False,
                                   contiguous=False, tolerance=None, specials=())

    tensors = (spec.inputs + tuple(like(t, False) for t in spec.differentiable_outputs)
               + tuple(like(t, True) for t in spec.inputs if t.name in b.inputs))
    same = {f.name: getattr(spec, f.name) for f in dataclasses.fields(Spec)}
    return GradSpec(**{**same, "tensors": tensors, "roofline": b.roofline, "waivers": {}}, forward=spec)


def output_buffers(spec: Spec, env: dict, dtype: str) -> list[tuple[str, tuple, torch.dtype]]:
    """(name, shape, dtype) of each output a case passes."""
    return [(t.name, shape_of(t, env), tensor_dtype(t, dtype)) for t in spec.outputs if t.is_present(env)]


def forward_fn(spec: Spec, fn, outs: list, device, compile_it: bool = False):
    """A destination-passing forward (the reference) as a differentiable function of its inputs and params by
    keyword: the ``outs`` buffers (:func:`output_buffers`) allocated inside, the outputs returned as a tuple in
    that order, so a graph flows from the inputs to them. With ``compile_it``, torch.compile of that function
    (forward and, through AOTAutograd, backward compiled): its buffers are made inside, never mutated inputs."""
    names = tuple(n for n, _, _ in outs)
    absent = tuple(t.name for t in spec.outputs if t.name not in names)

    def forward(**kw):
        buffers = {n: torch.empty(s, dtype=d, device=device) for n, s, d in outs}
        value = fn(**kw, **buffers, **dict.fromkeys(absent))
        got = returned_outputs(spec, value, tuple(n for n, x in kw.items() if x is None) + absent) or buffers
        return tuple(got[n] for n in names)

    return compiled(forward) if compile_it else forward


def differentiate(outs: dict, leaves: dict, grad_outputs: dict, retain: bool) -> dict:
    """The gradients of ``outs`` (output name -> tensor) with ``grad_outputs`` (by grad name) w.r.t. ``leaves``,
    by gradient name; zeros for an input no output depends on (the reference's gradient is then zero)."""
    live = [n for n, o in outs.items() if isinstance(o, torch.Tensor) and o.requires_grad
            and grad_name(n) in grad_outputs]  # not an output declared grad = false
    got = torch.autograd.grad([outs[n] for n in live], list(leaves.values()),
                              [grad_outputs[grad_name(n)] for n in live], retain_graph=retain,
                              allow_unused=True) if live else [None] * len(leaves)
    return {grad_name(n): torch.zeros_like(x) if g is None else g
            for (n, x), g in zip(leaves.items(), got, strict=True)}


def reference_backward(spec: Spec, device, env: dict, dtype: str):
    """The gradients by autograd through ``spec``'s reference, as a destination-passing function of the grad
    spec's arguments, at the precision they come in (``reference_args`` upcasts them); ``env`` and ``dtype``, the
    case's, size the buffers of the outputs no gradient flows from (grad = false)."""
    from harness.correctness.args import reference_dtype
    from harness.spec.imports import resolve_import

    ref = resolve_import(spec.reference)
    kept = [(t.name, shape_of(t, env), reference_dtype(tensor_dtype(t, dtype), dtype, spec.reference_precision))
            for t in spec.outputs if not t.grad and t.is_present(env)]

    def backward(**kw):
        inputs = {t.name: kw.get(t.name) for t in spec.inputs}
        leaves = {n: inputs[n].detach().clone().requires_grad_() for n in spec.backward.inputs
                  if inputs.get(n) is not None}
        outs = [(t.name, tuple(kw[grad_name(t.name)].shape), kw[grad_name(t.name)].dtype)
                for t in spec.differentiable_outputs if kw.get(grad_name(t.name)) is not None] + kept
        fn = forward_fn(spec, ref, outs, device)
        with torch.enable_grad():
            values = fn(**{**inputs, **leaves}, **{n: kw[n] for n in spec.params if n in kw})
            grads = differentiate(dict(zip((n for n, _, _ in outs), values, strict=True)), leaves, kw, retain=False)
        for name, g in grads.items():
            kw[name].copy_(g)
    return backward
