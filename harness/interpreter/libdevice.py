"""Gap: libdevice under the interpreter.

Compiled, ``triton.language.extra.libdevice`` is a stub module the code generator swaps for the backend's
(``tl.extra.cuda.libdevice`` on NVIDIA), whose functions emit calls to libdevice symbols (``__nv_tanhf``).
Interpreted, nothing swaps the stub, so ``libdevice.tanh(x)`` runs its body ``...`` and returns None; the
backend modules are never bound to the interpreter's semantic (``_semantic argument must be provided``); and
the interpreter's ``create_extern_elementwise`` raises NotImplementedError for every symbol.

So, for the length of each launch (in the scope the interpreter restores after it), the backend modules are
bound like ``tl`` is, the stub's functions and any imported by name (``from ... libdevice import rsqrt``) point
at the CUDA ones, as the compiler's module map does; and ``create_extern_elementwise`` evaluates the symbol
with NumPy (``libdevice_numpy``). Dispatch on argument types stays libdevice's own, so a call that does not
compile (an fp16 ``tanh``) fails here too. A symbol without a NumPy stand-in is an interpreter limitation.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys

import numpy as np

from harness.interpreter._core import Namespace, Patch, current_launch, limitation, missing, replace
from harness.interpreter.libdevice_numpy import DIRECTED, IMPLS, directed

GAP = "libdevice"
STUB = "triton.language.extra.libdevice"
BACKENDS = ("triton.language.extra.cuda.libdevice", "triton.language.extra.hip.libdevice")
_MODES = ("rn", "rz", "rd", "ru")


def install() -> list[Patch]:
    import importlib

    from triton.runtime import interpreter

    for name in (STUB, *BACKENDS):
        try:
            importlib.import_module(name)
        except ImportError:  # a backend this Triton build does not ship: nothing of it to bind
            pass
    extern = replace(GAP, interpreter.InterpreterBuilder, "create_extern_elementwise", _extern,
                     where="InterpreterBuilder")
    if not hasattr(interpreter, "_LangPatchScope"):  # Triton < 3.6 patches `tl` for good, with no scope to undo
        return [extern, missing(GAP, "triton.runtime.interpreter._patch_lang", "this Triton release has no "
                                "per-launch patch scope (_LangPatchScope, from 3.6) to bind libdevice through")]
    return [extern, replace(GAP, interpreter, "_patch_lang", _patch_lang, where="triton.runtime.interpreter")]


def _modules() -> list:
    return [sys.modules[n] for n in BACKENDS if n in sys.modules]


@functools.cache
def symbols() -> dict[str, str]:
    """Each libdevice/ocml symbol -> the name of the Triton function that calls it (``__nv_tanhf`` -> ``tanh``),
    read from the backend modules' source text (not their attributes, which a launch swaps), so a release
    that adds or renames one is followed."""
    found: dict[str, str] = {}
    for module in _modules():
        try:
            source = inspect.getsource(module)
        except (OSError, TypeError):
            continue
        for block in re.split(r"\n(?=def )", source):
            name = re.match(r"def (\w+)\(", block)
            for symbol in re.findall(r'"(__[A-Za-z]\w*)"', block) if name else ():
                found.setdefault(symbol, name.group(1))
    return found


def evaluate(symbol: str, arrays: list[np.ndarray], out_dtype) -> np.ndarray:
    """The NumPy value of one libdevice call, in ``out_dtype``; a limitation where there is none."""
    name = symbols().get(symbol, symbol)
    name = "fma_rn" if name == "fma" else name  # libdevice's plain fma rounds to nearest once: the exact path
    base, _, mode = name.rpartition("_")
    if mode in _MODES and base in DIRECTED:
        if mode != "rn" and np.dtype(out_dtype) == np.float64 and base not in ("ll2double", "ull2double"):
            raise limitation(f"libdevice {name} ({symbol}): double-precision directed rounding needs more "
                             "than float64 to decide")
        return directed(base, mode, arrays, np.dtype(out_dtype).type)
    impl = IMPLS.get(name)
    if impl is None:
        raise limitation(f"libdevice {name} ({symbol}) has no NumPy stand-in")
    with np.errstate(all="ignore"):  # domain errors give NaN/inf on the GPU too
        out = np.asarray(impl(*arrays))
    return out.astype(out_dtype)


def _extern(original):
    def create_extern_elementwise(self, libName, libPath, symbol, argList, retType, isPure):
        from triton.runtime.interpreter import TensorHandle, _get_np_dtype

        arrays = np.broadcast_arrays(*[np.asarray(a.data) for a in argList])
        return TensorHandle(evaluate(symbol, list(arrays), _get_np_dtype(retType)), retType.scalar)

    return create_extern_elementwise


def _patch_lang(original):
    def patch_lang(fn):
        from triton.runtime import interpreter

        launch = current_launch()
        langs = _languages(fn.__globals__)
        # Triton patches the language modules again at every device-function call of every program, though the
        # launch patched them already and keeps them so until it ends: a fifth of an interpreted spec run's time
        # (cProfile over rmsnorm's and softmax's items). A call whose modules and globals this launch has
        # patched and bound already gets an empty scope instead, which leaves the same state.
        if launch is not None and langs <= launch.done and id(fn.__globals__) in launch.done:
            return interpreter._LangPatchScope()
        scope = original(fn)
        if launch is None:  # a device function called outside any launch: Triton's scope is all there is
            _bind(fn.__globals__, scope, set())
            return scope
        launch.done.update(langs)
        mine = interpreter._LangPatchScope()
        launch.scopes.append(mine)
        _bind(fn.__globals__, mine, launch.done)
        return scope

    return patch_lang


def _languages(globs: dict) -> set:
    """Which of triton.language and triton.language.core a function's globals hold (what Triton patches)."""
    import triton.language as tl

    return {("language", id(v)) for v in globs.values() if v is tl or v is tl.core}


def _bind(globs: dict, scope, done: set) -> None:
    """Bind the libdevice modules to the interpreter (once per launch) and point this function's libdevice
    globals at them; every change goes through ``scope``, which puts it back."""
    from triton.runtime import interpreter

    backends = _modules()
    if backends and "modules" not in done:
        done.add("modules")
        for module in backends:
            interpreter._patch_builtin(module, interpreter.interpreter_builder, scope)
    by_name = {m.__name__: m for m in backends}
    default = by_name.get(BACKENDS[0], backends[0] if backends else None)  # what the stub means: CUDA's
    stub = sys.modules.get(STUB)
    if stub is not None and default is not None and "stub" not in done:
        done.add("stub")
        for name, fn in list(vars(stub).items()):
            if inspect.isfunction(fn) and fn.__module__ == STUB and hasattr(default, name):
                scope.set_attr(stub, name, getattr(default, name))
    if id(globs) in done or default is None:
        return
    done.add(id(globs))
    namespace = Namespace(globs)
    for key, value in list(globs.items()):
        home = getattr(value, "__module__", None)
        if home == STUB or home in by_name:
            module = by_name.get(home, default)
            bound = getattr(module, getattr(value, "__name__", key), None)
            if bound is not None and bound is not value:
                scope.set_attr(namespace, key, bound)
