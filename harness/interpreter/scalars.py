"""Gap: Python float arguments.

Compiled, a float argument is specialised to an fp32 scalar tensor (``native_specialize_impl`` says "fp32"),
so kernels call ``eps.to(tl.float32)`` on it and it promotes a bf16 operand to fp32. The interpreter wraps int
and bool arguments as tensors but passes a float through as a Python float: ``.to`` raises AttributeError, and
``x_bf16 * eps`` stays bf16 (a Python scalar does not promote) where the GPU computes in fp32. Floats, also
inside tuple arguments, are wrapped here the way ints are, with the type the compiled launcher gives them.
"""

from __future__ import annotations

import numpy as np

from harness.interpreter._core import Patch, replace

GAP = "float arguments"


def install() -> list[Patch]:
    from triton.runtime import interpreter

    return [replace(GAP, interpreter, "_implicit_cvt", _implicit_cvt, where="triton.runtime.interpreter")]


def _implicit_cvt(original):
    def implicit_cvt(arg):
        if isinstance(arg, float):
            import triton
            import triton.language as tl
            from triton.runtime.interpreter import TensorHandle, _get_np_dtype

            ty = tl.str_to_ty(triton.runtime.jit.mangle_type(arg), None)
            return tl.tensor(TensorHandle(np.array([arg], dtype=_get_np_dtype(ty)), ty), ty)
        return original(arg)

    return implicit_cvt
