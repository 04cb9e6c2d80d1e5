"""The timed call of a bwd or full job, and its checks: the forward's, on the grad spec (harness.bench.gradspec).

bwd: the forward runs outside the timed region, its graph kept; the timed call is the backward alone,
``torch.autograd.grad(outputs, inputs, grad_outputs, retain_graph=True)``, or where the spec names a standalone
backward (``[backward.backends.<name>] kernel``) that kernel on the saved tensors. full: forward and backward in
the timed call, the graph built inside it. Before timing a backend passes the generated backward checks
(harness.correctness.backward) on the variant timed; while timed, the gradients are poisoned and re-checked,
some calls on new input values, as a forward's outputs are (TimedCheck and ProbedCheck on the grad spec): a
backward that replays a gradient it kept fails as ``timed outputs``.

A probe writes new values into the inputs in place. The graph of a bwd job saved the old ones, so it is built
again, outside the timed region, whenever an input's version counter moved (:class:`FreshGraph`).
"""

from __future__ import annotations

import functools

import torch

from harness.bench.gradspec import differentiate, forward_fn, grad_spec, output_buffers, reference_backward
from harness.bench.modes import backward_variant
from harness.bench.recheck import ProbedCheck
from harness.correctness.args import Arguments, clone_args, make_args, reference_args
from harness.correctness.backward import BackwardContext, autograd_outputs, resolve_callable, run_backward_checks
from harness.correctness.checks import CaseContext, CheckFailure, TimedCheck, reference_key
from harness.spec.backward import grad_name
from harness.spec.imports import resolve_import


class BackwardPass:
    """One provider's backward (bwd) or forward and backward (full) as a zero-argument call over ``args``, the
    grad spec's arguments: it returns the gradients by name, or writes them (a standalone kernel)."""

    def __init__(self, job, args: Arguments, device: str):
        spec, p, self.mode = job.spec, job.provider, job.mode
        self.spec, self.args, self.device = spec, args, device
        self.variant = "reference" if p.backend == "reference" else backward_variant(spec, p.name, job.mode)
        self.wrt = [n for n in spec.backward.inputs if n in args.tensors]
        self.grads = {grad_name(t.name): args.tensors[grad_name(t.name)] for t in spec.outputs
                      if grad_name(t.name) in args.tensors}
        self.inputs = [t.name for t in spec.inputs if t.name in args.tensors]
        outs = output_buffers(spec, args.env, job.dtype)
        if self.variant == "reference":  # eager autograd through the reference, or torch.compile of it
            self.forward = forward_fn(spec, resolve_import(spec.reference), outs, device,
                                      compile_it=p.name == "torch.compile")
        elif self.variant == "autograd":
            impl = spec.backward.backends[p.name]
            fn, shapes = resolve_callable(impl.autograd), Arguments({n: torch.empty(s, dtype=d, device="meta")
                                                             for n, s, d in outs}, {}, args.env)
            # a forward impl called as the forward is gets output buffers too (it returns its own outputs)
            bufs = {n: torch.empty(s, dtype=d, device=device) for n, s, d in outs} if impl.keywords else {}
            self.forward = lambda **kw: autograd_outputs(spec, impl.call_autograd(fn, {**kw, **bufs}), shapes)
        else:
            self.kernel = resolve_callable(spec.backward.backends[p.name].kernel)
            self.reference_forward = forward_fn(spec, resolve_import(spec.reference), outs, device)
        self.names = [n for n, _, _ in outs]
        self.versions = None

    def refresh(self) -> None:
        """Outside the timed region: the graph (bwd) or the saved outputs (kernel) built again when an input
        changed since they were (a probe's new values, or the first values written back)."""
        versions = tuple(self.args.tensors[n]._version for n in self.inputs)
        if versions == self.versions:
            return
        self.versions = versions
        self.leaves = {n: self.args.tensors[n].detach().requires_grad_() for n in self.wrt}
        if self.variant == "kernel":
            self.saved = self._saved()
        elif self.mode == "bwd":
            self.outs = self._forward()
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def _values(self, leaves: dict) -> dict:
        absent = {t.name: None for t in self.spec.inputs if t.name in self.args.absent}  # not a gradient's name
        return {**{n: self.args.tensors[n] for n in self.inputs}, **leaves, **absent, **self.args.params}

    def _forward(self) -> dict:
        value = self.forward(**self._values(self.leaves))
        return dict(zip(self.names, value, strict=True)) if isinstance(value, tuple) else value

    def _saved(self) -> dict:
        """What a standalone backward takes of the forward: inputs as they are, outputs as the reference gives
        them at the case's dtype (a backward's input, as the generated kernel-mode checks hand it)."""
        saved, need = {}, self.spec.backward.saved
        outputs = None
        for n in need:
            if n in self.args.tensors:
                saved[n] = self.args.tensors[n]
            elif n in self.names:
                if outputs is None:
                    with torch.no_grad():
                        outputs = dict(zip(self.names, self.reference_forward(**self._values({})), strict=True))
                saved[n] = outputs[n]
        return saved

    def __call__(self):
        if self.variant == "kernel":
            absent = {grad_name(n): None for n in self.spec.backward.inputs if n not in self.wrt}
            self.kernel(**self.saved, **self.grads, **{grad_name(n): self.args.tensors[grad_name(n)]
                                                       for n in self.wrt}, **absent, **self.args.params)
            return None
        outs = self.outs if self.mode == "bwd" else self._forward()
        return differentiate(outs, self.leaves, self.grads, retain=self.mode == "bwd")


