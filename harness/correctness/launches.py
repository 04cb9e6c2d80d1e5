"""Watching Triton launches while a kernel runs: a zero-size case must not launch an empty grid.

Patches ``run`` of Triton's JIT (and interpreter) function classes for the duration of a ``with`` block and
wraps each launch's grid, so the check sees the grid Triton actually uses, tuple or callable alike.
"""

from __future__ import annotations

import contextlib


def _classes() -> list[type]:
    import triton.runtime.jit as jit

    classes = [jit.JITFunction]
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except ImportError:  # pragma: no cover - older Triton
        pass
    return classes


@contextlib.contextmanager
def empty_grid_launches():
    """Yield a list that collects ``(kernel name, grid)`` for every launch with a zero-sized grid."""
    empty: list[tuple[str, tuple]] = []
    originals = {cls: cls.__dict__["run"] for cls in _classes() if "run" in cls.__dict__}

    def watch(original):
        def run(self, *args, grid, warmup, **kwargs):
            name = getattr(getattr(self, "fn", None), "__name__", type(self).__name__)

            def checked(meta, _grid=grid):
                g = _grid(meta) if callable(_grid) else _grid
                dims = tuple(g) if isinstance(g, (tuple, list)) else (g,)
                if not warmup and any(int(d) == 0 for d in dims):
                    empty.append((name, dims))
                return g

            return original(self, *args, grid=checked, warmup=warmup, **kwargs)
        return run

    for cls, original in originals.items():
        cls.run = watch(original)
    try:
        yield empty
    finally:
        for cls, original in originals.items():
            cls.run = original
