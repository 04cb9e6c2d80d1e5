"""CUDA C++ sources built for several architectures with nvcc, and the CUDA binary readers shared with aot.py.

`build_cuda` compiles a kernel module's self-contained `CUDA_SRC` into a fatbin (SASS per target, PTX for the
newest), checks with cuobjdump what the binary carries and reads per-kernel resources. It needs no GPU and
never raises for a bad source: errors come back in the result.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

from harness.spec.archs import DEFAULT_ARCHS, normalize_arch, parse_arch, vendor_of
from harness.target.tools import find_nvcc, find_tool


@dataclass(frozen=True)
class Resources:
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    local_bytes: int
    shared_bytes: int  # static (less the 1 KiB sm_90+ binaries reserve) + dynamic: what meets the limit


@dataclass(frozen=True)
class ArchLimits:
    shared_optin_bytes: int  # per block, static + dynamic, after cudaFuncSetAttribute opt-in
    registers_per_thread: int = 255
    registers_per_block: int = 65536


ARCH_LIMITS = {
    "sm_80": ArchLimits(166912),
    "sm_86": ArchLimits(101376),
    "sm_89": ArchLimits(101376),
    "sm_90": ArchLimits(232448),
    "sm_100": ArchLimits(232448),
}


def resource_problems(r: Resources, arch: str, allow_spills: bool, threads: int = 0) -> list[str]:
    """What in `r` breaks `arch`'s limits; `threads` per block (0: unknown) adds the register-file check."""
    arch = normalize_arch(arch)[0]
    out = []
    if not allow_spills and (r.spill_store_bytes or r.spill_load_bytes):
        out.append(f"spills {r.spill_store_bytes} B stored / {r.spill_load_bytes} B loaded")
    lim = ARCH_LIMITS.get(arch)
    if lim is None:
        return out + [f"no limits known for {arch}"]
    if r.shared_bytes > lim.shared_optin_bytes:
        out.append(f"shared memory {r.shared_bytes} B > {arch} limit {lim.shared_optin_bytes} B")
    if r.registers > lim.registers_per_thread:
        out.append(f"{r.registers} registers/thread > {lim.registers_per_thread}")
    if r.registers * threads > lim.registers_per_block:
        out.append(f"{r.registers} registers x {threads} threads > {lim.registers_per_block} per block")
    return out


_RES_FN = re.compile(r"^\s*Function (\S+):\s*$")


_RES_VALS = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")


_RES_ARCH = re.compile(r"^\s*arch = (sm_\w+)")


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")


_PTXAS_PROPS = re.compile(r"Function properties for (\S+)")


_PTXAS_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_res_usage(text: str) -> dict[tuple[str | None, str], dict[str, int]]:
    """`cuobjdump -res-usage` -> {(arch, or None for a lone cubin, function): {REG, STACK, SHARED, LOCAL}}."""
    out: dict[tuple[str | None, str], dict[str, int]] = {}
    arch, fn = None, None
    for line in text.splitlines():
        if m := _RES_ARCH.match(line):
            arch = normalize_arch(m.group(1))[0]
        elif m := _RES_FN.match(line):
            fn = m.group(1)
        elif fn and (m := _RES_VALS.search(line)):
            out[(arch, fn)] = dict(zip(("REG", "STACK", "SHARED", "LOCAL"), map(int, m.groups()),
                                       strict=True))
            fn = None
    return out


def parse_ptxas_log(text: str) -> dict[tuple[str | None, str], tuple[int, int, int]]:
    """`ptxas -v` log -> {(arch or None, function): (stack frame, spill stores, spill loads)} in bytes."""
    out: dict[tuple[str | None, str], tuple[int, int, int]] = {}
    arch, fn = None, None
    for line in text.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            arch = normalize_arch(m.group(2))[0]
        elif m := _PTXAS_PROPS.search(line):
            fn = m.group(1)
        elif fn and (m := _PTXAS_SPILL.search(line)):
            out[(arch, fn)] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
            fn = None
    return out


def reserved_shared(cubin: bytes) -> int:
    # From sm_90 on ptxas folds the 1 KiB the driver reserves per block into a kernel's static shared size
    # (symbol __nv_reservedSMEM...); the per-block opt-in limit excludes it, so it is taken off again.
    return 1024 if b"reservedSmem" in cubin else 0


