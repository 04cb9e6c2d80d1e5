"""Turning a spec case into real arguments: seeded inputs, non-contiguous views, poisoned outputs, guard bands.

Everything a check needs to build, copy or re-type the arguments of one call lives here, so the checks and
the benchmark build them the same way; :func:`reference_dtype` is the one home of the reference's precision.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import torch

from harness.correctness.guards import Guard, allocate
from harness.correctness.poison import pad_pattern, poison
from harness.correctness.values import distribution, value_set
from harness.spec.model import Case, Spec, Tensor

TORCH_DTYPES = {
    "fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8,
    "uint8": torch.uint8, "bool": torch.bool, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2,
}
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)
# reference_precision "upcast": the next wider float of the case dtype.
_UPCAST = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.float32: torch.float64,
           torch.float64: torch.float64}


@dataclass(frozen=True)
class Arguments:
    tensors: dict[str, torch.Tensor]   # the tensors the call passes: an absent optional input is not among them
    params: dict[str, object]
    env: dict[str, object]
    guards: dict[str, Guard] = field(default_factory=dict)  # by tensor name: where each sits in its allocation
    absent: tuple[str, ...] = ()       # optional inputs the case leaves out: passed as None, never touched

    def kwargs(self) -> dict:
        return {**self.tensors, **dict.fromkeys(self.absent), **self.params}

    def passed(self, tensors) -> tuple[Tensor, ...]:
        """Those of ``tensors`` (spec tensors) this call passes: what the checks look at."""
        return tuple(t for t in tensors if t.name in self.tensors)


def returned_outputs(spec: Spec, value, absent=()) -> dict:
    """What a call returned, by written tensor name: {} for None (it wrote its arguments), a tensor for the
    single written one, a tuple in ``spec.written`` order or a dict by name (an absent optional input left
    out). Peers whose library returns new tensors return them, so their timing holds no copy into the
    harness's buffers; the checks and the op (:mod:`harness.correctness.ops`) read them the same way.

    A call may leave out the outputs no gradient flows from (``grad = false``: statistics a library's
    autograd.Function keeps in its ctx, as Liger's LayerNorm does its mean and rstd); they are then not compared
    for it (:func:`compared`)."""
    names = [t.name for t in spec.written if t.name not in absent]
    if value is None:
        return {}
    without = [n for n in names if n not in {t.name for t in spec.outputs if not t.grad}]
    got = by_name(value, names, without)
    if isinstance(got, str):
        raise TypeError(f"{got}; {spec.name} writes {', '.join(names)}{alone(names, without)}")
    return got


def by_name(value, names: list[str], without: list[str]) -> dict | str:
    """A returned tensor, tuple or dict by name: all of ``names`` in order, or ``without`` them (the grad = false
    outputs left out); else what was returned, in words, for the caller's error."""
    if isinstance(value, dict):
        if sorted(value) in (sorted(names), sorted(without)):
            return dict(value)
        return f"returned outputs {', '.join(sorted(map(str, value)))}"
    value = (value,) if isinstance(value, torch.Tensor) else tuple(value)
    for order in (names, without):
        if len(value) == len(order):
            return dict(zip(order, value, strict=True))
    return f"returned {len(value)} outputs"


def alone(names: list[str], without: list[str]) -> str:
    """The error's note on the outputs that may come back alone, where there are any to leave out."""
    return f" (or {', '.join(without)} alone)" if without != names else ""


def compared(tensors, returned) -> tuple[Tensor, ...]:
    """Those of ``tensors`` a call's results are compared on: every one, but an output a call that returned
    its outputs left out (one no gradient flows from: :func:`returned_outputs`)."""
    return tuple(t for t in tensors if not returned or t.name in returned)


def case_seed(spec: Spec, dtype: str, case: Case, base_seed: int = 0) -> int:
    """Stable per-test seed: the same case gets the same inputs on every machine and run."""
    return zlib.crc32(f"{spec.name}|{dtype}|{case.tier}|{case.id}|{base_seed}".encode()) & 0x7FFFFFFF


def tensor_dtype(t: Tensor, dtype: str) -> torch.dtype:
    return TORCH_DTYPES[dtype if t.dtype == "case" else t.dtype]


def shape_of(t: Tensor, env: dict) -> tuple[int, ...]:
    return tuple(int(d) for d in t.dims(env))


def full_env(spec: Spec, case: Case, dtype: str) -> dict:
    """The case's symbols plus what rooflines may use: itemsize, numel_<t>, bytes_<t> (0 for a tensor the case
    leaves out)."""
    env = spec.env(case)
    env["itemsize"] = TORCH_DTYPES[dtype].itemsize
    passed = {t.name for t in spec.present(env)}
    for t in spec.tensors:
        numel = 1
        for n in shape_of(t, env) if t.name in passed else (0,):
            numel *= n
        env[f"numel_{t.name}"] = numel
        env[f"bytes_{t.name}"] = numel * tensor_dtype(t, dtype).itemsize
    return env


def strided_like(x: torch.Tensor, layout: str) -> torch.Tensor:
    """A view in ``layout`` holding ``x``'s values, between guard bands, its padding holding the pad pattern."""
    view, _ = _copy_into(x, x.dtype, layout)
    return view


def _copy_into(x: torch.Tensor, dtype: torch.dtype, layout: str, pattern=None) -> tuple[torch.Tensor, Guard]:
    view, guard = allocate(x.shape, dtype, x.device, layout, pattern)
    if x.numel():
        view.copy_(x)
    return view, guard


def keep_static(values: Arguments, original: dict, spec: Spec) -> None:
    """``values``' static inputs (``static = true``: a weight's, the same on every call) set back to
    ``original``'s, so the checks that give a call new values leave them as the first call saw them."""
    for t in values.passed(spec.inputs):
        if t.static:
            values.tensors[t.name].copy_(original[t.name])


def make_args(spec: Spec, case: Case, dtype: str, device, seed: int, layout: str | None = None,
              poison_with: int = 0) -> Arguments:
    """Fresh seeded inputs (the case's value set where an input lists it), outputs filled with poison number
    ``poison_with``, every tensor between guard bands, inputs in the case's layout."""
    env = full_env(spec, case, dtype)
    layout = case.layout if layout is None else layout
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    tensors, guards, passed = {}, {}, {t.name for t in spec.present(env)}
    for i, t in enumerate(spec.tensors):
        if t.name not in passed:
            continue
        shape, tdtype = shape_of(t, env), tensor_dtype(t, dtype)
        if t.output:
            tensors[t.name], guards[t.name] = allocate(shape, tdtype, device, pattern=pad_pattern(i))
            poison(tensors[t.name], poison_with)
            continue
        x = distribution(t, shape, tdtype, env, gen, device)
        if case.value_set and case.value_set in t.specials:
            x = value_set(case.value_set, t, x, env, seed)
        tensors[t.name], guards[t.name] = _copy_into(x, tdtype, "contiguous" if t.contiguous else layout,
                                                     pad_pattern(i))
    absent = tuple(t.name for t in spec.tensors if t.name not in passed)
    return Arguments(tensors, spec.param_values(env), env, guards, absent)


def meta_args(spec: Spec, case: Case, dtype: str) -> dict:
    """The case's arguments as meta tensors in the case's layout: shapes and strides, no memory (what the
    ahead-of-time matrix records launches with; aot is handed this function, as it may not import correctness)."""
    env = full_env(spec, case, dtype)
    out, passed = {}, {t.name for t in spec.present(env)}
    for t in spec.tensors:
        if t.name not in passed:
            out[t.name] = None
            continue
        x = torch.empty(shape_of(t, env), dtype=tensor_dtype(t, dtype), device="meta")
        out[t.name] = x if t.output or t.contiguous else strided_like(x, case.layout)
    return {**out, **spec.param_values(env)}


def meta_backward_args(spec: Spec, case: Case, dtype: str) -> dict:
    """A standalone backward's keywords (``[backward.backends.<name>] kernel``) as meta tensors, as the generated
    backward items call it: the saved tensors and a grad per differentiable output in the case's layout, a
    gradient buffer per backward input, None for what the case leaves out, and the params."""
    from harness.spec.backward import grad_name

    fwd = meta_args(spec, case, dtype)
    out = {n: fwd[n] if fwd[n] is None or any(t.name == n and not t.output for t in spec.tensors)
           else strided_like(fwd[n], case.layout) for n in spec.backward.saved if n in fwd}
    for t in spec.differentiable_outputs:
        x = fwd.get(t.name)
        out[grad_name(t.name)] = None if x is None else strided_like(torch.empty_like(x), case.layout)
    for n in spec.backward.inputs:
        x = fwd.get(n)
        out[grad_name(n)] = None if x is None else torch.empty(x.shape, dtype=x.dtype, device="meta")
    return {**out, **{k: v for k, v in fwd.items() if k not in {t.name for t in spec.tensors}}}


def clone_args(args: Arguments, *, layout: str | None = None, dtype_map=None) -> Arguments:
    """Copies of the arguments, each between fresh guard bands: in the same layouts (``layout=None``), or all
    in ``layout``; ``dtype_map`` re-types each tensor."""
    tensors, guards = {}, {}
    for i, (name, x) in enumerate(args.tensors.items()):
        target = dtype_map(x.dtype) if dtype_map else x.dtype
        want = layout if layout is not None else (args.guards[name].layout if name in args.guards else None)
        if want is None:  # a tensor the harness did not lay out: the same strides, no guards
            y = torch.empty_strided(x.size(), x.stride(), dtype=target, device=x.device)
            if x.numel():
                y.copy_(x)
            tensors[name] = y
        else:
            tensors[name], guards[name] = _copy_into(x, target, want, pad_pattern(i))
    return Arguments(tensors, dict(args.params), args.env, guards, args.absent)


def reference_dtype(dtype: torch.dtype, case_dtype: str, precision: str = "upcast") -> torch.dtype:
    """The dtype the reference gets a tensor of ``dtype`` in, for a case of ``case_dtype``.

    ``upcast``: floats promoted to the next wider float of the case dtype (fp32 for 16-bit cases, fp64 for
    fp32 and fp64); ``input``: unchanged; ``fp32`` / ``fp64``: every float tensor in that dtype. Integer and
    boolean tensors are never re-typed."""
    if not dtype.is_floating_point or precision == "input":
        return dtype
    if precision in ("fp32", "fp64"):
        return TORCH_DTYPES[precision]
    if precision != "upcast":
        raise ValueError(f"unknown reference precision {precision!r}")
    case = TORCH_DTYPES[case_dtype]
    wide = _UPCAST.get(case, case)
    if dtype in FP8:  # torch has no promotion rule for 8-bit floats: every FP8 value is exact in fp32
        return torch.promote_types(wide, torch.float32)
    return torch.promote_types(dtype, wide)


def reference_args(spec: Spec, args: Arguments, case_dtype: str) -> Arguments:
    """Contiguous copies of ``args`` at the spec's reference precision: what the reference is called with."""
    return clone_args(args, layout="contiguous",
                      dtype_map=lambda d: reference_dtype(d, case_dtype, spec.reference_precision))


def is_zero_size(args: Arguments) -> bool:
    return any(x.numel() == 0 for x in args.tensors.values())
