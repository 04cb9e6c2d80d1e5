"""Benchmark modes: which pass of a kernel a job times, which providers have it, and its roofline model.

- ``fwd``: the forward call, as the benchmark always timed it;
- ``bwd``: the backward alone, the forward run (and its graph built) outside the timed region;
- ``full``: forward and backward in one timed call, what a training step pays.

A spec without ``[backward]`` has fwd only. A provider has a backward when it is the reference (eager autograd
through it), torch.compile of the reference (forward and backward compiled), or a backend or peer that
``[backward.backends.<name>]`` declares; any other is left out of bwd and full, with the reason listed.
"""

from __future__ import annotations

import dataclasses

from harness.spec import expr as ex
from harness.spec.model import Roofline, Spec

MODES = ("fwd", "bwd", "full")
BACKWARD_MODES = ("bwd", "full")


def parse_modes(given) -> tuple[str, ...]:
    """``--mode``'s values (repeatable, comma lists), each one of MODES; a bad one is BadInput."""
    from harness.steps import BadInput, comma_list

    modes = comma_list(given)
    for m in modes:
        if m not in MODES:
            raise BadInput(f"--mode {m}: expected one of {', '.join(MODES)}")
    return modes


def spec_modes(spec: Spec, asked: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The modes a spec is benchmarked in: those asked for (``--mode``), else every one it supports."""
    supported = MODES if spec.backward is not None else ("fwd",)
    return tuple(m for m in (asked or supported) if m in supported)


def unsupported_reason(spec: Spec, mode: str) -> str:
    return (f"mode {mode}: the spec declares no [backward]" if mode in BACKWARD_MODES and spec.backward is None
            else "")


def no_backward(spec: Spec, provider, mode: str) -> str:
    """Why ``provider`` (harness.target.providers.Provider) has no ``mode`` pass; '' when it has one."""
    if mode == "fwd" or provider.name in ("reference", "torch.compile"):
        return ""
    impl = spec.backward.backends.get(provider.name)
    if impl is None:
        kind = "peer" if provider.backend == "peer" else "backend"
        return f"{kind} {provider.name} has no backward: [backward.backends.{provider.name}] declares none"
    if mode == "full" and not impl.autograd:
        return (f"backend {provider.name} declares only a standalone backward (kernel): full times a "
                "differentiable forward and its backward in one call, which needs autograd")
    return ""


def backward_variant(spec: Spec, provider_name: str, mode: str) -> str:
    """How a backend's backward pass is timed: the standalone ``kernel`` on the saved tensors where the spec
    names one (bwd: nothing of autograd's bookkeeping in the timed call), else ``autograd``."""
    impl = spec.backward.backends[provider_name]
    return "kernel" if mode == "bwd" and impl.kernel else "autograd"


def _sum(a: ex.Expr | None, b: ex.Expr | None) -> ex.Expr | None:
    return None if a is None or b is None else ex.parse(f"({a.source}) + ({b.source})")


def mode_roofline(spec: Spec, mode: str) -> Roofline | None:
    """The traffic model of one mode: the forward's, the backward's, or for full both added (read and write
    separately where both split them); the looser target of the two."""
    fwd = spec.roofline
    bwd = spec.backward.roofline if spec.backward is not None else None
    if mode == "fwd":
        return fwd
    if mode == "bwd" or bwd is None:
        return bwd
    if fwd is None:
        return None
    return dataclasses.replace(bwd, bytes=_sum(fwd.bytes, bwd.bytes), flops=_sum(fwd.flops, bwd.flops),
                               target=min(fwd.target, bwd.target), read_bytes=_sum(fwd.read_bytes, bwd.read_bytes),
                               write_bytes=_sum(fwd.write_bytes, bwd.write_bytes), gap=None)


def mode_spec(spec: Spec, mode: str) -> Spec:
    """``spec`` with the mode's roofline in place of the forward's, for :func:`harness.bench.roofline.roofline`,
    which reads ``spec.roofline`` only."""
    return spec if mode == "fwd" else dataclasses.replace(spec, roofline=mode_roofline(spec, mode))


def mode_env(spec: Spec, case, dtype: str, mode: str) -> dict:
    """The symbols a mode's roofline reads: the case's, and in bwd and full the backward's tensors too
    (``bytes_grad_out``, ``bytes_grad_x``, ...)."""
    from harness.bench.gradspec import grad_spec
    from harness.correctness.args import full_env

    env = full_env(spec, case, dtype)
    return env if mode == "fwd" else {**env, **full_env(grad_spec(spec), case, dtype)}
