"""Static cross-architecture check of Triton kernels: record launches, compile ahead of time, read resources.

`record_launches` runs a launcher with every Triton launch intercepted (nothing executes, tensors are on the
meta device), `compile_launch` compiles a recorded launch with Triton's own compiler for sm_80/90/100 without
a GPU, `check` turns the resources read from the cubin into problems, `render_table` shows them.
Triton and torch are imported lazily; the CUDA binary readers and `Resources` live in harness.cudabuild.
Triton: versions with ASTSource(fn, signature, constexprs, attrs), native_specialize_impl and knobs
(tested on 3.6, 3.8 and 3.9, whose ASTSource forms are the same).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import os
import tempfile
import time
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.aot.nvcc import (
    ARCH_LIMITS,
    Resources,
    error_line,
    parse_ptxas_log,
    parse_res_usage,
    res_usage,
    reserved_shared,
    resource_problems,
    user_static_shared,
)
from harness.spec.archs import DEFAULT_ARCHS, normalize_arch
from harness.target.tools import find_tool

__all__ = ["ARCH_LIMITS", "LaunchRecord", "Resources", "CompileResult", "TableRow", "record_launches",
           "intercept_launches", "compile_launch", "compile_all", "check", "table_rows", "render_table"]

# ---------------------------------------------------------------------------------------------- records


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

    def config_label(self) -> str:
        """Compact: declared constexprs, then specialised args, warps, stages; "#i" for autotune config i."""
        names = [k for k in self.constexprs if k not in self.specialised] + list(self.specialised)
        label = ",".join(f"{k}={str(self.constexprs[k]).removeprefix('triton.language.')[:40]}" for k in names)
        label += f" w{self.num_warps} s{self.num_stages}"
        return label.strip() if self.autotune_config is None else f"#{self.autotune_config} {label.strip()}"


@dataclass(frozen=True)
class CompileResult:
    kernel_name: str
    arch: str
    config: str
    ok: bool
    error: str = ""                 # one line
    detail: str = field(default="", repr=False)
    resources: Resources | None = None
    dynamic_shared_bytes: int = 0   # what Triton's metadata says it requests at launch
    compile_s: float = 0.0
    record: LaunchRecord | None = field(default=None, repr=False, compare=False)


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
def _jit_language():
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
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

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
                        autotune_config=at[0], autotune_count=at[1], note=note)


def _recording_run(self, *args, grid=None, warmup=False, **kwargs):
    _ACTIVE[-1].append(_make_record(self, args, kwargs, grid))


def _autotune_run(self, *args, **kwargs):
    configs = list(self.configs)
    for i, cfg in enumerate(configs):  # every config, not the pruned or benchmarked winner
        _AUTOTUNE.append((i, len(configs)))
        try:
            self.fn.run(*args, **{**kwargs, **cfg.all_kwargs()})
        finally:
            _AUTOTUNE.pop()


@contextlib.contextmanager
def intercept_launches():
    """Within the block every `kernel[grid](...)` (plain, interpreted, autotuned, heuristics) is recorded
    instead of run; yields the list the records go to. Class attributes are restored on exit."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    patches = [(JITFunction, _recording_run), (Autotuner, _autotune_run), (_interpreted_cls(), _recording_run)]
    saved = [(cls, cls.__dict__["run"]) for cls, _ in patches]
    records: list[LaunchRecord] = []
    _ACTIVE.append(records)
    try:
        for cls, repl in patches:
            cls.run = repl
        yield records
    finally:
        _ACTIVE.pop()
        if not _ACTIVE:  # the outermost block restores
            for cls, orig in saved:
                cls.run = orig


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


# ---------------------------------------------------------------------------------------------- compile


def _ast_source(jit, record: LaunchRecord):
    import triton
    from triton.backends.compiler import BaseBackend
    from triton.compiler import ASTSource

    params = inspect.signature(ASTSource.__init__).parameters
    # 3.6 .. 3.9 alike: signature over every parameter by name ("constexpr" for constexprs), constexprs by
    # name, attrs keyed by argument path. Before 3.3 it was constants= with an AttrsDescriptor.
    if "constexprs" not in params:
        raise RuntimeError(f"triton {triton.__version__}: ASTSource{tuple(params)[1:]} predates the "
                           "constexprs=/attrs-dict form this module supports (triton >= 3.3)")
    names = list(record.signature)
    attrs = {(names.index(n),): BaseBackend.parse_attr("D") for n in record.divisible_by_16}
    return ASTSource(jit, dict(record.signature), constexprs=dict(record.constexprs), attrs=attrs)


@contextlib.contextmanager
def _compile_knobs():
    """Compile as for a GPU even under TRITON_INTERPRET=1, always run ptxas (a cache hit would skip the
    spill report) and have Triton print its own ptxas -v log, which the caller captures."""
    from triton import knobs

    with knobs.runtime.scope(), knobs.compilation.scope(), knobs.nvidia.scope():
        knobs.runtime.interpret = False
        knobs.compilation.always_compile = True
        knobs.nvidia.dump_ptxas_log = True
        yield