class FreshGraph:
    """A TimedOutputs (harness.timing.engine) that keeps a :class:`BackwardPass` consistent with its inputs
    around the re-check it wraps: after every ``before`` and ``verify``, both of which may write input values."""

    def __init__(self, check, bpass: BackwardPass):
        self.check, self.bpass = check, bpass

    def wrap(self, call):
        return self.check.wrap(call) if self.check is not None else call

    def before(self) -> None:
        if self.check is not None:
            self.check.before()
        self.bpass.refresh()

    def verify(self) -> None:
        if self.check is not None:
            self.check.verify()
        self.bpass.refresh()


def verify_backward(job, device, seed: int) -> str:
    """'' when a backend's backward passes the generated backward checks on the variant timed, else the failing
    check's line. The reference and torch.compile have none to pass before timing: torch.compile's gradients
    are compared with the reference's from the first timed call on."""
    if job.provider.backend == "reference":
        return ""
    ctx = CaseContext(job.spec, job.provider.name, job.dtype, job.case, seed, device.arch, device.torch_device)
    variant = backward_variant(job.spec, job.provider.name, job.mode)
    try:
        run_backward_checks(BackwardContext(ctx, variant, "case"))
    except CheckFailure as exc:
        return str(exc).partition("\n")[0]
    return ""


def backward_job(job, device, reference, seed: int):
    """(the timed call, its TimedOutputs, '' or why the provider failed before timing) of a bwd or full job."""
    wrong = verify_backward(job, device, seed)
    if wrong:
        return None, None, wrong
    gspec, dev = grad_spec(job.spec), device.torch_device
    args = make_args(gspec, job.case, job.dtype, dev, seed)
    bpass = BackwardPass(job, args, dev)
    check = None
    if job.provider.name != "reference":  # the eager reference's gradients are the reference: not re-checked
        ref_fn = reference_backward(job.spec, dev, args.env, job.dtype)
        ctx = CaseContext(job.spec, job.provider.name, job.dtype, job.case, seed, device.arch, dev)
        ref = reference.get(("backward",) + reference_key(ctx), functools.partial(_reference, gspec, args, ref_fn,
                                                                                   job.dtype))
        check = ProbedCheck(TimedCheck(gspec, job.dtype, job.case, args, ref), ref_fn, dev, seed)
    outputs = FreshGraph(check, bpass)
    bpass.refresh()
    return outputs.wrap(bpass), outputs, ""


def _reference(gspec, args: Arguments, ref_fn, dtype: str) -> dict:
    ref_args = reference_args(gspec, clone_args(args), dtype)
    ref_fn(**ref_args.kwargs())
    return {t.name: ref_args.tensors[t.name] for t in ref_args.passed(gspec.outputs)}
