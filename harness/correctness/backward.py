"""The backward's checks on one (backend, mode, dtype, case, grad-output variant): the forward's checks where
they mean something, on the gradient's call.

Modes: ``autograd`` runs the backend's differentiable callable and ``torch.autograd.grad`` through it (the
inputs are leaves in the case's layout, between guard bands); ``kernel`` calls the standalone backward with the
forward's saved tensors, the grad outputs and poisoned gradient buffers. Either way the expected gradients come
from autograd through the spec's reference at its precision (upcast by default), on contiguous copies.

Grad-output variants: ``case`` (drawn per output in the case's layout, or for ``grad_outputs = "loss"`` one
scalar expanded, every stride 0) and ``expanded`` (a last-dimension row broadcast over the leading dimensions,
stride 0 there, as autograd hands a backward the gradient of a broadcast).

Checks, in order, each failure naming the check as the forward's do: zero-size, guards, poison (kernel mode:
the gradient buffers it writes), numerics (per gradient, elementwise and normwise, its own tolerance), inputs
(neither an input or saved tensor nor a grad output may change), determinism (a second run, bitwise; waivable
as ``backward.determinism``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

from harness.correctness import guards
from harness.correctness.args import (
    Arguments,
    _copy_into,
    alone,
    by_name,
    clone_args,
    make_args,
    reference_dtype,
    returned_outputs,
    shape_of,
    tensor_dtype,
)
from harness.correctness.behaviour import _bitwise_same
from harness.correctness.checks import CaseContext, Outcome, sync
from harness.correctness.numerics import bitwise_equal, mismatch
from harness.correctness.poison import POISON, describe_bits, first_index, pad_pattern, poison, poisoned_mask
from harness.correctness.registry import CheckFailure
from harness.spec.backward import grad_name

MODES = ("autograd", "kernel")
VARIANTS = ("case", "expanded")


@dataclass(frozen=True)
class BackwardContext:
    case: CaseContext
    mode: str      # MODES
    grads: str     # VARIANTS

    def describe(self) -> str:
        return self.case.describe().replace(" dtype=", f" pass=backward({self.mode}) grads={self.grads} dtype=", 1)


def resolve_callable(path: str):
    from harness.spec.imports import resolve_import

    obj = resolve_import(path)
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        return obj.apply  # an autograd.Function takes its arguments positionally, through apply
    return obj


def draw_grad_outputs(spec, args: Arguments, dtype: str, seed: int, grads: str, layout: str):
    """(grad output by output name, their guards): the values a backward is handed, seeded per case."""
    gen = torch.Generator(device=next(iter(args.tensors.values())).device if args.tensors else "cpu")
    gen.manual_seed(zlib.crc32(f"grad|{seed}".encode()) & 0x7FFFFFFF)
    out, grd = {}, {}
    for i, t in enumerate(spec.differentiable_outputs):
        if t.name not in args.tensors:
            continue
        x = args.tensors[t.name]
        shape, device = tuple(x.shape), x.device
        if spec.backward.grad_outputs == "loss":  # d(s * sum(out)) / d(out): one value, every stride 0
            out[t.name] = torch.randn((), generator=gen, device=device).to(x.dtype).expand(shape)
        elif grads == "expanded" and len(shape) >= 1:
            row = torch.randn(shape[-1:], generator=gen, device=device).to(x.dtype)
            out[t.name] = row.expand(shape)
        else:
            drawn = torch.randn(shape, generator=gen, device=device).to(x.dtype)
            out[t.name], grd[t.name] = _copy_into(drawn, x.dtype, layout, pad_pattern(16 + i))
    return out, grd


def reference_grads(spec, pristine: Arguments, grad_outputs: dict, dtype: str) -> dict[str, torch.Tensor]:
    """The gradients by autograd through the reference, on contiguous copies at the reference's precision."""
    from harness.spec.imports import resolve_import

    def wide(x):
        return x.detach().to(reference_dtype(x.dtype, dtype, spec.reference_precision)).contiguous().clone()

    leaves = {n: wide(pristine.tensors[n]).requires_grad_() for n in spec.backward.inputs if n in pristine.tensors}
    kwargs = {**{t.name: leaves.get(t.name) if t.name in leaves else wide(pristine.tensors[t.name])
                 for t in spec.inputs if t.name in pristine.tensors},
              **{t.name: torch.empty(pristine.tensors[t.name].shape, device=pristine.tensors[t.name].device,
                                     dtype=reference_dtype(pristine.tensors[t.name].dtype, dtype,
                                                           spec.reference_precision))
                 for t in spec.outputs if t.name in pristine.tensors},
              **dict.fromkeys(pristine.absent), **pristine.params}
    value = resolve_import(spec.reference)(**kwargs)
    outs = returned_outputs(spec, value, pristine.absent) or {t.name: kwargs[t.name] for t in spec.outputs
                                                             if t.name in pristine.tensors}
    return _grads(outs, leaves, grad_outputs, f"{spec.path}: kernel.reference")


