"""The checks on how a kernel behaves across calls: zero-size launches, layouts, its inputs, determinism."""

from __future__ import annotations

from harness.correctness.numerics import bitwise_equal, fmt, mismatch
from harness.correctness.poison import first_index
from harness.correctness.registry import DONE, NOT_APPLICABLE, CheckFailure, check


@check("zero-size")
def check_zero_size(run):
    """A crash on 0-size inputs fails (the check names it, with the error); a Triton launch with an empty grid
    is harmless (Triton's launcher returns before the driver sees it) and is noted. A CUDA launch with an
    empty grid is an error the driver raises, and a write outside a tensor is the guards' failure."""
    if not run.zero_size:
        return NOT_APPLICABLE
    exc = run.zero_size_error
    if exc is not None:
        text = str(exc).strip().splitlines()
        raise CheckFailure("zero-size", f"crashed on 0-size inputs: {type(exc).__name__}: {text[0] if text else ''}"
                                        [:400])
    if run.main_error is not None:
        return NOT_APPLICABLE
    for name, grid in run.empty_launches[:1]:
        run.notes.append(f"zero-size: launched {name} with an empty grid {grid}: harmless (Triton skips it)")
    return None


@check("layout", reads=("contiguous",))
def check_layout(run):
    ctx = run.ctx
    layout = ctx.case.layout
    if run.refusal_expected:
        if run.main_error is None:
            raise CheckFailure("layout", f"the spec does not list the {layout!r} layout for backend "
                                         f"{ctx.backend!r}, so the launcher must raise a clear error, but it ran")
        exc = run.main_error
        run.notes.append(f"{layout} input refused as declared: {type(exc).__name__}: {exc}")
        return DONE
    if layout == "contiguous":
        return NOT_APPLICABLE
    contiguous = run.contiguous
    for t in run.compared:
        problem = mismatch(run.got[t.name], contiguous[t.name], ctx.spec.tolerance(ctx.dtype, t.name))
        if problem:
            raise CheckFailure("layout", f"{t.name}: the {layout} input gives a different result than its "
                                         f"contiguous copy: {problem}")
    return None


@check("inputs")
def check_inputs(run):
    for t in run.args.passed(run.ctx.spec.inputs):
        if t.inplace:
            continue
        _bitwise_same("inputs", run.args.tensors[t.name], run.pristine.tensors[t.name],
                      f"{t.name} is not declared inplace but the kernel changed", "of its elements", ("now", "was"))
    return None


@check("determinism", reads=("second",))
def check_determinism(run):
    second = run.second
    for t in run.compared:
        _bitwise_same("determinism", run.got[t.name], second[t.name],
                      f"{t.name}: a second run on the same inputs differs in", "elements", ("first run", "second run"))
    return None


def _bitwise_same(name: str, a, b, head: str, unit: str, labels: tuple[str, str]) -> None:
    """Raise the check's failure, with the count and the first differing index, unless a and b match bitwise."""
    same = bitwise_equal(a, b)
    if not same.all():
        idx = first_index(~same)
        raise CheckFailure(name, f"{head} {int((~same).sum())} {unit}, first at index {idx}: {labels[0]} "
                                 f"{fmt(a, idx)}, {labels[1]} {fmt(b, idx)}")
