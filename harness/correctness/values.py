"""An input's values: its declared distribution, or a named value set (harness.spec.model.VALUE_SETS).

Everything is drawn from seeded generators on the tensor's device, so a case gets the same inputs on every
run. A value set's own draws come from a generator seeded by the case seed, the tensor and the set, after
the input's ordinary draw: the other inputs of the case get exactly what they would without it.
"""

from __future__ import annotations

import zlib

import torch

from harness.spec.model import Tensor


def distribution(t: Tensor, shape, dtype: torch.dtype, env: dict, gen: torch.Generator, device) -> torch.Tensor:
    """Values drawn from ``t``'s declared distribution (``normal`` by default)."""
    args = [a(env) for a in t.values.args]
    kind = t.values.kind
    if kind == "randint":
        return torch.randint(int(args[0]), int(args[1]), shape, generator=gen, device=device, dtype=dtype)
    if kind == "uniform":
        x = torch.rand(shape, generator=gen, device=device, dtype=torch.float32)
        return _cast(x * (args[1] - args[0]) + args[0], dtype)
    mean, std = _normal(t, env)
    x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return _cast(x * std + mean, dtype)


def _normal(t: Tensor, env: dict) -> tuple[float, float]:
    """The input's normal(mean, std), or the standard normal when its distribution is another kind."""
    if t.values.kind == "normal" and t.values.args:
        mean, std = (float(a(env)) for a in t.values.args)
        return mean, std
    return 0.0, 1.0


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` (contiguous) as rows over its last dimension; a scalar is one row of one."""
    return x.reshape(1, 1) if x.dim() == 0 else x.view(-1, x.shape[-1])


def value_set(name: str, t: Tensor, base: torch.Tensor, env: dict, seed: int) -> torch.Tensor:
    """``base`` (the input's ordinary draw) turned into value set ``name``, in ``base``'s dtype."""
    device, dtype = base.device, base.dtype
    if base.numel() == 0:
        return base
    gen = torch.Generator(device=device)
    gen.manual_seed(zlib.crc32(f"{seed}|{t.name}|{name}".encode()) & 0x7FFFFFFF)
    if name == "zero_rows":  # rows 0, 3, 6, ... all zeros: every case with a row has one
        x = base.clone()
        rows = _rows(x)
        rows[0::3] = 0
        return x
    mean, std = _normal(t, env)
    if name == "ties":
        x = torch.randint(-127, 127, base.shape, generator=gen, device=device, dtype=torch.int32)
        x = x.to(torch.float32) + 0.5  # half-integers in [-126.5, 126.5]
        rows = _rows(x)
        if rows.shape[1]:
            r = torch.arange(rows.shape[0], device=device)
            col = torch.randint(0, rows.shape[1], (rows.shape[0],), generator=gen, device=device)
            sign = torch.randint(0, 2, (rows.shape[0],), generator=gen, device=device).to(torch.float32) * 2 - 1
            rows[r, col] = 127.0 * sign  # each row's largest magnitude exactly 127
        return _cast(x, dtype)
    x = torch.randn(base.shape, generator=gen, device=device, dtype=torch.float32) * std + mean
    if name == "outliers":  # one element in 64 (at least one) at +-100 sigma
        flat = x.view(-1)
        k = max(1, flat.numel() // 64)
        at = torch.randperm(flat.numel(), generator=gen, device=device)[:k]
        sign = torch.randint(0, 2, (k,), generator=gen, device=device).to(torch.float32) * 2 - 1
        flat[at] = mean + 100.0 * std * sign
        return _cast(x, dtype)
    if name == "large":  # fp16 tops out at 65504: 1e2 keeps its normal tail finite
        return _cast(x * (1e2 if dtype == torch.float16 else 1e4), dtype)
    raise ValueError(f"unknown value set {name!r}")


def _cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if not dtype.is_floating_point and dtype != torch.bool:
        info = torch.iinfo(dtype)
        x = x.round().clamp(info.min, info.max)
    elif dtype.itemsize == 1:
        # FP8 saturates, as a quantiser clamps: torch's cast of an out-of-range value gives e5m2 an inf and
        # may give e4m3 a NaN (it has no inf), depending on the device
        finite = torch.finfo(dtype).max
        x = x.clamp(-finite, finite)
    return x.to(dtype)