def _grads(outs: dict, leaves: dict, grad_outputs: dict, who: str) -> dict[str, torch.Tensor]:
    """torch.autograd.grad of ``outs`` with ``grad_outputs`` w.r.t. ``leaves``; an input no output depends on
    gets None (the caller decides whether that is right)."""
    live = [n for n, o in outs.items() if isinstance(o, torch.Tensor) and o.requires_grad
            and n in grad_outputs]  # not an output declared grad = false
    if not live or not leaves:
        return dict.fromkeys(leaves)
    got = torch.autograd.grad([outs[n] for n in live], list(leaves.values()),
                              [grad_outputs[n].to(outs[n].dtype) for n in live], allow_unused=True)
    return dict(zip(leaves, got, strict=True))


class BackwardRun:
    """The calls of one backward case: the main run at once, the reference and the second run when needed."""

    def __init__(self, bctx: BackwardContext):
        ctx = bctx.case
        spec, self.bctx, self.spec = ctx.spec, bctx, ctx.spec
        self.impl = spec.backward.backends[ctx.backend]
        self.fn = resolve_callable(getattr(self.impl, bctx.mode))
        self.args = make_args(spec, ctx.case, ctx.dtype, ctx.device, ctx.seed)
        self.grad_outputs, self.grad_guards = draw_grad_outputs(spec, self.args, ctx.dtype, ctx.seed, bctx.grads,
                                                                ctx.case.layout)
        self.pristine = clone_args(self.args)
        self.pristine_grads = {n: g.clone() for n, g in self.grad_outputs.items()}
        self.wrt = [n for n in spec.backward.inputs if n in self.args.tensors]
        self.saved = self._saved() if bctx.mode == "kernel" else {}
        self.pristine_saved = {n: x.clone() for n, x in self.saved.items() if n not in self.args.tensors
                               or any(t.name == n and t.output for t in spec.tensors)}
        self.zero_size = any(x.numel() == 0 for x in self.args.tensors.values())
        self.changed_by_forward: set[str] = set()  # inputs the autograd forward itself changed

    def _saved(self) -> dict:
        """The saved tensors a standalone backward takes: inputs as drawn; an output as the reference computes
        it, rounded to its dtype and laid out as the case's inputs are (it is an input of the backward)."""
        spec, ctx = self.spec, self.bctx.case
        out, need = {}, [n for n in spec.backward.saved if n in self.args.tensors]
        forward = None
        for i, n in enumerate(need):
            t = next(t for t in spec.tensors if t.name == n)
            if not t.output:
                out[n] = self.args.tensors[n]
                continue
            if forward is None:
                forward = _forward_reference(spec, self.pristine, ctx.dtype)
            out[n], self.grad_guards[f"saved {n}"] = _copy_into(forward[n].to(self.args.tensors[n].dtype),
                                                                self.args.tensors[n].dtype, ctx.case.layout,
                                                                pad_pattern(24 + i))
        return out

    def call(self, which: int, args: Arguments, grad_outputs: dict) -> tuple[dict, dict]:
        """One run: (gradient by input name, the guards of the buffers it wrote)."""
        ctx = self.bctx.case
        if self.bctx.mode == "autograd":
            leaves = {n: args.tensors[n].detach().requires_grad_() for n in self.wrt}
            values = {**args.tensors, **leaves, **dict.fromkeys(args.absent), **args.params}
            value = self.impl.call_autograd(self.fn, values)
            outs = autograd_outputs(self.spec, value, args)
            if args is self.args:  # which pass changed an input, for the inputs check's message
                self.changed_by_forward = {t.name for t in args.passed(self.spec.inputs) if not bitwise_equal(
                    args.tensors[t.name], self.pristine.tensors[t.name]).all()}
            for n, o in outs.items():
                if o.grad_fn is None:
                    raise CheckFailure("autograd", f"outputs.{n} has no grad_fn: backward.backends.{ctx.backend}."
                                                   "autograd is not differentiable (an output computed under "
                                                   "no_grad, or written into a buffer)")
            got = _grads(outs, leaves, grad_outputs, ctx.backend)
            sync(ctx.device)
            return got, {}
        bufs, grd = {}, {}
        env = args.env
        for i, n in enumerate(self.wrt):
            t = next(t for t in self.spec.inputs if t.name == n)
            bufs[n], grd[grad_name(n)] = guards.allocate(shape_of(t, env), tensor_dtype(t, ctx.dtype), ctx.device,
                                                         pattern=pad_pattern(32 + i))
            poison(bufs[n], which)
        absent = {grad_name(n): None for n in self.spec.backward.inputs if n not in self.wrt}
        # Another run's arguments replace the saved inputs; a saved output stays the forward's (args holds only
        # an output buffer, poisoned, where the forward wrote it).
        inputs = {t.name for t in self.spec.inputs}
        saved = self.saved if args is self.args else {n: args.tensors[n] if n in inputs and n in args.tensors
                                                      else s for n, s in self.saved.items()}
        self.fn(**saved, **{grad_name(n): g for n, g in grad_outputs.items()},
                **{grad_name(n): b for n, b in bufs.items()}, **absent, **args.params)
        sync(ctx.device)
        return bufs, grd


