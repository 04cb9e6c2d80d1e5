"""Gap: what the interpreter cannot do at all, said as such.

The interpreter raises NotImplementedError for what it never implemented (``inline_asm_elementwise``; before
this layer, every libdevice call) and wraps every error of a kernel in InterpreterError(repr(e)): a kernel
test would report either as the kernel's own failure. Around each launch this turns a NotImplementedError
raised by the interpreter itself into an interpreter limitation, lets the layer's own limitations out
unwrapped, and undoes the launch's per-launch patches (see ``_core.Launch``).
"""

from __future__ import annotations

import os

from harness.interpreter._core import RUNS, InterpreterLimitation, Launch, Patch, limitation, replace

GAP = "limitations"


def install() -> list[Patch]:
    from triton.runtime import interpreter

    return [replace(GAP, interpreter.GridExecutor, "__call__", _launch, where="GridExecutor")]


def _raised_by_interpreter(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename.endswith(os.path.join("runtime", "interpreter.py"))


def found_limitation(exc: BaseException) -> BaseException | None:
    """The limitation behind ``exc``, following the InterpreterError wrappers (one per device function)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, InterpreterLimitation):
            return exc
        if isinstance(exc, NotImplementedError) and _raised_by_interpreter(exc):
            found = limitation(f"{exc} (the interpreter does not implement it; a GPU runs it)")
            found.__cause__ = exc
            return found
        exc = exc.__cause__
    return None


def _launch(original):
    def __call__(self, *args, **kwargs):
        RUNS.append(Launch())
        try:
            return original(self, *args, **kwargs)
        except Exception as exc:
            found = found_limitation(exc)
            if found is None:
                raise
            raise found from found.__cause__
        finally:
            RUNS.pop().restore()

    return __call__
