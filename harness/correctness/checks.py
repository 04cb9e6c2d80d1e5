"""The generic correctness checks every generated test runs, in order, on one kernel call.

Each check is a small function registered in ``CHECKS``; a failure raises :class:`CheckFailure` whose
message starts with the check's name and ends with the context (spec, case, dtype, seed, arch).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from harness.correctness.args import Arguments, clone_args, is_zero_size, make_args, poisoned_mask, reference_dtype
from harness.spec.model import Case, Spec, Tolerance


class CheckFailure(AssertionError):
    def __init__(self, check: str, message: str):
        self.check = check
        super().__init__(f"{check}: {message}")


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


_CHUNK = 1 << 26  # elements compared at a time: a >2**31-element case must not need 5 full-size temporaries


def mismatch(got: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> str | None:
    """None when ``got`` matches ``expected`` within tolerance, else a summary of the mismatches."""
    if expected.numel() > _CHUNK:
        g_flat, e_flat = got.reshape(-1), expected.reshape(-1)
        for start in range(0, e_flat.numel(), _CHUNK):
            if _mismatch(g_flat[start:start + _CHUNK], e_flat[start:start + _CHUNK], tol) is not None:
                return _mismatch(got, expected, tol)  # the full summary, only on failure
        return None
    return _mismatch(got, expected, tol)


def _mismatch(got: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> str | None:
    g = got.to(expected.dtype)
    finite = torch.isfinite(expected) & torch.isfinite(g)
    err = (g - expected).abs().masked_fill(~finite, 0)
    bad = (err > tol.atol + tol.rtol * expected.abs()) | (torch.isfinite(g) ^ torch.isfinite(expected))
    n_bad = int(bad.sum())
    if n_bad == 0:
        return None
    err = err.masked_fill(~finite & bad, float("inf"))
    rel = err / expected.abs().clamp_min(torch.finfo(expected.dtype).tiny)
    first = tuple(int(i) for i in torch.nonzero(bad)[0].tolist())
    return (f"{n_bad} of {expected.numel()} elements ({100.0 * n_bad / expected.numel():.3g}%) outside "
            f"atol={tol.atol:g} rtol={tol.rtol:g}; max abs err {float(err.max()):.4g}, "
            f"max rel err {float(rel.masked_fill(~bad, 0).max()):.4g}; first bad index {first}: "
            f"got {float(g[first]):.6g}, expected {float(expected[first]):.6g}")


def _first(mask: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.nonzero(mask)[0].tolist())


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise bit equality (NaN == NaN when the bits match)."""
    if a.dtype.is_floating_point:
        int_dtype = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[a.element_size()]
        return a.contiguous().view(int_dtype) == b.contiguous().view(int_dtype)
    return a == b


# --- the checks ---------------------------------------------------------------------------------

def check_poison(ctx: CaseContext, got: dict, ref: dict) -> None:
    for t in ctx.spec.outputs:
        mask = poisoned_mask(got[t.name])
        if mask.any():
            n = int(mask.sum())
            raise CheckFailure("poison", f"{t.name}: {n} of {mask.numel()} elements never written (still hold the "
                                         f"NaN poison), first at index {_first(mask)}")


def check_nan_inf(ctx: CaseContext, got: dict, ref: dict) -> None:
    for t in ctx.spec.written:
        g, e = got[t.name], ref[t.name]
        if not g.dtype.is_floating_point:
            continue
        g_bad, e_bad = ~torch.isfinite(g), ~torch.isfinite(e)
        extra = g_bad & ~e_bad
        if extra.any():
            idx = _first(extra)
            raise CheckFailure("nan_inf", f"{t.name}: {int(extra.sum())} NaN/Inf values where the reference is "
                                          f"finite, first at index {idx} (got {float(g[idx])}, "
                                          f"expected {float(e[idx]):.6g})")
        missing = e_bad & ~g_bad
        if missing.any():
            raise CheckFailure("nan_inf", f"{t.name}: finite values where the reference has NaN/Inf, first at "
                                          f"index {_first(missing)}")


