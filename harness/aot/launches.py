"""Recording Triton launches without running them, and the compilable JITFunction behind a kernel object.

`record_launches` runs a launcher with every Triton launch intercepted (nothing executes, tensors are on the
meta device) and returns one `LaunchRecord` per launch (every autotune config included): what Triton's own
launcher would specialise, so harness.aot.triton can compile it ahead of time for any target.
Triton and torch are imported lazily. Triton: 3.4 to 3.9 (native_specialize_impl from 3.6, its Python form before).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["LaunchRecord", "as_jit_function", "jit_language", "intercept_launches", "record_launches"]

@dataclass(frozen=True)
class LaunchRecord:
    kernel_name: str
    module: str
    jit_fn: Any = field(repr=False, compare=False)
    signature: dict[str, str] = field(hash=False)   # param -> Triton type, "constexpr" where Triton says so
    constexprs: dict[str, Any] = field(hash=False)  # declared constexprs + args Triton specialises (1, None)
    num_warps: int
    num_stages: int
    grid: tuple[int, int, int] | None
    divisible_by_16: tuple[str, ...] = ()   # args Triton gives tt.divisibility=16 (pointers and ints)
    specialised: tuple[str, ...] = ()       # non-constexpr args Triton turned into constexprs (value 1, None)
    options: dict[str, Any] = field(default_factory=dict, hash=False)  # other launch options (num_ctas, ...)
    autotune_config: int | None = None      # index into the autotuner's configs
    autotune_count: int | None = None
    note: str = ""
    # which of num_warps/num_stages the launch left to the backend: they hold CUDA's defaults here, and a
    # compile for another backend (HIP's num_stages default differs) takes that backend's own
    defaulted: tuple[str, ...] = ()

    def config_label(self, num_warps: int | None = None, num_stages: int | None = None) -> str:
        """Compact: declared constexprs, then specialised args, warps, stages, the pointers' element types;
        "#i" for autotune config i."""
        names = [k for k in self.constexprs if k not in self.specialised] + list(self.specialised)
        label = ",".join(f"{k}={str(self.constexprs[k]).removeprefix('triton.language.')[:40]}" for k in names)
        label += f" w{num_warps or self.num_warps} s{num_stages or self.num_stages}"
        # The tensors' element types tell apart the launches a spec's dtypes make of one config.
        types = dict.fromkeys(t[1:] for t in self.signature.values() if str(t).startswith("*"))
        label += f" [{','.join(types)}]" if types else ""
        return label.strip() if self.autotune_config is None else f"#{self.autotune_config} {label.strip()}"



# ---------------------------------------------------------------------------------------------- jit functions

_JIT_MEMO: dict[Any, Any] = {}       # python function -> its JITFunction
_GLOBALS_MEMO: dict[int, dict] = {}  # id(module globals) -> copy with interpreted functions made JITFunctions


def _interpreted_cls():
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction


def as_jit_function(obj: Any, rewrite_globals: bool = True):
    """The compilable JITFunction behind a kernel object: unwraps autotuners/heuristics, and rebuilds one
    from the Python function when TRITON_INTERPRET=1 made it an InterpretedFunction (callees included)."""
    from triton.runtime.jit import JITFunction

    interp = _interpreted_cls()
    while not isinstance(obj, (JITFunction, interp)) and hasattr(obj, "fn") and not inspect.isfunction(obj):
        obj = obj.fn
    if isinstance(obj, JITFunction) and not _needs_rewrite(obj.fn.__globals__):
        return obj
    pyfn = obj.fn if isinstance(obj, (JITFunction, interp)) else obj
    if pyfn in _JIT_MEMO:
        return _JIT_MEMO[pyfn]
    if isinstance(obj, JITFunction):
        kwargs = {k: getattr(obj, k, None) for k in ("version", "do_not_specialize",
                                                     "do_not_specialize_on_alignment", "debug", "noinline")}
    else:
        kwargs = dict(getattr(obj, "kwargs", {}))
    accepted = inspect.signature(JITFunction.__init__).parameters
    kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    fn = _with_jit_globals(pyfn) if rewrite_globals else pyfn
    return _JIT_MEMO.setdefault(pyfn, JITFunction(fn, **kwargs))  # a cycle may have made one meanwhile


@contextlib.contextmanager
def jit_language():
    """Under TRITON_INTERPRET=1 Triton's own @jit library (tl.sum, tl.softmax, tensor.sum, ...) is interpreted
    too; the code generator would call those as Python (and leave the interpreter's patches on `tl`).
    Swap in JITFunctions, in place, for the duration of a compile."""
    import sys

    from triton.language.core import tensor

    interp = _interpreted_cls()
    saved: list[tuple[Any, str, Any]] = []
    try:  # nothing to swap in a process that is not interpreted
        mods = [m for n, m in list(sys.modules.items()) if n.startswith("triton.language") and m]
        for owner in [*mods, tensor]:
            for attr, val in list(vars(owner).items()):
                cells = [c.cell_contents for c in getattr(val, "__closure__", None) or ()
                         if owner is tensor and isinstance(c.cell_contents, interp)]  # member wrappers
                target = val if isinstance(val, interp) else (cells[0] if cells else None)
                if target is not None:
                    saved.append((owner, attr, val))
                    setattr(owner, attr, as_jit_function(target, rewrite_globals=False))
        yield
    finally:
        for owner, attr, val in reversed(saved):
            setattr(owner, attr, val)


def _needs_rewrite(globs: dict) -> bool:
    """Interpreted functions among the globals, or in a (non-library) module the globals hold."""
    interp = _interpreted_cls()
    return any(isinstance(v, interp) or (isinstance(v, types.ModuleType) and _module_has(v, interp))
               for v in list(globs.values()))


def _module_has(mod: types.ModuleType, interp) -> bool:
    return mod.__name__.split(".")[0] not in ("triton", "torch", "numpy") and any(
        isinstance(v, interp) for v in list(vars(mod).values()))


def _with_jit_globals(pyfn: Callable) -> Callable:
    """Same function over a copy of its globals in which interpreted callees (also those reached as module
    attributes) are JITFunctions, so Triton's code generator can compile it. One copy per module, registered
    before it is filled, so functions of a module that refer to each other end up sharing it."""
    interp = _interpreted_cls()
    if not _needs_rewrite(pyfn.__globals__):
        return pyfn
    globs = _GLOBALS_MEMO.get(id(pyfn.__globals__))
    if globs is None:
        globs = _GLOBALS_MEMO[id(pyfn.__globals__)] = dict(pyfn.__globals__)
        for name, val in list(globs.items()):
            if isinstance(val, interp):
                globs[name] = as_jit_function(val)
            elif isinstance(val, types.ModuleType) and _module_has(val, interp):
                proxy = types.ModuleType(val.__name__)
                proxy.__dict__.update({k: as_jit_function(v) if isinstance(v, interp) else v
                                       for k, v in vars(val).items()})
                globs[name] = proxy
    new = types.FunctionType(pyfn.__code__, globs, pyfn.__name__, pyfn.__defaults__, pyfn.__closure__)
    for attr in ("__kwdefaults__", "__qualname__", "__module__", "__doc__", "__annotations__"):
        setattr(new, attr, getattr(pyfn, attr))
    return new


# ---------------------------------------------------------------------------------------------- interception

_ACTIVE: list[list[LaunchRecord]] = []
_AUTOTUNE: list[tuple[int, int]] = []


def _specialise(jit, bound: dict[str, Any]) -> tuple[dict, dict, tuple, tuple]:
    """Triton's own specialisation of each argument (type, value-1/None -> constexpr, divisibility by 16)."""
    from triton.backends.compiler import BaseBackend

    try:
        from triton._C.libtriton import native_specialize_impl
    except ImportError:  # triton < 3.6: the same rules in Python, over the backend's argument specialisation
        from triton.runtime.jit import create_specialize_impl

        python_impl = create_specialize_impl(BaseBackend.get_arg_specialization)
        native_specialize_impl = lambda _backend, v, *flags: python_impl(v, *flags)

    def spec(v, kp):  # what the launcher Triton generates for this kernel computes, argument by argument
        return native_specialize_impl(BaseBackend, v, kp.is_const, not kp.do_not_specialize,
                                      not kp.do_not_specialize_on_alignment)
    signature, constexprs, div16, specialised = {}, {}, [], []
    for kp, (name, val) in zip(jit.params, bound.items(), strict=True):
        if kp.is_constexpr:
            signature[name], constexprs[name] = "constexpr", val
            continue
        ty, key = spec(val, kp)
        ann = getattr(kp, "annotation_type", "")
        if ann:  # an annotated type wins; Triton never specialises annotated floats and bools
            ty, key = ann, (None if ann == "u1" or ann[:2] in ("fp", "bf") else key)
        signature[name] = ty
        if ty == "constexpr":
            constexprs[name] = val
            specialised.append(name)
        elif isinstance(key, str) and "D" in key:
            div16.append(name)
    return signature, constexprs, tuple(div16), tuple(specialised)


def _make_record(kernel, args, kwargs, grid) -> LaunchRecord:
    from triton.backends.nvidia.compiler import CUDAOptions  # its defaults are what a launch without options gets

    jit = as_jit_function(kernel)
    pyfn = jit.fn
    params = {k: v for k, v in kwargs.items() if k in jit.arg_names}
    options = {k: v for k, v in kwargs.items() if k not in jit.arg_names and v is not None}
    bound = inspect.signature(pyfn).bind(*args, **params)
    bound.apply_defaults()
    bound_args = dict(bound.arguments)
    signature, constexprs, div16, specialised = _specialise(jit, bound_args)
    defaulted = tuple(k for k in ("num_warps", "num_stages") if not options.get(k))
    num_warps = options.pop("num_warps", None) or CUDAOptions.num_warps
    num_stages = options.pop("num_stages", None) or CUDAOptions.num_stages
    note = ""
    try:
        g = grid(bound_args) if callable(grid) else grid
        g = tuple(int(x) for x in (g if isinstance(g, (tuple, list)) else (g,)))
        g = (g + (1, 1, 1))[:3]
    except Exception as e:  # a grid the launcher computes from something we cannot evaluate
        g, note = None, f"grid not evaluated: {type(e).__name__}: {e}"
    at = _AUTOTUNE[-1] if _AUTOTUNE else (None, None)
    return LaunchRecord(kernel_name=pyfn.__name__, module=pyfn.__module__, jit_fn=kernel, signature=signature,
                        constexprs=constexprs, num_warps=int(num_warps), num_stages=int(num_stages), grid=g,
                        divisible_by_16=div16, specialised=specialised, options=options,
                        autotune_config=at[0], autotune_count=at[1], note=note,
                        defaulted=defaulted)


def _recording_run(self, *args, grid=None, warmup=False, **kwargs):
    _ACTIVE[-1].append(_make_record(self, args, kwargs, grid))


def _autotune_run(self, *args, **kwargs):
    configs = list(self.configs)
    allowed = configs
    prune = getattr(self, "early_config_prune", None)
    if prune:  # the kernel's own rule for which configs this launch may use: the others never run for it
        allowed = prune(configs, dict(zip(self.arg_names, args, strict=False)), **kwargs) or configs
    for i, cfg in enumerate(configs):  # every config the launch may use, not the benchmarked winner alone
        if not any(cfg is a for a in allowed):
            continue
        _AUTOTUNE.append((i, len(configs)))
        if cfg.pre_hook is not None:  # as Autotuner.run does before each launch: e.g. a TMA descriptor's box
            cfg.pre_hook({**dict(zip(self.arg_names, args, strict=False)), **kwargs, **cfg.all_kwargs()})
        try:
            self.fn.run(*args, **{**kwargs, **cfg.all_kwargs()})
        finally:
            _AUTOTUNE.pop()


class _RecordingRun:
    """``run`` as a data descriptor, which wins over an instance attribute: before 3.6 an InterpretedFunction
    set its own ``run`` in ``__init__`` (what an autotuner or heuristics wrapper calls) and its ``__getitem__``
    ran the kernel without it. An instance made inside the block keeps its own for after the block."""

    def __get__(self, obj, cls=None):
        return self if obj is None else functools.partial(_recording_run, obj)

    def __set__(self, obj, value):
        obj.__dict__["run"] = value


def _recording_getitem(self, grid):
    return lambda *args, **kwargs: _recording_run(self, *args, grid=grid, **kwargs)


_MISSING = object()


@contextlib.contextmanager
def intercept_launches():
    """Within the block every `kernel[grid](...)` (plain, interpreted, autotuned, heuristics) is recorded
    instead of run; yields the list the records go to. Class attributes are restored on exit."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    interp = _interpreted_cls()
    patches = [(JITFunction, "run", _recording_run), (Autotuner, "run", _autotune_run),
               (interp, "run", _RecordingRun())]
    if "__getitem__" in interp.__dict__:  # triton < 3.6: not KernelInterface's, which goes through run
        patches.append((interp, "__getitem__", _recording_getitem))
    saved = [(cls, name, cls.__dict__.get(name, _MISSING)) for cls, name, _ in patches]
    records: list[LaunchRecord] = []
    _ACTIVE.append(records)
    try:
        for cls, name, repl in patches:
            setattr(cls, name, repl)
        yield records
    finally:
        _ACTIVE.pop()
        if not _ACTIVE:  # the outermost block restores
            for cls, name, orig in saved:
                if orig is _MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, orig)


def _storage_span(t) -> int:
    if t.numel() == 0:
        return t.storage_offset()
    return t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride(), strict=True)) + 1


def _map_tensors(obj: Any, f: Callable) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        return f(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(v, f) for v in obj)
    return {k: _map_tensors(v, f) for k, v in obj.items()} if isinstance(obj, dict) else obj


def _rehome(t, device: str):
    """Same shape, strides, offset and dtype on `device`; CPU copies carry the data (a launcher may read it,
    e.g. `.item()`), meta ones none."""
    import torch

    span = _storage_span(t)
    base = torch.zeros(span, dtype=t.dtype, device=device)
    if device != "meta" and t.device.type != "meta" and span:
        base.copy_(t.detach().as_strided((span,), (1,), 0))
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def record_launches(fn: Callable, kwargs: dict[str, Any], *, cpu_fallback_bytes: int = 64 << 20
                    ) -> list[LaunchRecord]:
    """Call `fn(**kwargs)` with every Triton launch recorded, not run. Tensors are replaced by meta tensors of
    the same layout (the caller's tensors are never touched). If the launcher does something meta tensors
    cannot (`.item()`, data-dependent ops), it is rerun on CPU copies when those total at most
    `cpu_fallback_bytes`; the records then say so in `note` and a warning is issued."""
    try:
        with intercept_launches() as records:
            fn(**_map_tensors(kwargs, lambda t: _rehome(t, "meta")))
        return list(records)
    except Exception as meta_error:
        sizes: list[int] = []
        _map_tensors(kwargs, lambda t: sizes.append(_storage_span(t) * t.element_size()))
        need = sum(sizes)
        if need > cpu_fallback_bytes:
            raise RuntimeError(f"launcher failed on meta tensors ({type(meta_error).__name__}: {meta_error}) "
                               f"and its tensors ({need} bytes) exceed the CPU fallback limit "
                               f"({cpu_fallback_bytes} bytes); use a smaller case") from meta_error
        with intercept_launches() as records:
            fn(**_map_tensors(kwargs, lambda t: _rehome(t, "cpu")))
        first = (str(meta_error).strip().splitlines() or [""])[0]
        note = f"recorded with CPU tensors: meta failed ({type(meta_error).__name__}: {first})"
        warnings.warn(f"{getattr(fn, '__name__', fn)}: {note}", stacklevel=2)
        return [dataclasses.replace(r, note="; ".join(filter(None, (r.note, note)))) for r in records]