def _forward_reference(spec, pristine: Arguments, dtype: str) -> dict:
    from harness.correctness.args import reference_args
    from harness.correctness.checks import call
    from harness.spec.imports import resolve_import

    ref_args = reference_args(spec, pristine, dtype)
    value = call(resolve_import(spec.reference), ref_args, "cpu")
    returned = returned_outputs(spec, value, ref_args.absent)
    return {t.name: returned.get(t.name, ref_args.tensors.get(t.name)) for t in spec.outputs}


def autograd_outputs(spec, value, args: Arguments) -> dict:
    """The differentiable outputs an autograd callable returned, by name: every output in declaration order, or
    those with a gradient alone (an autograd.Function keeps what it saves, grad = false outputs, to itself)."""
    every = [t.name for t in spec.outputs if t.name in args.tensors]
    names = [t.name for t in spec.differentiable_outputs if t.name in args.tensors]
    # a dict is taken as it is: a missing output is named below, by its shape check
    outs = dict(value) if isinstance(value, dict) else by_name(value, every, names)
    if isinstance(outs, str):
        raise CheckFailure("autograd", f"{outs}; {spec.name} has {', '.join(every)}{alone(every, names)}")
    for n in names:
        o, want = outs.get(n), tuple(args.tensors[n].shape)
        if not isinstance(o, torch.Tensor) or tuple(o.shape) != want:
            got = tuple(o.shape) if isinstance(o, torch.Tensor) else type(o).__name__
            raise CheckFailure("autograd", f"{n}: returned {got}, expected shape {want}")
    return {n: outs[n] for n in names}


def run_backward_checks(bctx: BackwardContext) -> Outcome:
    """Every backward check on one case; raise CheckFailure (its message ending with the context) on the
    first that fails."""
    try:
        return _run(bctx)
    except CheckFailure as exc:
        failure = CheckFailure(exc.check, f"{str(exc).partition(': ')[2]}\n{bctx.describe()}")
    raise failure


