"""Static cross-architecture check of Triton kernels: compile recorded launches ahead of time, read resources.

`compile_launch` compiles a launch recorded by harness.aot.launches with Triton's own compiler for an NVIDIA
target (sm_80/90/100: cubin, read with cuobjdump and ptxas -v) or an AMD one (gfx942/gfx950, wave64: amdgcn
text, read by harness.aot.amd) without a GPU, `check` turns the resources into problems, `render_table`
shows them. Triton and torch are imported lazily.
Triton: versions with ASTSource(fn, signature, constexprs, attrs) and knobs (3.5 to 3.9, whose ASTSource
forms are the same; 3.4's AMD backend needs ROCm's ld.lld, which 3.5 links in).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import io
import os
import tempfile
import time
from dataclasses import dataclass, field

from harness.aot import amd, elf, occupancy, parallel
from harness.aot.launches import LaunchRecord, as_jit_function, intercept_launches, jit_language, record_launches
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
from harness.spec.archs import DEFAULT_ARCHS, normalize_arch, parse_arch
from harness.target.tools import find_tool

__all__ = ["ARCH_LIMITS", "LaunchRecord", "Resources", "CompileResult", "TableRow", "record_launches", "llvm_errors",
           "intercept_launches", "compile_launch", "compile_all", "check", "table_rows", "render_table"]


@dataclass(frozen=True)
class CompileResult:
    kernel_name: str
    arch: str
    config: str
    ok: bool
    error: str = ""                 # one line
    detail: str = field(default="", repr=False)
    resources: Resources | amd.AmdResources | None = None
    dynamic_shared_bytes: int = 0   # what Triton's metadata says it requests at launch
    compile_s: float = 0.0
    record: LaunchRecord | None = field(default=None, repr=False, compare=False)
    num_warps: int = 0              # as compiled: an AMD compile takes HIP's defaults where the launch gave none
    code_bytes: int | None = None   # machine code in the binary (cubin or hsaco), harness.aot.elf


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
    """Compile as for a GPU even under TRITON_INTERPRET=1, always run the backend's assembler (a cache hit
    would skip ptxas's spill report) and have Triton print its own ptxas -v log, which the caller captures."""
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


def _target_and_options(record: LaunchRecord, arch: str) -> tuple[object, dict]:
    """Triton's GPUTarget for `arch` and the launch's options for that backend: a launch that left warps or
    stages to the backend gets the HIP backend's defaults on AMD, as it would on a ROCm machine."""
    from triton.backends.compiler import GPUTarget

    a = parse_arch(arch)
    options = {**record.options, "num_warps": record.num_warps, "num_stages": record.num_stages}
    if a.vendor != "amd":
        return GPUTarget("cuda", a.number, 32), options
    from triton.backends.amd.compiler import HIPOptions

    for k in record.defaulted:
        options[k] = getattr(HIPOptions, k)
    return GPUTarget("hip", a.gfx, amd.WAVEFRONT), options


def compile_launch(record: LaunchRecord, arch: str | int) -> CompileResult:
    """Compile one recorded launch for `arch` (sm_NN or gfxNNN) with Triton's compiler (no GPU needed).
    Compile errors come back in the result, as one line (`error`) and the full text (`detail`)."""
    arch_name = normalize_arch(arch)[0]
    log = io.StringIO()
    t0 = time.perf_counter()
    options = {"num_warps": record.num_warps, "num_stages": record.num_stages}
    try:
        import triton

        target, options = _target_and_options(record, arch_name)
        src = _ast_source(as_jit_function(record.jit_fn), record)
        with _compile_knobs(), jit_language(), contextlib.redirect_stdout(log), _native_stderr() as native:
            kernel = triton.compiler.compile(src, target=target, options=options)
    except Exception as e:
        error, detail = _compile_error(e)
        return CompileResult(**_base(record, arch_name, options), ok=False, error=error, detail=detail,
                             compile_s=time.perf_counter() - t0)
    compile_s = time.perf_counter() - t0
    if errors := llvm_errors(native.text):
        # LLVM reports some backend failures (an inline-asm constraint the target has no register class for)
        # as a diagnostic on the process's stderr and still emits code: the kernel compiled to something else
        # than its source says, a failure the matrix must list, not an "ok"
        return CompileResult(**_base(record, arch_name, options), ok=False,
                             error=f"LLVM: {errors[0]}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""),
                             detail="\n".join(errors)[:4000], compile_s=compile_s)
    name = getattr(kernel.metadata, "name", record.kernel_name)
    dynamic = int(getattr(kernel.metadata, "shared", 0) or 0)
    if "amdgcn" in kernel.asm:
        res, err = amd.parse_resources(kernel.asm["amdgcn"], name, dynamic, options["num_warps"], arch_name)
        binary = kernel.asm["hsaco"] if "hsaco" in kernel.asm else None
    else:
        res, err = _cubin_resources(kernel, name, log.getvalue())
        binary = kernel.asm["cubin"]
    return CompileResult(**_base(record, arch_name, options), ok=True, error=err, resources=res,
                         compile_s=compile_s, dynamic_shared_bytes=dynamic, code_bytes=elf.code_bytes(binary))


