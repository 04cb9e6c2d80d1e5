"""Gap: arithmetic and comparisons on bf16 (and fp8) values.

The interpreter stores bf16 as uint16 and fp8 as uint8 and hands those arrays to NumPy as they are: ``a * b``
multiplies bit patterns, ``a < b`` orders negative numbers backwards, ``-a`` wraps. Triton keeps bf16 * bf16 in
bf16 (``computation_type_impl``), so any kernel that multiplies in its input dtype (Liger's rms_norm does)
gets garbage. Here each element-wise builder op with such an operand computes on the float64 values and
rounds once to the operand's format, as the GPU's bf16 instructions do; comparisons stay booleans. A select
(``tl.where``) only moves bits, so it keeps the interpreter's own path.
"""

from __future__ import annotations

import numpy as np

from harness.interpreter import bits
from harness.interpreter._core import Patch, replace

GAP = "bf16/fp8 arithmetic"
OPS = ("binary_op", "unary_op", "ternary_op", "create_fma", "create_erf", "create_rsqrt")


def install() -> list[Patch]:
    from triton.runtime import interpreter

    return [replace(GAP, interpreter.InterpreterBuilder, name, _on_values, where="InterpreterBuilder")
            for name in OPS]


def raw_name(handle) -> str | None:
    """The format name of a TensorHandle the interpreter keeps as raw bits, else None."""
    dtype = getattr(handle, "dtype", None)
    name = getattr(getattr(dtype, "scalar", None), "name", None)
    return name if name in bits.RAW else None


def widened(handle):
    """The handle's values as a float64 TensorHandle."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    return TensorHandle(bits.decode(handle.data, raw_name(handle)), tl.float64)


def _on_values(original):
    def op(self, *args):
        formats = [raw_name(a) for a in args]
        first = next((i for i, f in enumerate(formats) if f), None)
        if first is None or args[-1] is np.where:
            return original(self, *args)
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        out = original(self, *[widened(a) if f else a for a, f in zip(args, formats, strict=True)])
        if out.data.dtype.kind != "f":  # a comparison
            return TensorHandle(out.data, tl.int1)
        return TensorHandle(bits.encode(out.data, formats[first]), args[first].dtype.scalar)

    return op
