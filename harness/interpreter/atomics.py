"""Gap: ``atomic_add`` on bf16.

The interpreter's read-modify-write atomics are C++ (``_interpreter.atomic_rmw``) over NumPy's dtypes; bf16
arrives as uint16 and ``atomic_add`` raises ``ValueError('Unsupported data type')``. (``atomic_cas`` compares
bits and works; Triton itself refuses every other bf16 read-modify-write.) Here the add is a read-modify-write
through the interpreter's own load and store, on the decoded values, rounded once to bf16 as the GPU's
``red.add.bf16`` does. Programs run one after another, so the emulation is atomic; elements that share an
address within one call are applied in order, each seeing the previous one's write and returning the value it
replaced.
"""

from __future__ import annotations

import numpy as np

from harness.interpreter import bits
from harness.interpreter._core import Patch, replace

GAP = "bf16 atomics"


def install() -> list[Patch]:
    from triton.runtime import interpreter

    return [replace(GAP, interpreter.InterpreterBuilder, "create_atomic_rmw", _rmw, where="InterpreterBuilder")]


def _apply(ptr, new_bits, mask, fmt: bits.Format) -> np.ndarray:
    """Run ``new_bits(old, i)`` for each masked element in order against memory; the old bits, per element."""
    from triton.runtime.interpreter import _interpreter

    shape = np.shape(ptr.data)
    ptrs = np.asarray(ptr.data, dtype=np.uint64).reshape(-1)
    live = np.broadcast_to(np.asarray(mask, dtype=bool), shape).reshape(-1)
    old = np.zeros(ptrs.shape, fmt.uint)
    one, zero = np.ones(1, bool), np.zeros(1, fmt.uint)
    for i in np.flatnonzero(live):
        here = ptrs[i:i + 1]
        old[i] = _interpreter.load(here, one, zero, fmt.uint)[0]
        _interpreter.store(here, np.asarray([new_bits(old[i], i)], fmt.uint), one)
    return old.reshape(shape)


def _rmw(original):
    def create_atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope):
        from triton._C.libtriton import ir
        from triton.runtime.interpreter import TensorHandle

        name = val.dtype.scalar.name
        if name != "bf16" or rmwOp != ir.ATOMIC_OP.FADD:
            return original(self, rmwOp, ptr, val, mask, sem, scope)
        fmt = bits.FORMATS[name]
        addend = bits.decode(np.broadcast_to(np.asarray(val.data, fmt.uint), np.shape(ptr.data)).reshape(-1), name)

        def step(old, i):
            return bits.encode(bits.decode(np.asarray([old], fmt.uint), name) + addend[i], name)[0]
        return TensorHandle(_apply(ptr, step, mask.data, fmt), val.dtype.scalar)

    return create_atomic_rmw