def check_numerics(ctx: CaseContext, got: dict, ref: dict) -> None:
    tol = ctx.spec.tolerance(ctx.dtype)
    for t in ctx.spec.written:
        problem = mismatch(got[t.name], ref[t.name], tol)
        if problem:
            raise CheckFailure("numerics", f"{t.name}: {problem}")


CHECKS: dict[str, Callable] = {"poison": check_poison, "nan_inf": check_nan_inf, "numerics": check_numerics}


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
    spec, outcome = ctx.spec, Outcome()
    args = make_args(spec, ctx.case, ctx.dtype, ctx.device, ctx.seed)
    pristine = clone_args(args)
    layout = ctx.case.layout
    if layout != "contiguous" and layout not in spec.layouts_for(ctx.backend) and "layout" not in spec.waivers:
        try:
            call(fn, args, ctx.device)
        except Exception as exc:  # the declared behaviour: refuse, clearly
            outcome.notes.append(f"{layout} input refused as declared: {type(exc).__name__}: {exc}")
            outcome.checks.append("layout")
            return outcome
        raise CheckFailure("layout", f"the spec does not list the {layout!r} layout for backend {ctx.backend!r}, "
                                     "so the launcher must raise a clear error, but it ran")
    ref_args = clone_args(args, layout="contiguous", dtype_map=lambda d: _promote(d, ctx.dtype))
    if is_zero_size(args):
        from harness.correctness.launches import empty_grid_launches

        with empty_grid_launches() as empty:
            call(fn, args, ctx.device)
        if empty:
            name, grid = empty[0]
            raise CheckFailure("zero-size", f"launched {name} with an empty grid {grid}: return early on 0-size "
                                            "inputs instead of launching")
    else:
        call(fn, args, ctx.device)
    call(ref_fn, ref_args, ctx.device)
    got = {t.name: args.tensors[t.name] for t in spec.written}
    ref = {t.name: ref_args.tensors[t.name] for t in spec.written}
    if layout != "contiguous" and "layout" not in spec.waivers:
        # First, so a kernel that ignores strides is named as such rather than as a numerics failure.
        contiguous = clone_args(pristine, layout="contiguous")
        call(fn, contiguous, ctx.device)
        for t in spec.written:
            problem = mismatch(got[t.name], contiguous.tensors[t.name], spec.tolerance(ctx.dtype))
            if problem:
                raise CheckFailure("layout", f"{t.name}: the {layout} input gives a different result than its "
                                             f"contiguous copy: {problem}")
        outcome.checks.append("layout")
    for name, check in CHECKS.items():
        if name not in spec.waivers:
            check(ctx, got, ref)
            outcome.checks.append(name)
    _check_inputs(ctx, args, pristine, outcome)
    if "determinism" in spec.waivers:
        outcome.notes.append(f"determinism waived: {spec.waivers['determinism']}")
    else:
        again = clone_args(pristine)
        call(fn, again, ctx.device)
        for t in spec.written:
            same = bitwise_equal(got[t.name], again.tensors[t.name])
            if not same.all():
                raise CheckFailure("determinism", f"{t.name}: a second run on the same inputs differs in "
                                                  f"{int((~same).sum())} elements, first at index {_first(~same)}")
        outcome.checks.append("determinism")
    if is_zero_size(args):
        outcome.checks.append("zero-size")
    return outcome


def _check_inputs(ctx: CaseContext, args: Arguments, pristine: Arguments, outcome: Outcome) -> None:
    if "inputs" in ctx.spec.waivers:
        return
    for t in ctx.spec.inputs:
        if t.inplace:
            continue
        same = bitwise_equal(args.tensors[t.name], pristine.tensors[t.name])
        if not same.all():
            raise CheckFailure("inputs", f"{t.name} is not declared inplace but the kernel changed "
                                         f"{int((~same).sum())} of its elements, first at index {_first(~same)}")
    outcome.checks.append("inputs")


def _promote(dtype: torch.dtype, case_dtype: str) -> torch.dtype:
    if not dtype.is_floating_point:
        return dtype
    from harness.correctness.args import TORCH_DTYPES

    return torch.promote_types(dtype, reference_dtype(TORCH_DTYPES[case_dtype]))
