"""Whether kernel code changed the harness's own timing and checking code in the process that timed it.

A kernel module runs arbitrary Python when it is imported and when it is called: it can rebind
``time.perf_counter_ns``, ``torch.cuda.Event.elapsed_time`` or a function of the sampler, and every sample
after that means nothing. The deciding process (which imports no kernel) takes :func:`fingerprints` of
everything a gate case's timing and checks call: the clocks and CUDA events, the module globals of the
sampler, the interleaving, the verdict, the checks and the worker, the builtins they use, the pipe that carries
the result back. A function's fingerprint is its code (bytecode, constants, names), a class's is its own
attributes', a builtin's its type and name, a module's its name and file. The worker compares them
(:func:`changed`) at the start of a case, after each side's kernel modules are imported, after the checks and
after the timing; any difference makes the case WRONG, naming what changed and where the new object came from,
and the worker is replaced (harness.workers.child.retire).

This is a tripwire, not a sandbox: code in the same process can also rewrite the tripwire. The static scan
(harness/gate/scan.py) lists such code for the reviewer, and the verdict is computed in the parent from
numbers alone, under the roofline's plausibility check.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import re
import types

# Modules whose every function, class, imported name and UPPER_CASE constant is fingerprinted.
WATCHED_MODULES = (
    "harness.timing.sampler", "harness.timing.clocks", "harness.timing.engine", "harness.timing.stats",
    "harness.timing.launch", "harness.correctness.backward",
    "harness.gate.interleave", "harness.gate.verdict", "harness.gate.abcase", "harness.gate.integrity",
    "harness.gate.policy", "harness.gate.model", "harness.correctness.checks", "harness.correctness.numerics",
    "harness.correctness.poison", "harness.correctness.calls", "harness.correctness.guards",
    "harness.correctness.args", "harness.correctness.registry", "harness.bench.run", "harness.bench.recheck",
    "harness.bench.backward", "harness.bench.gradspec", "harness.bench.modes", "harness.workers.child",
)
# Single objects outside the harness that those modules call.
WATCHED_OBJECTS = (
    *(f"time:{n}" for n in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns",
                            "sleep")),
    *(f"torch.cuda:{n}" for n in ("Event", "Stream", "synchronize", "_sleep", "current_stream", "current_device",
                                  "device", "set_device", "is_available", "get_device_properties", "stream")),
    "torch:Tensor", "torch:sum", "torch:empty_strided", "torch:zeros", "torch:ones",
    *(f"builtins:{n}" for n in ("len", "min", "max", "sum", "sorted", "abs", "isinstance", "float", "int", "range",
                                "zip", "enumerate", "any", "all", "round", "print", "setattr", "getattr", "open")),
    "math:isfinite", "statistics:median", "numpy:median", "numpy:nanmedian", "numpy:percentile",
    "multiprocessing.connection:Connection", "multiprocessing.reduction:ForkingPickler", "pickle:dumps",
)
_MAX_DEPTH = 3
_TREE = re.compile(r"^.*[/\\]kh_(?:base|pr)_[0-9a-f]{12}[/\\]")  # a gate tree's temporary folder: shown from inside


def _const(value) -> str:
    if isinstance(value, types.CodeType):
        return _code(value)
    if isinstance(value, frozenset):  # its order follows string hashing, which differs between processes
        return "frozenset(" + ",".join(sorted(_const(v) for v in value)) + ")"
    if isinstance(value, tuple):
        return "(" + ",".join(_const(v) for v in value) + ")"
    return repr(value)


def _code(co: types.CodeType) -> str:
    h = hashlib.sha256(co.co_code)
    h.update(repr((co.co_name, co.co_names, co.co_varnames, co.co_freevars, co.co_cellvars)).encode())
    for c in co.co_consts:
        h.update(_const(c).encode())
    return h.hexdigest()[:20]


def fingerprint(obj, depth: int = 0) -> str:
    """What identifies ``obj`` across processes of one interpreter: code for Python functions, attributes for
    classes, type and name for everything compiled."""
    if isinstance(obj, (staticmethod, classmethod)):
        return f"{type(obj).__name__}:{fingerprint(obj.__func__, depth)}"
    if isinstance(obj, property):
        return "property:" + ",".join(fingerprint(f, depth) for f in (obj.fget, obj.fset, obj.fdel) if f)
    if isinstance(obj, types.FunctionType):
        return f"function {obj.__module__}.{obj.__qualname__}:{_code(obj.__code__)}:{_const(obj.__defaults__)}"
    if isinstance(obj, types.ModuleType):
        spec = getattr(obj, "__spec__", None)
        return f"module {obj.__name__}:{getattr(spec, 'origin', None)}"
    wrapped = getattr(obj, "__wrapped__", None)
    if isinstance(wrapped, types.FunctionType):  # functools.cache, wraps: the function inside
        return f"{type(obj).__name__}:{fingerprint(wrapped, depth)}"
    if isinstance(obj, type):
        if depth >= _MAX_DEPTH:
            return f"class {obj.__module__}.{obj.__qualname__}"
        own = sorted((k, fingerprint(v, depth + 1)) for k, v in vars(obj).items()
                     if k not in ("__dict__", "__weakref__", "__doc__", "__annotations__")
                     and (callable(v) or isinstance(v, (property, staticmethod, classmethod))))
        digest = hashlib.sha256(repr(own).encode()).hexdigest()[:20]
        return f"class {obj.__module__}.{obj.__qualname__}:{digest}"
    if isinstance(obj, (int, float, str, bytes, bool, type(None), tuple, frozenset)):
        return "value:" + hashlib.sha256(_const(obj).encode()).hexdigest()[:20]
    if isinstance(obj, dict) and all(isinstance(k, (str, int)) for k in obj):
        return "dict:" + hashlib.sha256(repr(sorted((str(k), _value(v)) for k, v in obj.items())).encode()) \
            .hexdigest()[:20]
    return f"{type(obj).__module__}.{type(obj).__qualname__} {getattr(obj, '__module__', '')}." \
           f"{getattr(obj, '__qualname__', getattr(obj, '__name__', ''))}"


def _value(v) -> str:
    return _const(v) if isinstance(v, (int, float, str, bool, type(None), tuple, frozenset)) else type(v).__name__


def _watched(module) -> dict[str, object]:
    """A module's globals worth fingerprinting: what it defines or imports that can be called, its modules and
    its UPPER_CASE constants (lowercase module state, such as a lazily opened NVML handle, may change)."""
    out = {}
    for name, value in vars(module).items():
        if name.startswith("__") or not name.isidentifier():  # pytest's assertion rewriter adds "@py_builtins"
            continue
        if callable(value) or isinstance(value, types.ModuleType) or name.lstrip("_").isupper():
            out[name] = value
    return out


def _targets() -> dict[str, object]:
    found = {}
    for mod in WATCHED_MODULES:
        module = importlib.import_module(mod)
        found.update({f"{mod}:{name}": value for name, value in _watched(module).items()})
    for path in WATCHED_OBJECTS:
        mod, _, attr = path.partition(":")
        try:
            found[path] = getattr(importlib.import_module(mod), attr)
        except (ImportError, AttributeError):
            continue  # absent in this installation (numpy without nanmedian...): nothing to watch
    for cls in {id(v): v for v in found.values() if isinstance(v, type)}.values():
        # Each class's own methods under its defining name, so a patched one is named (Event.elapsed_time).
        found.update({f"{cls.__module__}:{cls.__qualname__}.{k}": v for k, v in vars(cls).items()
                      if k.isidentifier() and (callable(v) or isinstance(v, (property, staticmethod, classmethod)))})
    return found


def fingerprints() -> dict[str, str]:
    """Every watched name's fingerprint, in the process that decides (before any kernel is imported)."""
    return {k: fingerprint(v) for k, v in _targets().items()}


def _where(obj) -> str:
    try:
        target = inspect.unwrap(obj) if callable(obj) else obj
        file, line = inspect.getsourcefile(target), inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        return ""
    return f" ({_TREE.sub('', file)}:{line})" if file else ""


def changed(expected: dict[str, str]) -> list[str]:
    """One line per watched name whose object is not the one the deciding process fingerprinted."""
    now = _targets()
    lines = []
    for key, fp in sorted(expected.items(), key=lambda kv: "." not in kv[0].partition(":")[2]):  # methods first
        obj = now.get(key, _lookup(key))
        if obj is _missing:
            lines.append(f"{key.replace(':', '.')}: deleted")
        elif fingerprint(obj) != fp:
            name = getattr(obj, "__qualname__", None) or type(obj).__name__
            lines.append(f"{key.replace(':', '.')}: now {type(obj).__name__} {name}{_where(obj)}")
    return lines


_missing = object()


def _lookup(key: str):
    """A watched name that is no longer callable (rebound to None, say): what it is now."""
    mod, _, attr = key.partition(":")
    try:
        obj = importlib.import_module(mod)
    except ImportError:
        return _missing
    for part in attr.split("."):
        obj = getattr(obj, part, _missing)
        if obj is _missing:
            break
    return obj