def user_static_shared(static: int, reserved: int) -> int:
    return static - min(static, reserved)


def error_line(text: str) -> str:
    """The line of a compiler's message that says what went wrong: the first naming an error, else the last
    (Triton's CompilationError ends with the cause, after the source excerpt and its caret)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().strip("^")]
    errors = [ln for ln in lines if re.search(r"\berror\b", ln, re.I) and not ln.startswith("`ptxas` failed")]
    return (errors[0] if errors else lines[-1] if lines else "")[:300]


def res_usage(binary: str, tool: str | None = None) -> tuple[str, str]:
    """(`cuobjdump -res-usage` output, error or "")."""
    tool = tool or find_tool("cuobjdump")
    if tool is None:
        return "", "cuobjdump not found"
    p = subprocess.run([tool, "-res-usage", binary], capture_output=True, text=True)
    return p.stdout, "" if p.returncode == 0 else (p.stderr.strip().splitlines() or ["failed"])[0]


def readable_names(names) -> dict[str, str]:
    """Each C++ kernel name of ``names`` as its source spells it, for people: demangled by the toolkit's cu++filt or
    binutils' c++filt, without anonymous namespaces or the argument list (``kh_int4::int4_gemv_mma<__nv_bfloat16,
    1, 1, 2, 0, true>``, where the binary has 120 characters of which the first 60 are the same for every one of
    its 56 kernels). Where neither tool is found, or it fails, every name stays as the binary has it."""
    names = list(dict.fromkeys(names))
    tool = find_tool("cu++filt") or find_tool("c++filt")
    if not names or tool is None:
        return {n: n for n in names}
    try:
        p = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return {n: n for n in names}
    lines = p.stdout.splitlines()
    if p.returncode != 0 or len(lines) != len(names):
        return {n: n for n in names}
    return {n: _without_arguments(d.replace("(anonymous namespace)::", "")) for n, d in zip(names, lines, strict=True)}


def _without_arguments(name: str) -> str:
    """``void f<T>(Params)`` -> ``f<T>``: a template's return type and the last top-level parenthesised list dropped
    (a C name has neither)."""
    name = name.removeprefix("void ")
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i] if i else name
    return name


@dataclass(frozen=True)
class KernelResources:
    kernel: str  # as in the binary (C++ names mangled)
    arch: str
    resources: Resources
    shown: str = ""  # as the source spells it (readable_names), where a demangler was found

    @property
    def label(self) -> str:
        return self.shown or self.kernel


@dataclass(frozen=True)
class CudaBuildResult:
    status: str                        # "ok", "error", "skipped: nvcc not found"
    archs: tuple[str, ...]
    error: str = ""                    # one line
    stderr_head: str = ""              # first lines of nvcc's stderr
    sass_archs: tuple[str, ...] = ()   # SASS the fatbin carries
    ptx_archs: tuple[str, ...] = ()    # PTX the fatbin carries
    problems: tuple[str, ...] = ()
    kernels: tuple[KernelResources, ...] = ()
    build_s: float = 0.0
    nvcc: str = ""
    fatbin: bytes = field(default=b"", repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and not self.problems


def torch_extension_flags() -> tuple[str, ...]:
    """The defines torch's JIT extension build gives nvcc (no implicit half/bfloat16 conversions, ...):
    the matrix compiles with them so a source that builds here also builds in `load_inline`."""
    try:
        from torch.utils.cpp_extension import COMMON_NVCC_FLAGS
    except ImportError:
        return ()
    return tuple(COMMON_NVCC_FLAGS)


def _gencode(archs: list[str]) -> list[str]:
    newest = max(archs, key=lambda a: normalize_arch(a)[1])
    flags = []
    for a in archs:
        num = a.removeprefix("sm_")
        code = f"[sm_{num},compute_{num}]" if a == newest else f"sm_{num}"
        flags += ["-gencode", f"arch=compute_{num},code={code}"]
    return flags


def _listed(tool: str, flag: str, path: str) -> tuple[str, ...]:
    p = subprocess.run([tool, flag, path], capture_output=True, text=True)
    found = re.findall(r"\.(sm_\w+)\.(?:cubin|ptx)", p.stdout)
    return tuple(sorted({normalize_arch(a)[0] for a in found}, key=lambda a: normalize_arch(a)[1]))


def build_cuda(source: str, archs=DEFAULT_ARCHS, *, nvcc: str | None = None,
               extra_flags: tuple[str, ...] = (), timeout_s: float = 300) -> CudaBuildResult:
    """nvcc `source` to a fatbin with SASS for each arch and PTX for the newest; check and read it. AMD targets
    among `archs` are left out: CUDA C++ does not apply to them (the matrix says so)."""
    archs = tuple(parse_arch(a).name for a in archs if vendor_of(a) == "nvidia")
    if not archs:
        return CudaBuildResult(status="skipped: no NVIDIA target", archs=archs)
    nvcc = nvcc if nvcc and os.access(nvcc, os.X_OK) else (None if nvcc else find_nvcc())
    if nvcc is None:
        return CudaBuildResult(status="skipped: nvcc not found", archs=archs)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "kernel.cu"), os.path.join(d, "kernel.fatbin")
        with open(src, "w") as f:
            f.write(source)
        cmd = [nvcc, "-fatbin", "-O3", "-std=c++17", "--threads", "0", "-Xptxas", "-v",
               *_gencode(list(archs)), *extra_flags, src, "-o", out]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=d)
        except (OSError, subprocess.TimeoutExpired) as e:
            return CudaBuildResult(status="error", archs=archs, error=f"{type(e).__name__}: {e}", nvcc=nvcc)
        log = (p.stderr + p.stdout).replace(d + os.sep, "")
        if p.returncode != 0 or not os.path.exists(out):
            head = "\n".join([ln for ln in log.splitlines() if ln.strip()][:10])
            return CudaBuildResult(status="error", archs=archs, error=error_line(log) or "nvcc failed", nvcc=nvcc,
                                   stderr_head=head, build_s=time.perf_counter() - t0)
        with open(out, "rb") as f:
            fatbin = f.read()
        build_s = time.perf_counter() - t0
        tool = find_tool("cuobjdump")
        if tool is None:
            return CudaBuildResult(status="ok", archs=archs, build_s=build_s, nvcc=nvcc, fatbin=fatbin,
                                   problems=("cuobjdump not found: binary not checked",))
        sass, ptx = _listed(tool, "--list-elf", out), _listed(tool, "--list-ptx", out)
        kernels = _kernel_resources(tool, out, d, log)
    problems = [f"no SASS for {a}" for a in archs if normalize_arch(a)[0] not in sass]
    problems += [] if ptx else ["no PTX in the binary (no forward compatibility with newer GPUs)"]
    return CudaBuildResult(status="ok", archs=archs, sass_archs=sass, ptx_archs=ptx, problems=tuple(problems),
                           kernels=kernels, build_s=build_s, nvcc=nvcc, fatbin=fatbin)


def _kernel_resources(tool: str, fatbin: str, workdir: str, ptxas_log: str) -> tuple[KernelResources, ...]:
    text, _ = res_usage(fatbin, tool)
    spills = parse_ptxas_log(ptxas_log)
    reserved = {}  # per arch, read from the extracted cubins
    subprocess.run([tool, "-xelf", "all", fatbin], capture_output=True, cwd=workdir)
    for name in os.listdir(workdir):
        if m := re.search(r"\.(sm_\w+)\.cubin$", name):
            with open(os.path.join(workdir, name), "rb") as f:
                reserved[normalize_arch(m.group(1))[0]] = reserved_shared(f.read())
    out, usage = [], parse_res_usage(text)
    names = readable_names(fn for _, fn in usage)
    for (arch, fn), v in usage.items():
        _, st, ld = spills.get((arch, fn), (0, 0, 0))
        shared = user_static_shared(v["SHARED"], reserved.get(arch, 0))
        res = Resources(registers=v["REG"], spill_store_bytes=st, spill_load_bytes=ld, stack_bytes=v["STACK"],
                        local_bytes=v["LOCAL"], shared_bytes=shared)
        out.append(KernelResources(fn, arch or "", res, names[fn]))
    return tuple(out)
