"""Exact NumPy codecs for the float formats the interpreter keeps as raw bits (bf16 as uint16, fp8 as uint8),
keyed by Triton's dtype names. Every fix that must compute on such values (casts, arithmetic, reductions,
atomics, dots) decodes here, works in float64 and encodes back with one correct rounding, as the GPU does.

float64 holds every value of these formats, and of fp16/fp32, exactly; so decoding loses nothing and a single
rounding from float64 is the GPU's single rounding from the exact result for casts and (bf16/fp8) products.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Format:
    name: str  # Triton's dtype name
    width: int  # bits
    mantissa: int  # explicit fraction bits
    bias: int
    max_finite: float
    has_inf: bool
    saturate: bool  # the GPU's cast clamps overflow (and inf) to max_finite: cvt.rn.satfinite for fp8
    nan: int  # the bits of the NaN the GPU produces

    @property
    def uint(self):
        return np.dtype(f"uint{self.width}")


FORMATS = {f.name: f for f in (
    Format("bf16", 16, 7, 127, (2 - 2 ** -7) * 2.0 ** 127, True, False, 0x7FC0),
    Format("fp16", 16, 10, 15, 65504.0, True, False, 0x7E00),
    Format("fp32", 32, 23, 127, (2 - 2 ** -23) * 2.0 ** 127, True, False, 0x7FC00000),
    # e4m3fn: no inf, one NaN per sign (S.1111.111); e5m2: IEEE-like. Both saturate on sm_89+ casts.
    Format("fp8e4nv", 8, 3, 7, 448.0, False, True, 0x7F),
    Format("fp8e5", 8, 2, 15, 57344.0, True, True, 0x7F),
)}
RAW = frozenset({"bf16", "fp8e4nv", "fp8e5"})  # stored as unsigned ints by the interpreter: NumPy cannot compute
NATIVE = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}  # NumPy computes on these directly


@functools.cache
def _table(name: str) -> np.ndarray:
    """Every bit pattern of an 8-bit format as its float64 value."""
    f = FORMATS[name]
    b = np.arange(1 << f.width, dtype=np.int64)
    sign = np.where(b >> (f.width - 1), -1.0, 1.0)
    exp_field = (b >> f.mantissa) & ((1 << (f.width - 1 - f.mantissa)) - 1)
    frac = (b & ((1 << f.mantissa) - 1)).astype(np.float64)
    top = (1 << (f.width - 1 - f.mantissa)) - 1
    normal = np.ldexp(1.0 + frac / (1 << f.mantissa), (exp_field - f.bias).astype(np.int32))
    sub = np.ldexp(frac, 1 - f.bias - f.mantissa)
    value = sign * np.where(exp_field == 0, sub, normal)
    if f.has_inf:
        value = np.where((exp_field == top) & (frac == 0), sign * np.inf, value)
        value = np.where((exp_field == top) & (frac != 0), np.nan, value)
    else:
        value = np.where((exp_field == top) & (frac == (1 << f.mantissa) - 1), np.nan, value)
    return value


def decode(data: np.ndarray, name: str) -> np.ndarray:
    """The float64 values of an array stored in format ``name`` (raw bits or a NumPy float)."""
    data = np.asarray(data)
    if name == "bf16":
        with np.errstate(invalid="ignore"):  # a signalling NaN's pattern warns; its value stays NaN
            return (data.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    if name in RAW:
        return _table(name)[data.astype(np.int64)]
    return data.astype(np.float64)


def encode(values: np.ndarray, name: str, rounding: str = "rtne") -> np.ndarray:
    """float64 values in format ``name``, rounded once (to nearest even, or toward zero for ``"rtz"``), with
    the exponent carry a round-up produces; as raw bits for bf16/fp8, a NumPy float array otherwise."""
    values = np.asarray(values, dtype=np.float64)
    if name == "fp64":
        return values
    f = FORMATS[name]
    if name in NATIVE and rounding == "rtne":  # NumPy's own float64 -> fp16/fp32 cast rounds once, to even
        with np.errstate(over="ignore"):
            return values.astype(NATIVE[name])
    magnitude = np.abs(values)
    with np.errstate(invalid="ignore", over="ignore"):
        _, e = np.frexp(magnitude)  # magnitude = m * 2**e, m in [0.5, 1): the leading bit is 2**(e - 1)
        e = np.maximum(e - 1, 1 - f.bias)  # below the normal range the subnormals share one quantum
        quantum = np.ldexp(1.0, (e - f.mantissa).astype(np.int32))
        steps = magnitude / quantum  # exact: a power-of-two scaling
        steps = np.trunc(steps) if rounding == "rtz" else np.rint(steps)  # rint: ties to even
        rounded = steps * quantum  # a carry out of the fraction lands on the next power of two: exact too
    finite = np.isfinite(values)
    # Overflow: the GPU's fp8 casts saturate; IEEE formats go to inf, except toward zero (max finite).
    clamp = f.saturate or not f.has_inf
    over = (rounded > f.max_finite) & finite
    rounded = np.where(over, f.max_finite if (clamp or rounding == "rtz") else np.inf, rounded)
    inf = np.isinf(values)
    if clamp:
        rounded = np.where(inf, f.max_finite, rounded)
    if name in NATIVE:
        out = np.where(np.signbit(values), -rounded, rounded).astype(NATIVE[name])
        return np.where(np.isnan(values), NATIVE[name](np.nan), out)
    return _bits(rounded, np.signbit(values), np.isnan(values), f)


def _bits(rounded: np.ndarray, negative: np.ndarray, nan: np.ndarray, f: Format) -> np.ndarray:
    """Exactly representable magnitudes as sign | exponent | fraction."""
    with np.errstate(invalid="ignore", divide="ignore"):
        _, e = np.frexp(rounded)
        e = e - 1
        normal = (e >= 1 - f.bias) & (rounded != 0) & np.isfinite(rounded)
        exp_field = np.where(normal, e + f.bias, 0)
        scale = np.where(normal, e - f.mantissa, 1 - f.bias - f.mantissa).astype(np.int32)
        frac = np.ldexp(rounded, -scale)  # the significand as an integer, the implicit bit included if normal
        frac = np.where(normal, frac - (1 << f.mantissa), frac)
        frac = np.where(np.isfinite(frac), frac, 0).astype(np.int64)
    top = (1 << (f.width - 1 - f.mantissa)) - 1
    exp_field = np.where(np.isinf(rounded), top, exp_field)
    out = (negative.astype(np.int64) << (f.width - 1)) | (exp_field.astype(np.int64) << f.mantissa) | frac
    out = np.where(nan, f.nan, out)
    return out.astype(f.uint)