def _run(bctx: BackwardContext) -> Outcome:
    ctx, outcome = bctx.case, Outcome()
    spec, waivers = ctx.spec, ctx.spec.waivers
    run = BackwardRun(bctx)
    try:
        got, grd = run.call(0, run.args, run.grad_outputs)
    except CheckFailure:
        raise
    except Exception as exc:
        if not run.zero_size:
            raise
        if "backward.zero-size" in waivers:
            outcome.notes.append(f"backward.zero-size waived: {waivers['backward.zero-size']}")
            return outcome
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise CheckFailure("zero-size", f"the backward ({bctx.mode}) raised on 0-size inputs: "
                                        f"{type(exc).__name__}: {first}") from None
    outcome.checks.append("zero-size" if run.zero_size else "call")
    guards.verify(Arguments({}, {}, {}, {**run.args.guards, **run.grad_guards, **grd}), "in the backward")
    outcome.checks.append("guards")
    second = None
    if bctx.mode == "kernel":
        candidates = {n: poisoned_mask(g, 0) for n, g in got.items()}
        if any(bool(m.any()) for m in candidates.values()):
            second = _second(run)
            for n, mask in candidates.items():
                unwritten = mask & poisoned_mask(second[n], 1)
                if unwritten.any():
                    d = got[n].dtype
                    raise CheckFailure("poison", f"{grad_name(n)}: {int(unwritten.sum())} of {unwritten.numel()} "
                                                 "elements never written by the backward: each still held the "
                                                 f"poison of both runs ({describe_bits(d, POISON[0][d])}, "
                                                 f"{describe_bits(d, POISON[1][d])}), first at index "
                                                 f"{first_index(unwritten)}")
        outcome.checks.append("poison")
    ref = reference_grads(spec, run.pristine, run.pristine_grads, ctx.dtype)
    for n in run.wrt:
        g, e = got.get(n), ref[n]
        want = tuple(run.args.tensors[n].shape)
        if g is None:
            raise CheckFailure("numerics", f"{grad_name(n)}: the backward gave no gradient for {n}, which "
                                           "backward.inputs lists")
        if tuple(g.shape) != want:
            raise CheckFailure("numerics", f"{grad_name(n)}: shape {tuple(g.shape)}, expected {want}")
        if e is None:
            e = torch.zeros(want, dtype=torch.float64, device=g.device)  # no output depends on it: zero
        problem = mismatch(g, e, spec.grad_tolerance(ctx.dtype, n, ctx.case), atol_floor=True)
        if problem:
            raise CheckFailure("numerics", f"{grad_name(n)}: {problem}")
    outcome.checks.append("numerics")
    if "backward.inputs" in waivers:
        outcome.notes.append(f"backward.inputs waived: {waivers['backward.inputs']}")
    else:
        for n, x in run.args.tensors.items():
            if any(t.name == n and t.output for t in spec.tensors):
                continue  # the forward's output buffer: the backward never sees it
            by = ("the forward (called on inputs that require grad, before any backward)"
                  if n in run.changed_by_forward else "the backward")
            _bitwise_same("inputs", x, run.pristine.tensors[n], f"{n} (an input of the forward, saved for the "
                          f"backward) was changed by {by} in", "of its elements", ("now", "was"))
        for n, x in run.pristine_saved.items():
            _bitwise_same("inputs", run.saved[n], x, f"{n} (the forward's output, saved for the backward) was "
                          "changed by the backward in", "of its elements", ("now", "was"))
        for n, g in run.grad_outputs.items():
            _bitwise_same("inputs", g, run.pristine_grads[n], f"{grad_name(n)} (the grad output, an input of "
                          "the backward) was changed in", "of its elements", ("now", "was"))
        outcome.checks.append("inputs")
    if "backward.determinism" in waivers:
        outcome.notes.append(f"backward.determinism waived: {waivers['backward.determinism']}")
        return outcome
    second = second if second is not None else _second(run)
    for n in run.wrt:
        _bitwise_same("determinism", got[n], second[n], f"{grad_name(n)}: a second backward on the same inputs "
                      "differs in", "elements", ("first run", "second run"))
    outcome.checks.append("determinism")
    return outcome


def _second(run: BackwardRun) -> dict:
    """A second run on fresh copies of the same inputs and grad outputs, its gradient buffers holding the
    other poison."""
    args = clone_args(run.pristine)
    ctx = run.bctx.case  # the same seed: the same grad-output values, in the same layout and strides
    grads, grad_guards = draw_grad_outputs(run.spec, args, ctx.dtype, ctx.seed, run.bctx.grads, ctx.case.layout)
    got, grd = run.call(1, args, grads)
    guards.verify(Arguments({}, {}, {}, {**args.guards, **grad_guards, **grd}), "in the second backward run")
    return got
