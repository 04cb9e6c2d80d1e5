"""Gap: reductions, scans and dots over 16- and 8-bit floats.

``ReduceOps.sum`` runs ``np.sum`` on the array as stored: for bf16 that is a sum of uint16 bit patterns,
wrapped back into 16 bits (a row summing to -14.96 came out -60030976.0); an fp16 sum down a tile's columns
NumPy accumulates in fp16 (4096 ones stop at 2048). The
same holds for ``cumsum``/``cumprod`` and for ``min``/``max`` over fp8 (bit order is not value order for
negatives), and ``create_dot`` multiplies bf16 bit patterns (fp8 it converts with the carry-dropping cast).
Here those accumulate the decoded values in fp32 and round once to the element type; a dot with bf16 or fp8
operands multiplies their exact values in fp32, as tensor cores do, into its accumulator's type.
"""

from __future__ import annotations

import numpy as np

from harness.interpreter import bits
from harness.interpreter._core import Patch, replace

GAP = "16/8-bit float reductions"
NARROW = bits.RAW | {"fp16"}  # formats whose NumPy reduction is wrong (raw bits) or accumulates too narrowly


def install() -> list[Patch]:
    from triton.runtime import interpreter

    reduce_ops, scan_ops = interpreter.ReduceOps, interpreter.ScanOps
    return [replace(GAP, reduce_ops, "sum", _sum, where="ReduceOps"),
            replace(GAP, reduce_ops, "min_max", _min_max, where="ReduceOps"),
            replace(GAP, scan_ops, "cumsum", _scan(np.cumsum), where="ScanOps"),
            replace(GAP, scan_ops, "cumprod", _scan(np.cumprod), where="ScanOps"),
            replace(GAP, interpreter.InterpreterBuilder, "create_dot", _dot, where="InterpreterBuilder")]


def _name(tensor) -> str:
    return tensor.dtype.scalar.name


def _fp32(data, name):
    return bits.decode(data, name).astype(np.float32)


def _sum(original):
    def sum(self, input):
        name = _name(input)
        if name not in NARROW:
            return original(self, input)
        acc = np.sum(_fp32(input.handle.data, name), axis=self.axis, keepdims=self.keep_dims, dtype=np.float32)
        return self.to_tensor(bits.encode(acc, name), input.dtype)

    return sum


def _scan(accumulate):
    def make(original):
        def scan(self, input):
            name = _name(input)
            if name not in NARROW:
                return original(self, input)
            acc = accumulate(_fp32(input.handle.data, name), axis=self.axis, dtype=np.float32)
            return [self.to_tensor(bits.encode(acc, name), input.dtype)]

        return scan

    return make


def _min_max(original):
    def min_max(self, input, val_reduce_op, idx_reduce_op=None):
        import triton.language as tl

        single = input[0] if isinstance(input, tuple) else input
        name = _name(single)
        if name not in bits.RAW:
            return original(self, input, val_reduce_op, idx_reduce_op)
        wide = self.to_tensor(bits.decode(single.handle.data, name), tl.float64)
        out = original(self, wide, val_reduce_op, idx_reduce_op)
        values = out[0] if isinstance(out, tuple) else (out if val_reduce_op else None)
        if values is None:
            return out
        narrowed = tl.core.tensor(type(values.handle)(bits.encode(values.handle.data, name), single.dtype),
                                  values.type.with_element_ty(single.dtype) if values.type.is_block()
                                  else single.dtype)
        return (narrowed, out[1]) if isinstance(out, tuple) else narrowed

    return min_max


def _dot(original):
    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        from triton.runtime.interpreter import TensorHandle

        names = [h.dtype.scalar.name for h in (a, b, d)]
        if not any(n in bits.RAW for n in names):
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        acc = np.matmul(_fp32(a.data, names[0]), _fp32(b.data, names[1]), dtype=np.float32)
        out = acc + bits.decode(d.data, names[2]).astype(np.float32)
        return TensorHandle(np.asarray(bits.encode(out, names[2])).astype(d.data.dtype), d.dtype.scalar)

    return create_dot
