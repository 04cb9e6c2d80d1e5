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

from harness.correctness import behaviour, calls, guards, numerics, poison  # noqa: F401 - they register the checks
from harness.correctness.args import (
    Arguments,
    clone_args,
    compared,
    is_zero_size,
    make_args,
    reference_args,
    returned_outputs,
    shape_of,
)
from harness.correctness.numerics import bitwise_equal, mismatch  # noqa: F401 - bitwise_equal re-exported
from harness.correctness.registry import DONE, NOT_APPLICABLE, CheckFailure, in_order, reads
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


def call(fn: Callable, args: Arguments, device: str):
    """The call, synchronised; its return value (a provider in its own calling convention returns outputs)."""
    value = fn(**args.kwargs())
    sync(device)
    return value


REFERENCE = "reference"
# What can fail when the reference backend is the kernel under test and no oracle is declared: the reference
# would be its own oracle, so numerics, NaN/Inf, poison and determinism compare it with itself.
REFERENCE_CHECKS = frozenset({"zero-size", "layout", "inputs"})


def oracle_path(spec: Spec, backend: str) -> str:
    """What a backend's results are compared with: the reference, or for the reference backend itself the
    spec's independent ``oracle`` (its own checks are then the full set)."""
    return spec.oracle if backend == REFERENCE and spec.oracle else spec.reference


def reference_can_fail(spec: Spec, case: Case) -> bool:
    """Whether the reference backend, checked with :data:`REFERENCE_CHECKS` alone, has anything to check at
    ``case``: a 0-size tensor or a non-contiguous layout. Elsewhere it would be tested against itself."""
    if spec.oracle or case.layout != "contiguous":
        return True
    env = spec.env(case)
    return any(0 in shape_of(t, env) for t in spec.present(env))


def checks_for(spec: Spec, backend: str) -> frozenset[str] | None:
    """The check rows that run for this backend: None for all of them."""
    return REFERENCE_CHECKS if backend == REFERENCE and not spec.oracle else None


def callables(spec: Spec, backend: str) -> tuple[Callable, Callable]:
    """(the backend's implementation, what its results are compared with), resolved."""
    from harness.spec.imports import resolve_import

    impl = spec.reference if backend == REFERENCE else spec.backends[backend].impl
    return resolve_import(impl), resolve_import(oracle_path(spec, backend))


class ReferenceCache:
    """The reference's results for the last (kernel, case, dtype, seed): the providers of one benchmark case
    are checked against one reference call, however large the case."""

    def __init__(self):
        self._key, self._value = None, None

    def get(self, key: tuple, compute: Callable[[], dict]) -> dict:
        if key != self._key:
            self._key, self._value = None, None  # free the old one before computing the new
            self._value, self._key = compute(), key
        return self._value

    def peek(self, key: tuple) -> dict | None:
        """The results for ``key`` if a check computed them, else None."""
        return self._value if key == self._key else None


def reference_key(ctx: CaseContext) -> tuple:
    return (ctx.spec.name, ctx.spec.sha256, ctx.case.tier, ctx.case.id, ctx.dtype, ctx.seed)


def _aliases(a, b) -> bool:
    """Whether a returned tensor is a view of the input (Liger's RoPE returns the q and k it rotated in place)."""
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


class TimedCheck:
    """The re-check of the calls a benchmark times (harness.timing.engine.TimedOutputs): the outputs are poisoned
    before every timed call, outside the timed region, and a sample of the timed calls' outputs is compared with
    the reference. A launcher that replays a result, or whose work is still in flight when it returns, fails
    here however fast it looks."""

    def __init__(self, spec: Spec, dtype: str, case: Case, args: Arguments, ref: dict):
        self.spec, self.dtype, self.case, self.args, self.ref = spec, dtype, case, args, ref
        self.value = None

    def wrap(self, call: Callable[[], object]) -> Callable[[], None]:
        """``call`` with its return value kept (a provider that returns its outputs)."""
        def timed():
            self.value = call()
        return timed

    def before(self) -> None:
        for t in self.args.passed(self.spec.outputs):  # a grad spec's gradient of an absent input is absent
            poison.poison(self.args.tensors[t.name], 0)

    def verify(self) -> None:
        returned = returned_outputs(self.spec, self.value, self.args.absent)
        for t in compared(self.args.passed(self.spec.written), returned):
            if t.inplace and (t.name not in returned or _aliases(returned[t.name], self.args.tensors[t.name])):
                continue  # an in-place input holds the result of every call so far, not of one
            got = returned.get(t.name, self.args.tensors[t.name])
            problem = mismatch(got, self.ref[t.name], self.spec.tolerance(self.dtype, t.name, self.case),
                               atol_floor=self.spec.atol_floor)
            if problem:
                raise CheckFailure("timed outputs", f"{t.name}: a timed call's outputs do not match the reference "
                                                    f"(poisoned before each call; checked after the 1st, 2nd, "
                                                    f"4th, ... sample): {problem}")


