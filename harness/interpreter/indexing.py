"""Gap: a scalar tensor used as a Python int (``range(0, n_cols, BLOCK)``, a shape, an index).

The interpreter holds an int argument as a one-element 1-D NumPy array and gives ``tl.tensor`` an
``__index__`` of ``int(self.handle.data)``. NumPy 2 refuses to convert an array of ndim > 0 to a scalar
(``only 0-dimensional arrays can be converted to Python scalars``), so under Triton 3.5 and 3.6 every kernel
that loops to a runtime bound crashes; Triton 3.9 squeezes the array first. Here ``__index__`` is the 3.9 one
on every release, set through the same per-launch patch scope as the interpreter's own.
"""

from __future__ import annotations

from harness.interpreter._core import Patch, replace

GAP = "scalar tensors as ints"


def install() -> list[Patch]:
    from triton.runtime import interpreter

    return [replace(GAP, interpreter, "_patch_lang_tensor", _patch_lang_tensor, where="triton.runtime.interpreter")]


def _index(self) -> int:
    return int(self.handle.data.squeeze())


def _patch_lang_tensor(original):
    def patch_lang_tensor(tensor, *scope):  # (tensor, scope) from 3.6 on; (tensor) before, set for good
        original(tensor, *scope)
        if scope:
            scope[0].set_attr(tensor, "__index__", _index)
        else:
            tensor.__index__ = _index

    return patch_lang_tensor
