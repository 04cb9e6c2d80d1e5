"""A spec's backends as PyTorch custom ops, derived from the spec alone: nothing is written per kernel.

``register(spec, backend)`` defines ``kernel_harness::<kernel>_<backend>``: its schema takes the spec's inputs
(in-place ones marked mutable, optional ones ``Tensor?``) and params (optional ones ``float?``), and returns its
outputs. The op allocates the outputs (shapes from the spec's output expressions, the symbols bound from the
actual input sizes), calls the implementation by the calling convention and returns what it wrote, or what
it returned (:func:`~harness.correctness.args.returned_outputs`); the fake implementation allocates the same,
so SymInt sizes flow through the shape arithmetic and dynamic shapes work under torch.compile. A spec's
``[kernel] op`` names the kernel's own registration instead (:func:`kernel_op`).
"""

from __future__ import annotations

import re

import torch

from harness.correctness.args import TORCH_DTYPES, returned_outputs, shape_of
from harness.spec import expr as ex
from harness.spec.imports import resolve_import
from harness.spec.model import Spec

NAMESPACE = "kernel_harness"
_SCHEMA_TYPES = ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"))  # bool before int: a subclass
# qualname -> (what it was made from, the op): registration is idempotent per process, and a spec changed on
# disk (tests write specs of one name with other kernels) re-registers instead of reusing a stale op.
_REGISTERED: dict[str, tuple[tuple, object]] = {}


class OpRegistrationError(ValueError):
    """The spec cannot be turned into an op: one line naming the spec file and key."""


def op_name(spec: Spec, backend: str) -> str:
    return f"{NAMESPACE}::{re.sub(r'[^0-9A-Za-z_]', '_', f'{spec.name}_{backend}')}"


def implementation(spec: Spec, backend: str) -> str:
    return spec.reference if backend == "reference" else spec.backends[backend].impl


def kernel_op(spec: Spec, backend: str):
    """The op the checks look at: the spec's own ``[kernel] op``, else the harness's registration."""
    if spec.op:
        op = resolve_import(spec.op)
        return getattr(op, "_opoverload", op)  # a CustomOpDef: the OpOverload it defined
    return register(spec, backend)


def register(spec: Spec, backend: str):
    """The OpOverload of ``backend`` (or ``"reference"``) of ``spec``, defined on first use."""
    qualname, impl = op_name(spec, backend), implementation(spec, backend)
    key = (spec.path, spec.sha256, impl)
    known = _REGISTERED.get(qualname)
    if known is not None and known[0] == key:
        return known[1]
    schema = op_schema(spec)
    _check_shapes(spec)
    fn = resolve_import(impl)
    names = [t.name for t in spec.inputs] + list(spec.params)
    mutated = [t.name for t in spec.inputs if t.inplace]

    def named(args: tuple, kwargs: dict) -> dict:
        return {**dict(zip(names[:len(args)], args, strict=True)), **kwargs}

    def real(*args, **kwargs):
        values = named(args, kwargs)
        outs = allocate(spec, values)
        value = fn(**values, **outs)
        absent = [t.name for t in spec.inputs if values[t.name] is None]
        return _returns(_results(spec, values, outs, returned_outputs(spec, value, absent)))

    def fake(*args, **kwargs):
        return _returns(allocate(spec, named(args, kwargs)))

    opdef = torch.library.custom_op(qualname, real, mutates_args=mutated, schema=schema)
    opdef.register_fake(fake)
    _REGISTERED[qualname] = (key, opdef._opoverload)
    return opdef._opoverload


def _results(spec: Spec, values: dict, outs: dict, returned: dict) -> dict[str, torch.Tensor]:
    """The op's outputs from a call that wrote ``outs`` or returned ``returned``. An in-place input returned
    as another tensor is copied into the input: the schema says the op mutates it."""
    for t in spec.inputs:
        x, y = values[t.name], returned.get(t.name)
        if t.inplace and y is not None and not _same_view(x, y):
            x.copy_(y)
    results, storages = {}, {_storage(x) for x in values.values() if isinstance(x, torch.Tensor)}
    for t in spec.outputs:
        if returned and t.name not in returned:  # a statistic (grad = false) the call kept: zeros, defined
            outs[t.name].zero_()
        y = returned.get(t.name, outs[t.name])
        if _storage(y) in storages:
            # custom_op forbids an output that aliases an input or another output (a library that returns its
            # input, or a view of it, unchanged): a clone here, where no timing runs, keeps its values
            y = y.clone()
        storages.add(_storage(y))
        results[t.name] = y
    return results


def _storage(x: torch.Tensor) -> int:
    return x.untyped_storage().data_ptr()


def _same_view(x: torch.Tensor, y: torch.Tensor) -> bool:
    return (x.data_ptr(), x.shape, x.stride(), x.dtype) == (y.data_ptr(), y.shape, y.stride(), y.dtype)


def op_schema(spec: Spec) -> str:
    """``(Tensor x, Tensor(a!) residual, Tensor? weight, float eps) -> (Tensor, Tensor)``: inputs, params,
    outputs."""
    args, mutated = [], 0
    for t in spec.inputs:
        kind = f"Tensor({_alias(mutated)}!)" if t.inplace else "Tensor"
        args.append(f"{kind}{'?' if t.present is not None else ''} {t.name}")
        mutated += t.inplace
    for name in spec.params:
        value = next((v for env in _envs(spec) if (v := spec.param_values(env)[name]) is not None), None)
        kind = next((s for cls, s in _SCHEMA_TYPES if isinstance(value, cls)), None)
        if kind is None:
            raise OpRegistrationError(f"{spec.path}: params.{name}: {value!r} is no int, float, bool or str")
        args.append(f"{kind}{'?' if name in spec.param_present else ''} {name}")
    outs = ["Tensor"] * len(spec.outputs)
    returns = "()" if not outs else outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
    return f"({', '.join(args)}) -> {returns}"


