"""Turning a spec case into real arguments: seeded random inputs, non-contiguous views, poisoned outputs.

Everything a check needs to build, copy or upcast the arguments of one call lives here, so the checks
and the benchmark engine build them the same way.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

from harness.spec.model import Case, Spec, Tensor

TORCH_DTYPES = {
    "fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8,
    "uint8": torch.uint8, "bool": torch.bool,
}
# Quiet NaNs with a payload no arithmetic produces (GPUs emit canonical NaNs), stored through an
# integer view so the exact bits survive: an element that still holds them was never written.
_POISON_BITS = {torch.float64: (torch.int64, 0x7FF8A5A5A5A5A5A5), torch.float32: (torch.int32, 0x7FC5A5A5),
                torch.float16: (torch.int16, 0x7E5A), torch.bfloat16: (torch.int16, 0x7FDA)}
# Storage around a non-contiguous view gets other NaN bits, so a kernel that reads outside the view is not
# mistaken for one that never wrote its output (CPUs carry NaN payloads through arithmetic).
_PAD_BITS = {torch.float64: 0x7FF8C3C3C3C3C3C3, torch.float32: 0x7FC3C3C3, torch.float16: 0x7E3C,
             torch.bfloat16: 0x7FC3}
_INT_SENTINEL = {torch.int64: -0x5A5A5A5A5A5A5A5A, torch.int32: -0x5A5A5A5A, torch.int16: -0x5A5A,
                 torch.int8: -0x5A, torch.uint8: 0xA5, torch.bool: True}
PAD = 3  # elements of padding per row: keeps padded rows unaligned to 16 bytes


@dataclass(frozen=True)
class Arguments:
    tensors: dict[str, torch.Tensor]
    params: dict[str, object]
    env: dict[str, object]

    def kwargs(self) -> dict:
        return {**self.tensors, **self.params}


def case_seed(spec: Spec, dtype: str, case: Case, base_seed: int = 0) -> int:
    """Stable per-test seed: the same case gets the same inputs on every machine and run."""
    return zlib.crc32(f"{spec.name}|{dtype}|{case.tier}|{case.id}|{base_seed}".encode()) & 0x7FFFFFFF


def tensor_dtype(t: Tensor, dtype: str) -> torch.dtype:
    return TORCH_DTYPES[dtype if t.dtype == "case" else t.dtype]


def shape_of(t: Tensor, env: dict) -> tuple[int, ...]:
    return tuple(int(d(env)) for d in t.shape)


def full_env(spec: Spec, case: Case, dtype: str) -> dict:
    """The case's symbols plus what rooflines may use: itemsize, numel_<t>, bytes_<t>."""
    env = spec.env(case)
    env["itemsize"] = TORCH_DTYPES[dtype].itemsize
    for t in spec.tensors:
        numel = 1
        for n in shape_of(t, env):
            numel *= n
        env[f"numel_{t.name}"] = numel
        env[f"bytes_{t.name}"] = numel * tensor_dtype(t, dtype).itemsize
    return env


def poison(x: torch.Tensor, *, padding: bool = False) -> torch.Tensor:
    if x.dtype in _POISON_BITS:
        int_dtype, bits = _POISON_BITS[x.dtype]
        x.view(int_dtype).fill_(_PAD_BITS[x.dtype] if padding else bits)
    else:
        x.fill_(_INT_SENTINEL[x.dtype])
    return x


def poisoned_mask(x: torch.Tensor) -> torch.Tensor:
    """True where ``x`` still holds the poison bits."""
    if x.dtype in _POISON_BITS:
        int_dtype, bits = _POISON_BITS[x.dtype]
        probe = poison(torch.empty(1, dtype=x.dtype, device=x.device)).view(int_dtype)
        return x.contiguous().view(int_dtype) == probe
    return x == _INT_SENTINEL[x.dtype]


def _random(t: Tensor, shape, dtype: torch.dtype, env: dict, gen: torch.Generator, device) -> torch.Tensor:
    args = [a(env) for a in t.values.args]
    kind = t.values.kind
    if kind == "randint":
        return torch.randint(int(args[0]), int(args[1]), shape, generator=gen, device=device, dtype=dtype)
    if kind == "uniform":
        x = torch.rand(shape, generator=gen, device=device, dtype=torch.float32)
        return (x * (args[1] - args[0]) + args[0]).to(dtype)
    mean, std = args if args else (0.0, 1.0)
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return (x * std + mean).to(dtype)


def strided_like(x: torch.Tensor, layout: str) -> torch.Tensor:
    """A non-contiguous view holding ``x``'s values; the storage around it is poisoned."""
    if layout == "contiguous" or x.dim() == 0:
        return x
    if layout in ("padded", "transposed") and x.dim() < 2:
        return x  # a vector has no rows to pad or swap
    shape = list(x.shape)
    if layout == "padded":
        base = torch.empty(shape[:-1] + [shape[-1] + PAD], dtype=x.dtype, device=x.device)
        view = base[..., : shape[-1]]
    elif layout == "strided":
        base = torch.empty(shape[:-1] + [2 * shape[-1]], dtype=x.dtype, device=x.device)
        view = base[..., ::2]
    elif layout == "transposed":
        base = torch.empty(shape[:-2] + [shape[-1], shape[-2]], dtype=x.dtype, device=x.device)
        view = base.transpose(-1, -2)
    else:
        raise ValueError(f"unknown layout {layout!r}")
    poison(base, padding=True)
    view.copy_(x)
    return view


def make_args(spec: Spec, case: Case, dtype: str, device, seed: int, layout: str | None = None) -> Arguments:
    """Fresh random inputs (never zeros), poisoned outputs, in the case's layout."""
    env = full_env(spec, case, dtype)
    layout = case.layout if layout is None else layout
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    tensors = {}
    for t in spec.tensors:
        shape, tdtype = shape_of(t, env), tensor_dtype(t, dtype)
        if t.output:
            tensors[t.name] = poison(torch.empty(shape, dtype=tdtype, device=device))
            continue
        x = _random(t, shape, tdtype, env, gen, device)
        tensors[t.name] = x if t.contiguous else strided_like(x, layout)
    params = {name: p(env) for name, p in spec.params.items()}
    return Arguments(tensors, params, env)


def clone_args(args: Arguments, *, layout: str | None = None, dtype_map=None) -> Arguments:
    """Copies of the arguments: same values and strides (``layout=None``), or re-laid-out/upcast."""
    out = {}
    for name, x in args.tensors.items():
        target = dtype_map(x.dtype) if dtype_map else x.dtype
        if layout is None and target == x.dtype:
            y = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
            y.copy_(x) if x.numel() else None
        else:
            y = torch.empty(x.shape, dtype=target, device=x.device)
            y.copy_(x) if x.numel() else None
            y = y if layout in (None, "contiguous") else strided_like(y, layout)
        out[name] = y
    return Arguments(out, dict(args.params), args.env)


def reference_dtype(dtype: torch.dtype) -> torch.dtype:
    """The higher precision the reference runs in: fp32 for 16-bit floats, fp64 for fp32."""
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if dtype == torch.float32:
        return torch.float64
    return dtype


def is_zero_size(args: Arguments) -> bool:
    return any(x.numel() == 0 for x in args.tensors.values())