class _Captured:
    text = ""


@contextlib.contextmanager
def _native_stderr():
    """File descriptor 2 captured while the block runs (LLVM writes its diagnostics there, below Python), then
    replayed to the real stderr: nothing is lost, and the caller can read what was written."""
    import sys

    captured = _Captured()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.text = tmp.read().decode(errors="replace")
    if captured.text:  # in one write, flushed: compiles in parallel workers do not interleave mid-line
        sys.stderr.write(captured.text)
        sys.stderr.flush()


def llvm_errors(text: str) -> list[str]:
    """LLVM's error diagnostics in ``text`` (lines ``error: ...``, or ``<file>:<line>:<col>: error: ...``),
    distinct, in order."""
    found = [line.split("error: ", 1)[1].strip() for line in text.splitlines()
             if line.startswith("error: ") or ": error: " in line]
    return list(dict.fromkeys(found))


def _compile_error(e: BaseException) -> tuple[str, str]:
    """(one line, full text) of a compile failure. An error inside a jit helper reaches here as the caller's
    CompilationError, whose text is only the call site; the backend's own message (e.g. HIP's "tf32 is not
    supported on gfx950") is the innermost exception of the chain, so that one names the failure."""
    chain = [e]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and nxt not in chain and len(chain) < 8:
        chain.append(nxt)
    inner = chain[-1]
    line = error_line(str(inner)) or error_line(str(e))
    kind = type(e).__name__ if inner is e else f"{type(e).__name__}: {type(inner).__name__}"
    return f"{kind}: {line}", "\n\n".join(str(x) for x in chain)[:4000]


def _base(record: LaunchRecord, arch: str, options: dict) -> dict:
    return dict(kernel_name=record.kernel_name, arch=arch, record=record, num_warps=options["num_warps"],
                config=record.config_label(options["num_warps"], options["num_stages"]))


def compile_all(records: list[LaunchRecord], archs=DEFAULT_ARCHS, jobs: int | None = None) -> list[CompileResult]:
    """compile_launch for every distinct launch (identical launches compile once) x arch, in that order.

    `jobs` worker processes compile them (default: harness.aot.parallel.jobs(), every core, or
    $KH_MATRIX_JOBS); 1 compiles here, one after the other. A worker that dies (a crash in LLVM) or raises
    fails its own launch x arch only, with the reason in `error`."""
    seen, work = set(), []
    for rec in records:
        key = (id(as_jit_function(rec.jit_fn)), tuple(rec.signature.items()),
               tuple((k, repr(v)) for k, v in rec.constexprs.items()), rec.divisible_by_16, rec.num_warps,
               rec.num_stages, tuple(sorted((k, repr(v)) for k, v in rec.options.items())))
        if key not in seen:
            seen.add(key)
            work += [(rec, a) for a in archs]
    workers = min(parallel.jobs(jobs), len(work))
    if workers <= 1:
        return [compile_launch(rec, a) for rec, a in work]
    _prewarm()
    # the records stay in the parent (their JITFunctions do not pickle): a worker gets an index into `work`,
    # inherited through fork, and sends back the result without its record, which is put back here
    strip = lambda i: dataclasses.replace(compile_launch(*work[i]), record=None)
    results = parallel.fork_map(strip, len(work), workers, lambda i, why: _worker_failed(*work[i], why))
    return [dataclasses.replace(r, record=rec) for r, (rec, _) in zip(results, work, strict=True)]


def _worker_failed(record: LaunchRecord, arch: str | int, why: str) -> CompileResult:
    arch_name = normalize_arch(arch)[0]
    options = {"num_warps": record.num_warps, "num_stages": record.num_stages}
    with contextlib.suppress(Exception):  # the config label compile_launch would have given it
        options = _target_and_options(record, arch_name)[1]
    return CompileResult(**_base(record, arch_name, options), ok=False, error=why, detail=why)