def _cubin_resources(kernel, name: str, log: str) -> tuple[Resources | None, str]:
    cubin = kernel.asm["cubin"]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"{name}.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        text, err = res_usage(path, find_tool("cuobjdump", prefer_triton=True))
    usage = parse_res_usage(text)
    entry = usage.get((None, name)) or next(iter(usage.values()), None)
    if err or entry is None:
        return None, f"cuobjdump -res-usage: {err or 'no function reported'}"
    spills = parse_ptxas_log(log)
    dynamic = int(getattr(kernel.metadata, "shared", 0) or 0)
    # the module holds this kernel and its noinline callees only: all their spills are this launch's
    res = Resources(registers=entry["REG"], spill_store_bytes=sum(v[1] for v in spills.values()),
                    spill_load_bytes=sum(v[2] for v in spills.values()), stack_bytes=entry["STACK"],
                    local_bytes=entry["LOCAL"],
                    shared_bytes=user_static_shared(entry["SHARED"], reserved_shared(cubin)) + dynamic)
    return res, "" if spills else "spill bytes unknown: Triton printed no ptxas -v log"


def compile_launch(record: LaunchRecord, arch: str | int) -> CompileResult:
    """Compile one recorded launch for `arch` with Triton's compiler (no GPU needed). Compile errors come
    back in the result, as one line (`error`) and the full text (`detail`)."""
    arch_name, cap = normalize_arch(arch)
    base = dict(kernel_name=record.kernel_name, arch=arch_name, config=record.config_label(), record=record)
    log = io.StringIO()
    t0 = time.perf_counter()
    try:
        import triton
        from triton.backends.compiler import GPUTarget

        src = _ast_source(as_jit_function(record.jit_fn), record)
        options = {**record.options, "num_warps": record.num_warps, "num_stages": record.num_stages}
        with _compile_knobs(), _jit_language(), contextlib.redirect_stdout(log):
            kernel = triton.compiler.compile(src, target=GPUTarget("cuda", cap, 32), options=options)
    except Exception as e:
        return CompileResult(**base, ok=False, error=f"{type(e).__name__}: {error_line(str(e))}", detail=str(e)[:4000],
                             compile_s=time.perf_counter() - t0)
    compile_s = time.perf_counter() - t0
    name = getattr(kernel.metadata, "name", record.kernel_name)
    res, err = _cubin_resources(kernel, name, log.getvalue())
    return CompileResult(**base, ok=True, error=err, resources=res, compile_s=compile_s,
                         dynamic_shared_bytes=int(getattr(kernel.metadata, "shared", 0) or 0))


def compile_all(records: list[LaunchRecord], archs=DEFAULT_ARCHS) -> list[CompileResult]:
    """compile_launch for every distinct launch (identical launches compile once) x arch."""
    seen, out = set(), []
    for rec in records:
        key = (id(as_jit_function(rec.jit_fn)), tuple(rec.signature.items()),
               tuple((k, repr(v)) for k, v in rec.constexprs.items()), rec.divisible_by_16, rec.num_warps,
               rec.num_stages, tuple(sorted((k, repr(v)) for k, v in rec.options.items())))
        if key not in seen:
            seen.add(key)
            out += [compile_launch(rec, a) for a in archs]
    return out


# ---------------------------------------------------------------------------------------------- checks


def _problems(result: CompileResult, arch: str, allow_spills: bool) -> list[str]:
    if not result.ok:
        return [f"compile error: {result.error}"]
    r = result.resources
    if r is None:
        return [f"resources not read: {result.error}"]
    threads = result.record.num_warps * 32 if result.record else 0
    return ([result.error] if result.error else []) + resource_problems(r, arch, allow_spills, threads)


def check(result: CompileResult, arch: str | int | None = None, allow_spills: bool = False) -> list[str]:
    """Problems of one compiled launch on `arch` (default: the arch it was compiled for), one line each."""
    arch_name = normalize_arch(arch if arch is not None else result.arch)[0]
    where = f"{result.kernel_name} [{result.config}] {arch_name}"
    return [f"{where}: {p}" for p in _problems(result, arch_name, allow_spills)]


# ---------------------------------------------------------------------------------------------- table


@dataclass(frozen=True)
class TableRow:
    kernel: str
    arch: str
    config: str
    registers: int | None
    spill_store_bytes: int | None
    spill_load_bytes: int | None
    stack_bytes: int | None
    shared_bytes: int | None
    compile_s: float
    status: str


def table_rows(results: list[CompileResult], allow_spills: bool = False) -> list[TableRow]:
    rows = []
    for res in results:
        r = res.resources
        problems = _problems(res, normalize_arch(res.arch)[0], allow_spills)
        rows.append(TableRow(res.kernel_name, res.arch, res.config, r and r.registers,
                             r and r.spill_store_bytes, r and r.spill_load_bytes, r and r.stack_bytes,
                             r and r.shared_bytes, round(res.compile_s, 3), "; ".join(problems) or "ok"))
    return rows


def render_table(rows: list[TableRow]) -> str:
    """Plain text for the terminal: kernel | arch | config | regs | spills st/ld | stack | smem | status."""
    cell = lambda v: "-" if v is None else str(v)
    head = ("kernel", "arch", "config", "regs", "spills st/ld", "stack", "smem", "status")
    body = [(r.kernel, r.arch, r.config, cell(r.registers),
             "-" if r.spill_store_bytes is None else f"{r.spill_store_bytes}/{r.spill_load_bytes}",
             cell(r.stack_bytes), cell(r.shared_bytes), r.status) for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head) - 1)]
    fmt = "  ".join(f"{{:{'>' if 3 <= i <= 6 else '<'}{w}}}" for i, w in enumerate(widths)) + "  {}"
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths), "-" * 6)]
    return "\n".join([*lines, *(fmt.format(*b) for b in body)])
