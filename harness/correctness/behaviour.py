"""The checks on how a kernel behaves across calls: zero-size launches, layouts, its inputs, determinism."""

from __future__ import annotations

from harness.correctness.numerics import bitwise_equal, fmt, mismatch
from harness.correctness.poison import first_index
from harness.correctness.registry import DONE, NOT_APPLICABLE, CheckFailure, check


@check("zero-size")
def check_zero_size(run):
    if not run.zero_size or run.main_error is not None:
        return NOT_APPLICABLE
    if run.empty_launches:
        name, grid = run.empty_launches[0]
        raise CheckFailure("zero-size", f"launched {name} with an empty grid {grid}: return early on 0-size "
                                        "inputs instead of launching")
    return None


@check("layout")
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
    for t in ctx.spec.written:
        problem = mismatch(run.got[t.name], contiguous[t.name], ctx.spec.tolerance(ctx.dtype, t.name))
        if problem:
            raise CheckFailure("layout", f"{t.name}: the {layout} input gives a different result than its "
                                         f"contiguous copy: {problem}")
    return None


@check("inputs")
def check_inputs(run):
    for t in run.ctx.spec.inputs:
        if t.inplace:
            continue
        now, was = run.args.tensors[t.name], run.pristine.tensors[t.name]
        same = bitwise_equal(now, was)
        if not same.all():
            idx = first_index(~same)
            raise CheckFailure("inputs", f"{t.name} is not declared inplace but the kernel changed "
                                         f"{int((~same).sum())} of its elements, first at index {idx}: now "
                                         f"{fmt(now, idx)}, was {fmt(was, idx)}")
    return None


@check("determinism")
def check_determinism(run):
    second = run.second
    for t in run.ctx.spec.written:
        first, again = run.got[t.name], second[t.name]
        same = bitwise_equal(first, again)
        if not same.all():
            idx = first_index(~same)
            raise CheckFailure("determinism", f"{t.name}: a second run on the same inputs differs in "
                                              f"{int((~same).sum())} elements, first at index {idx}: first run "
                                              f"{fmt(first, idx)}, second run {fmt(again, idx)}")
    return None