def _alias(i: int) -> str:
    """a, b, ..., z, ba, bb: one alias set per mutated input."""
    return "".join(chr(ord("a") + int(d, 26)) for d in _base26(i))


def _base26(i: int) -> str:
    digits = ""
    while True:
        i, d = divmod(i, 26)
        digits = "0123456789abcdefghijklmnop"[d] + digits
        if not i:
            return digits


def _envs(spec: Spec):
    """The cases' symbols, the edge and ci cases first: where a param's type is read (one where it is passed)."""
    tiers = ("edge", "ci") + tuple(t for t in spec.cases if t not in ("edge", "ci"))
    return (spec.env(c) for tier in tiers for c in spec.cases.get(tier, ()))


def bind(spec: Spec, values: dict) -> dict:
    """The symbols an output shape may use, from the actual input sizes (ints or SymInts) and params.

    A dimension that is a bare symbol binds it; one with a single unknown symbol, linear in it ("2 * d"),
    solves for it; then the spec's derived symbols and defaults fill in what is left."""
    env = {bare_symbol(p): values[n] for n, p in spec.params.items() if bare_symbol(p) and values[n] is not None}
    dims = [(t, i, d, values[t.name].shape[i]) for t in spec.inputs if values[t.name] is not None
            for i, d in enumerate(t.shape)]
    for _t, _i, d, size in dims:
        if bare_symbol(d):
            env.setdefault(bare_symbol(d), size)
    progress = True
    while progress:
        progress = False
        for t, i, d, size in dims:
            unknown = d.names - env.keys()
            if len(unknown) != 1:
                continue
            (u,) = unknown
            at0, at1 = d({**env, u: 0}), d({**env, u: 1})
            slope = at1 - at0
            if not isinstance(slope, int) or slope == 0:
                continue  # not solvable without guessing (a symbolic or zero coefficient)
            env[u] = (size - at0) // slope
            torch._check(slope * env[u] + at0 == size,
                         lambda t=t, i=i, d=d, size=size: f"{t.name} dimension {i} is {size}, not {d.source}")
            progress = True
        for name, e in spec.symbols.items():
            if name not in env and e.names <= env.keys():
                env[name] = e(env)
                progress = True
    return env


def bare_symbol(e: ex.Expr) -> str | None:
    """The symbol an expression is, when it is one bare symbol."""
    body = e.tree.body
    return body.id if isinstance(body, ex.ast.Name) and body.id in e.names else None


def allocate(spec: Spec, values: dict) -> dict[str, torch.Tensor]:
    """Empty outputs for the inputs in ``values``: the declared shapes and dtypes, on the inputs' device."""
    if not spec.outputs:
        return {}
    tensors = [(t, values[t.name]) for t in spec.inputs if values[t.name] is not None]
    env = bind(spec, values)
    case_dtype = next((x.dtype for t, x in tensors if t.dtype == "case"), None)
    if case_dtype is None and len(spec.dtypes) == 1:  # every input fixed (FP8 operands): one case dtype to take
        case_dtype = TORCH_DTYPES[spec.dtypes[0]]
    device = tensors[0][1].device
    outs = {}
    for t in spec.outputs:
        dtype = case_dtype if t.dtype == "case" else TORCH_DTYPES[t.dtype]
        outs[t.name] = torch.empty(list(t.dims(env)), dtype=dtype, device=device)
    return outs


def _returns(outs: dict[str, torch.Tensor]):
    values = tuple(outs.values())
    return None if not values else values[0] if len(values) == 1 else values


def _check_shapes(spec: Spec) -> None:
    """Every output shape and dtype the op derives must equal the spec's, on every declared case."""
    if spec.outputs and len(spec.dtypes) > 1 and not any(t.dtype == "case" for t in spec.inputs) and any(
            t.dtype == "case" for t in spec.outputs):
        name = next(t.name for t in spec.outputs if t.dtype == "case")
        raise OpRegistrationError(f"{spec.path}: outputs.{name}.dtype: \"case\" needs an input of the case dtype "
                                  "to take it from, or a kernel with one dtype")
    for case in (c for cases in spec.cases.values() for c in cases):
        env = spec.env(case)
        passed = {t.name for t in spec.present(env)}
        values = {t.name: torch.empty(shape_of(t, env), device="meta") if t.name in passed else None
                  for t in spec.inputs}
        values.update(spec.param_values(env))
        for t in spec.outputs:
            try:
                got = tuple(allocate(spec, values)[t.name].shape)
            except ex.ExprError as exc:
                raise OpRegistrationError(f"{spec.path}: outputs.{t.name}.shape: cannot derive it from the input "
                                          f"shapes and params ({exc}); name the kernel's own op with [kernel] op"
                                          ) from None
            if got != shape_of(t, env):
                raise OpRegistrationError(f"{spec.path}: outputs.{t.name}.shape: derived {list(got)} from the "
                                          f"input shapes, the case {case.id} says {list(shape_of(t, env))}")