def _prewarm() -> None:
    """Once in the parent, before the workers fork, what each of them would otherwise repeat: importing
    Triton's compiler and backends, and Triton's warn-once notices (printed once, as a serial run prints them,
    not once per worker)."""
    import importlib

    for name in ("triton.compiler", "triton.backends.nvidia.compiler", "triton.backends.amd.compiler"):
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    with contextlib.suppress(Exception):
        from triton import knobs

        knobs.language.fp_fusion_enabled(None)  # triton 3.9: warns that the FP fusion default will change


# ---------------------------------------------------------------------------------------------- checks


def _problems(result: CompileResult, arch: str, allow_spills: bool) -> list[str]:
    if not result.ok:
        return [f"compile error: {result.error}"]
    r = result.resources
    if r is None:
        return [f"resources not read: {result.error}"]
    if isinstance(r, amd.AmdResources):
        return amd.resource_problems(r, arch, allow_spills)
    threads = result.num_warps * 32
    return ([result.error] if result.error else []) + resource_problems(r, arch, allow_spills, threads)


def check(result: CompileResult, arch: str | int | None = None, allow_spills: bool = False) -> list[str]:
    """Problems of one compiled launch on `arch` (default: the arch it was compiled for), one line each."""
    arch_name = normalize_arch(arch if arch is not None else result.arch)[0]
    where = f"{result.kernel_name} [{result.config}] {arch_name}"
    return [f"{where}: {p}" for p in _problems(result, arch_name, allow_spills)]


# ---------------------------------------------------------------------------------------------- table


@dataclass(frozen=True)
class TableRow:
    """One compiled launch on one target. NVIDIA and AMD share registers (VGPRs on AMD), stack_bytes (scratch
    per lane on AMD) and shared_bytes (LDS on AMD); spills are bytes on NVIDIA, register counts on AMD.
    occupancy is waves per SIMD on AMD (LLVM's, capped by the LDS), warps per SM on NVIDIA (harness.aot.occupancy)."""

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
    sgprs: int | None = None
    agprs: int | None = None
    vgpr_spills: int | None = None
    sgpr_spills: int | None = None
    occupancy: int | None = None
    code_bytes: int | None = None


def table_rows(results: list[CompileResult], allow_spills: bool = False) -> list[TableRow]:
    rows = []
    for res in results:
        r = res.resources
        status = "; ".join(_problems(res, normalize_arch(res.arch)[0], allow_spills)) or "ok"
        if isinstance(r, amd.AmdResources):
            rows.append(TableRow(res.kernel_name, res.arch, res.config, r.vgprs, None, None, r.scratch_bytes,
                                 r.lds_bytes, round(res.compile_s, 3), status, r.sgprs, r.agprs, r.vgpr_spills,
                                 r.sgpr_spills, r.occupancy, res.code_bytes))
            continue
        occ = r and occupancy.warps_per_sm(r.registers, r.shared_bytes, res.num_warps, res.arch)
        rows.append(TableRow(res.kernel_name, res.arch, res.config, r and r.registers,
                             r and r.spill_store_bytes, r and r.spill_load_bytes, r and r.stack_bytes,
                             r and r.shared_bytes, round(res.compile_s, 3), status, occupancy=occ,
                             code_bytes=res.code_bytes))
    return rows


def _cells(r: TableRow) -> tuple[str, ...]:
    cell = lambda v: "-" if v is None else str(v)
    if r.sgprs is not None:  # AMD: VGPRs (+AGPRs) / SGPRs, spilled register counts, scratch, LDS
        regs = f"{r.registers}v{f'+{r.agprs}a' if r.agprs else ''}/{r.sgprs}s"
        return regs, f"{r.vgpr_spills}v/{r.sgpr_spills}s", cell(r.stack_bytes), cell(r.shared_bytes), cell(r.occupancy)
    spills = "-" if r.spill_store_bytes is None else f"{r.spill_store_bytes}/{r.spill_load_bytes}"
    return cell(r.registers), spills, cell(r.stack_bytes), cell(r.shared_bytes), cell(r.occupancy)


def render_table(rows: list[TableRow]) -> str:
    """Plain text for the terminal: kernel | arch | config | regs | spills st/ld | stack | smem | occ | status.
    On AMD rows regs are VGPRs/SGPRs, spills register counts, stack the scratch and smem the LDS (bytes); occ
    is waves per SIMD there, warps per SM on NVIDIA."""
    head = ("kernel", "arch", "config", "regs", "spills st/ld", "stack", "smem", "occ", "status")
    body = [(r.kernel, r.arch, r.config, *_cells(r), r.status) for r in rows]
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head) - 1)]
    fmt = "  ".join(f"{{:{'>' if 3 <= i <= 7 else '<'}{w}}}" for i, w in enumerate(widths)) + "  {}"
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths), "-" * 6)]
    return "\n".join([*lines, *(fmt.format(*b) for b in body)])
