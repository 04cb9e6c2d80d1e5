"""The runner of the generic correctness checks every generated test runs on one (backend, dtype, case).

The checks are the rows of :data:`harness.spec.checks.CHECKS`; each row's implementation is registered with
``@check(name)`` in :mod:`~harness.correctness.guards`, :mod:`~harness.correctness.poison`,
:mod:`~harness.correctness.numerics` or :mod:`~harness.correctness.behaviour`, and :func:`run_checks` runs
them in the rows' order, skipping a waivable one the spec waives. A check reads the case's calls from a
:class:`CaseRun`, which makes each call the first time a check needs it: the main run, the reference, the
run on contiguous copies (layout) and the second run (determinism, and poison when the first run left
candidates). A failure raises :class:`CheckFailure` whose message starts with the check's name and ends
with the context (spec, case, dtype, seed, arch).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from harness.correctness import behaviour, guards, numerics, poison  # noqa: F401 - they register the checks
from harness.correctness.args import Arguments, clone_args, is_zero_size, make_args, reference_args
from harness.correctness.numerics import bitwise_equal, mismatch  # noqa: F401 - re-exported
from harness.correctness.registry import DONE, NOT_APPLICABLE, CheckFailure, in_order
from harness.spec.model import Case, Spec


@dataclass(frozen=True)
class CaseContext:
    spec: Spec
    backend: str
    dtype: str
    case: Case
    seed: int
    arch: str
    device: str

    def describe(self) -> str:
        return (f"[{self.spec.name} backend={self.backend} dtype={self.dtype} case={self.case.tier}:{self.case.id} "
                f"seed={self.seed} arch={self.arch} spec={self.spec.path}]")


@dataclass
class Outcome:
    notes: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)


def sync(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def call(fn: Callable, args: Arguments, device: str) -> None:
    fn(**args.kwargs())
    sync(device)


class CaseRun:
    """The calls of one case, each made when a check first needs it (the main run at once)."""

    def __init__(self, ctx: CaseContext, fn: Callable, ref_fn: Callable):
        spec = ctx.spec
        self.ctx, self.fn, self.ref_fn, self.notes = ctx, fn, ref_fn, []
        self.args = make_args(spec, ctx.case, ctx.dtype, ctx.device, ctx.seed)
        self.pristine = clone_args(self.args)
        layout = ctx.case.layout
        self.refusal_expected = (layout != "contiguous" and layout not in spec.layouts_for(ctx.backend)
                                 and "layout" not in spec.waivers)
        self.zero_size = is_zero_size(self.args)
        self.main_error: Exception | None = None
        self.empty_launches: list = []
        try:
            if self.zero_size:
                from harness.correctness.launches import empty_grid_launches

                with empty_grid_launches() as self.empty_launches:
                    call(fn, self.args, ctx.device)
            else:
                call(fn, self.args, ctx.device)
        except Exception as exc:
            if not self.refusal_expected:
                raise
            self.main_error = exc  # the declared behaviour for a layout the spec does not list
        self.got = self._written(self.args)

    def _written(self, args: Arguments) -> dict[str, torch.Tensor]:
        return {t.name: args.tensors[t.name] for t in self.ctx.spec.written}

    @functools.cached_property
    def ref(self) -> dict[str, torch.Tensor]:
        """The reference's results, at the spec's reference precision."""
        ref_args = reference_args(self.ctx.spec, self.pristine, self.ctx.dtype)
        call(self.ref_fn, ref_args, self.ctx.device)
        return self._written(ref_args)

    @functools.cached_property
    def contiguous(self) -> dict[str, torch.Tensor]:
        """The kernel's results on contiguous copies of the inputs."""
        args = clone_args(self.pristine, layout="contiguous")
        call(self.fn, args, self.ctx.device)
        guards.verify(args, "in the run on contiguous copies")
        return self._written(args)

    @functools.cached_property
    def second(self) -> dict[str, torch.Tensor]:
        """A second run on the same inputs, its outputs filled with the other poison."""
        args = clone_args(self.pristine)
        for t in self.ctx.spec.outputs:
            poison.poison(args.tensors[t.name], 1)
        call(self.fn, args, self.ctx.device)
        guards.verify(args, "in the second run")
        return self._written(args)


def run_checks(ctx: CaseContext, fn: Callable, ref_fn: Callable) -> Outcome:
    """Run every check on one (backend, dtype, case); raise CheckFailure on the first that fails.

    The failure's message ends with the context: spec, backend, dtype, case, seed and architecture.
    """
    try:
        return _run_checks(ctx, fn, ref_fn)
    except CheckFailure as exc:
        failure = CheckFailure(exc.check, f"{str(exc).partition(': ')[2]}\n{ctx.describe()}")
    # Raised outside the handler so no traceback keeps the case's tensors (GBs on a huge case) alive.
    raise failure


def _run_checks(ctx: CaseContext, fn: Callable, ref_fn: Callable) -> Outcome:
    run, outcome = CaseRun(ctx, fn, ref_fn), Outcome()
    for info, implementation in in_order():
        if info.waivable and info.name in ctx.spec.waivers:
            outcome.notes.append(f"{info.name} waived: {ctx.spec.waivers[info.name]}")
            continue
        verdict = implementation(run)
        if verdict != NOT_APPLICABLE:
            outcome.checks.append(info.name)
        if verdict == DONE:
            break
    outcome.notes[:0] = run.notes
    return outcome
