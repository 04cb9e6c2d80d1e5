"""The checks of kernels that fool the clock: results that do not follow their inputs (``stale``), work off the
caller's stream (``stream``) and launchers that break under CUDA-graph capture (``graph``).

A launcher that replays a result, or runs its kernel on a stream of its own, can look infinitely fast and still
pass every check that reads its outputs after a device-wide synchronize. Each check here calls the kernel the
way a serving engine does (the same buffers again with new values, the caller's stream, a captured graph) and
compares with the reference of the values the call should have seen.
"""

from __future__ import annotations

import torch

from harness.correctness.args import Arguments, clone_args, keep_static, make_args, reference_args
from harness.correctness.numerics import mismatch
from harness.correctness.poison import poison
from harness.correctness.registry import NOT_APPLICABLE, CheckFailure, check

# About 25 ms of torch.cuda._sleep at an H200's clocks: long enough that work which does not wait for the
# caller's stream runs, and reads its inputs, before the spin ends and the real inputs are written.
_SPIN_CYCLES = 50_000_000
_OTHER_SEED = 0x5EED


def _other_inputs(run) -> Arguments:
    """Inputs with other values (the case's shapes, dtypes and layout, another seed); a static input keeps its
    own (a weight does not change between a model's calls)."""
    c = run.ctx
    other = make_args(c.spec, c.case, c.dtype, c.device, (c.seed ^ _OTHER_SEED) & 0x7FFFFFFF)
    keep_static(other, run.pristine.tensors, c.spec)
    return other


def _write_inputs(args: Arguments, values: Arguments, spec) -> None:
    for t in args.passed(spec.inputs):
        if not t.static:  # never written, not even with its own values: a write bumps its version counter
            args.tensors[t.name].copy_(values.tensors[t.name])


def _poison_outputs(args: Arguments, spec) -> None:
    for t in spec.outputs:
        poison(args.tensors[t.name], 0)


def _rewrite_inputs(run, args: Arguments) -> Arguments:
    """Writes inputs of other values into ``args`` in place (the same data pointers) and poisons its outputs;
    returns the reference's arguments for those values. The new values' own buffers go before the reference runs:
    a case at 2**31 elements holds several copies already (layernorm fp32 ran out of memory at the stale check on
    the H200 when they stayed)."""
    spec = run.ctx.spec
    other = _other_inputs(run)
    _write_inputs(args, other, spec)
    _poison_outputs(args, spec)
    return reference_args(spec, other, run.ctx.dtype)


def _reference_on(run, ref_args: Arguments) -> dict:
    value = run.ref_fn(**ref_args.kwargs())
    if str(run.ctx.device).startswith("cuda"):
        torch.cuda.synchronize()
    return run._written(ref_args, value)


def _compare(name: str, run, got: dict, ref: dict, what: str) -> None:
    c = run.ctx
    for t in run.compared:
        problem = mismatch(got[t.name], ref[t.name], c.spec.tolerance(c.dtype, t.name, c.case))
        if problem:
            raise CheckFailure(name, f"{t.name}: {what}: {problem}")


def _applies(run) -> bool:
    return not run.zero_size and run.main_error is None


def _needs_cuda(run, name: str):
    run.notes.append(f"{name}: needs a CUDA device (skipped on {run.ctx.device})")
    return NOT_APPLICABLE


@check("stale", reads=("second", "second_args"))
def check_stale(run):
    if not _applies(run):
        return NOT_APPLICABLE
    run.second  # noqa: B018 - its outputs are compared before these buffers are reused
    args = run.second_args  # called once already: whatever the kernel caches for these buffers, it has cached
    ref_args = _rewrite_inputs(run, args)
    value = run.fn(**args.kwargs())
    if str(run.ctx.device).startswith("cuda"):
        torch.cuda.synchronize()
    _compare("stale", run, run._written(args, value), _reference_on(run, ref_args),
             "a second call on the same buffers, with new values written into its inputs, does not match their "
             "reference (a replayed or cached result?)")
    return None


@check("stream", reads=("ref",))
def check_stream(run):
    if not _applies(run):
        return NOT_APPLICABLE
    if not str(run.ctx.device).startswith("cuda"):
        return _needs_cuda(run, "stream")
    spec = run.ctx.spec
    args = clone_args(run.pristine)
    real = clone_args(run.pristine)
    _write_inputs(args, _other_inputs(run), spec)  # what a kernel that does not wait for the caller reads
    _poison_outputs(args, spec)
    caller = torch.cuda.Stream(device=run.ctx.device)
    caller.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(caller):
        torch.cuda._sleep(_SPIN_CYCLES)
        _write_inputs(args, real, spec)
        value = run.fn(**args.kwargs())
        got = {name: x.clone() for name, x in run._written(args, value).items()}  # on the caller's stream
    caller.synchronize()  # that stream only: work left elsewhere is not waited for
    _compare("stream", run, got, run.ref,
             "the kernel did not run on the caller's stream (torch.cuda.current_stream()): read after "
             "synchronizing that stream only, the outputs")
    torch.cuda.synchronize()
    return None


def _first_cause(exc: BaseException) -> BaseException:
    """The error that broke the capture: a host sync inside the call raises first, then ending the capture raises
    "operation failed due to a previous error during capture", which says nothing of the call."""
    while exc.__context__ is not None and exc.__cause__ is None and not exc.__suppress_context__:
        exc = exc.__context__
    return exc


@check("graph")
def check_graph(run):
    if not _applies(run):
        return NOT_APPLICABLE
    if not str(run.ctx.device).startswith("cuda"):
        return _needs_cuda(run, "graph")
    args = clone_args(run.pristine)
    side = torch.cuda.Stream(device=run.ctx.device)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # torch's recipe: warm up on a side stream before capture
        run.fn(**args.kwargs())
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            value = run.fn(**args.kwargs())
    except Exception as exc:  # a host sync, an unjoined side stream, an illegal call during capture
        cause = _first_cause(exc)
        text = str(cause).strip().splitlines()
        torch.cuda.synchronize()
        raise CheckFailure("graph", f"cannot be captured in a CUDA graph: {type(cause).__name__}: "
                                    f"{text[0] if text else ''}"[:400]) from None
    ref_args = _rewrite_inputs(run, args)
    graph.replay()
    torch.cuda.synchronize()
    _compare("graph", run, run._written(args, value), _reference_on(run, ref_args),
             "the captured graph, replayed after new values were copied into its inputs, does not match their "
             "reference (a result cached on the host?)")
    return None