class CaseRun:
    """The calls of one case, each made when a check first needs it (the main run at once)."""

    def __init__(self, ctx: CaseContext, fn: Callable, ref_fn: Callable, reference: ReferenceCache | None = None):
        spec = ctx.spec
        self.ctx, self.fn, self.ref_fn, self.reference, self.notes = ctx, fn, ref_fn, reference, []
        self.args = make_args(spec, ctx.case, ctx.dtype, ctx.device, ctx.seed)
        self.pristine = clone_args(self.args)
        self.refusal_expected = spec.must_refuse(ctx.backend, ctx.case.layout)
        self.zero_size = is_zero_size(self.args)
        self.main_error: Exception | None = None
        self.zero_size_error: Exception | None = None
        self.empty_launches: list = []
        self.returned: frozenset[str] = frozenset()  # outputs the call returned instead of writing
        value = None
        try:
            if self.zero_size:
                from harness.correctness.launches import empty_grid_launches

                with empty_grid_launches() as self.empty_launches:
                    value = call(fn, self.args, ctx.device)
            else:
                value = call(fn, self.args, ctx.device)
        except Exception as exc:
            if self.zero_size and not self.refusal_expected:
                # The zero-size check's to report, in one line naming the check: a crash at batch 0 is the
                # kernel's defect, not the harness's error.
                self.zero_size_error = exc
                self.main_error = exc
                value = None
            elif not self.refusal_expected:
                raise
            else:
                self.main_error = exc  # the declared behaviour for a layout the spec does not list
        self.got = self._written(self.args, value) if self.zero_size_error is None else {}
        self.returned = frozenset(returned_outputs(spec, value, self.args.absent))

    def _written(self, args: Arguments, value=None) -> dict[str, torch.Tensor]:
        returned = returned_outputs(self.ctx.spec, value, args.absent)
        for name, x in returned.items():
            want = tuple(args.tensors[name].shape)
            if not isinstance(x, torch.Tensor) or tuple(x.shape) != want:
                got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
                raise CheckFailure("numerics", f"{name}: returned {got}, expected shape {want}")
        return {t.name: returned.get(t.name, args.tensors[t.name])
                for t in compared(args.passed(self.ctx.spec.written), returned)}

    @property
    def compared(self) -> tuple:
        """The written tensors the checks compare: every one, but a statistic (grad = false) that a call
        returning its outputs left out."""
        return compared(self.args.passed(self.ctx.spec.written), self.returned)

    @functools.cached_property
    def ref(self) -> dict[str, torch.Tensor]:
        """The reference's results, at the spec's reference precision."""
        def compute():
            ref_args = reference_args(self.ctx.spec, self.pristine, self.ctx.dtype)
            return self._written(ref_args, call(self.ref_fn, ref_args, self.ctx.device))

        if self.reference is None:
            return compute()
        return self.reference.get(reference_key(self.ctx), compute)

    @functools.cached_property
    def contiguous(self) -> dict[str, torch.Tensor]:
        """The kernel's results on contiguous copies of the inputs."""
        args = clone_args(self.pristine, layout="contiguous")
        value = call(self.fn, args, self.ctx.device)
        guards.verify(args, "in the run on contiguous copies")
        return self._written(args, value)

    @functools.cached_property
    def second(self) -> dict[str, torch.Tensor]:
        """A second run on the same inputs, its outputs filled with the other poison."""
        return self._written(self.second_args, self._second_value)

    @functools.cached_property
    def second_args(self) -> Arguments:
        """The second run's arguments, after its call: the stale check calls the kernel on them again, so the
        second run is also its first call on those buffers (one interpreted call fewer per case)."""
        args = clone_args(self.pristine)
        for t in self.ctx.spec.outputs:
            poison.poison(args.tensors[t.name], 1)
        self._second_value = call(self.fn, args, self.ctx.device)
        guards.verify(args, "in the second run")
        return args

    # The cached results of the calls above, which release() drops (registry.check's ``reads`` names them).
    RESULTS = ("ref", "contiguous", "second", "second_args")

    def release(self, keep: set[str]) -> None:
        """Drop the cached results no later check reads (``keep``): their tensors are freed now, not with the case
        (layernorm fp32 at 2**31 elements ran out of memory in the graph check with all of them held)."""
        if "second" in keep:
            keep = keep | {"second_args"}  # made by second_args' call, which second reads
        for name in self.RESULTS:
            if name not in keep:
                self.__dict__.pop(name, None)
        if "second_args" not in keep:
            self.__dict__.pop("_second_value", None)


def run_checks(ctx: CaseContext, fn: Callable, ref_fn: Callable, *, reference: ReferenceCache | None = None,
               only: frozenset[str] | None = None) -> Outcome:
    """Run every check (or the rows in ``only``) on one (backend, dtype, case); raise CheckFailure on the first
    that fails. The one correctness path: generated tests, ``bench`` and the gate all come here.

    The failure's message ends with the context: spec, backend, dtype, case, seed and architecture.
    """
    try:
        return _run_checks(ctx, fn, ref_fn, reference, only)
    except CheckFailure as exc:
        failure = CheckFailure(exc.check, f"{str(exc).partition(': ')[2]}\n{ctx.describe()}")
    # Raised outside the handler so no traceback keeps the case's tensors (GBs on a huge case) alive.
    raise failure


def _run_checks(ctx: CaseContext, fn: Callable, ref_fn: Callable, reference, only) -> Outcome:
    run, outcome = CaseRun(ctx, fn, ref_fn, reference), Outcome()
    rows = [(info, impl) for info, impl in in_order() if only is None or info.name in only]
    runs = [info.name for info, _ in rows if not (info.waivable and info.name in ctx.spec.waivers)]
    for info, implementation in rows:
        if info.name not in runs:
            outcome.notes.append(f"{info.name} waived: {ctx.spec.waivers[info.name]}")
            if info.name == "zero-size" and run.zero_size_error is not None:
                break  # the 0-size call raised, as waived: there is nothing for the later checks to read
            continue
        verdict = implementation(run)
        if verdict != NOT_APPLICABLE:
            outcome.checks.append(info.name)
        if verdict == DONE:
            break
        run.release(keep=set().union(*(reads(name) for name in runs[runs.index(info.name) + 1:])))
    outcome.notes[:0] = run.notes
    return outcome
