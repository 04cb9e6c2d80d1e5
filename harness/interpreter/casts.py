"""Gap: casts with a bf16 or fp8 (e4m3fn, e5m2) side.

The interpreter's float conversion (``_convert_float``) rounds by adding the cut-off bit to the fraction and
ORs the sum into the exponent field: a round-up that carries out of the fraction loses the carry (124.0 and
127.9 become 64 in e4m3, 7.9 becomes 4, where the GPU gives 128 and 8), a tie always rounds up (100 becomes 104,
the GPU 96), and overflow wraps instead of saturating. Its plain fp32 -> bf16 cast (``.to``, a store into a bf16
pointer) truncates, and an int or fp64 -> bf16 cast reinterprets the number as bits.

Here every conversion with such a side goes through float64 values, which hold every source exactly, and one
rounding (``bits.encode``): to nearest even with the carry, toward zero for ``fp_downcast_rounding="rtz"``,
fp8 overflow and inf saturating to the largest finite value as the GPU's ``cvt.rn.satfinite`` does (torch's
e5m2 cast goes to inf there instead; its e4m3fn cast saturates too). Other formats (the fnuz and b15 fp8 types)
keep the interpreter's own conversion.
"""

from __future__ import annotations

import numpy as np

from harness.interpreter import bits
from harness.interpreter._core import Patch, replace

GAP = "fp8/bf16 casts"
CONVERTIBLE = frozenset({*bits.FORMATS, "fp64"})


def install() -> list[Patch]:
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    return [replace(GAP, builder, "cast_impl", _cast_impl, where="InterpreterBuilder"),
            replace(GAP, builder, "create_fp_to_fp", _fp_to_fp, where="InterpreterBuilder")]


def convert(src, dst_type, rounding: str = "rtne"):
    """A TensorHandle cast by value: ints and floats in, floats (bits for bf16/fp8) or ints out."""
    from triton.runtime.interpreter import TensorHandle, _get_np_dtype

    source, target = src.dtype.scalar, dst_type.scalar
    values = bits.decode(src.data, source.name) if source.name in CONVERTIBLE else src.data.astype(np.float64)
    if target.is_floating():
        out = bits.encode(values, target.name, rounding)
    else:  # as the GPU's cvt.rzi: toward zero, NaN to 0, saturating at the type's range
        info = np.iinfo(_get_np_dtype(target))
        out = np.clip(np.trunc(np.nan_to_num(values, nan=0.0)), info.min, info.max)
    return TensorHandle(np.asarray(out).astype(_get_np_dtype(target)), target)


def _cast_impl(original):
    def cast_impl(self, src, dst_type):
        if src.dtype.scalar.name in bits.RAW or dst_type.scalar.name in bits.RAW:
            return convert(src, dst_type)
        return original(self, src, dst_type)

    return cast_impl


def _fp_to_fp(original):
    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        from triton._C.libtriton import ir

        if src.dtype.scalar.name in CONVERTIBLE and dst_type.scalar.name in CONVERTIBLE:
            return convert(src, dst_type, "rtz" if rounding_mode == ir.ROUNDING_MODE.RTZ else "rtne")
        return original(self, src, dst_type, rounding_mode)

    return create_fp_to_fp
