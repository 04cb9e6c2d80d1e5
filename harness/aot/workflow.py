"""``matrix`` as a chain of steps (:func:`harness.steps.execute`): every Triton launch configuration a spec's
cases use and every CUDA C++ backend, compiled for each target architecture with no GPU.

``STEPS``: pick the targets and the worker count, load the specs, plan each backend's targets (a spec's
``[waive] "matrix.<arch>"`` keeps a target from being compiled, unless ``--compile-waived``; CUDA C++ is not
applicable on AMD; a Triton backend's ``arch`` list may leave an NVIDIA target out), build the CUDA C++
backends, record the Triton launches, compile them, collect the entries, print them, write them, print the
totals. The state is one frozen :class:`MatrixRun`; each backend's part of it is a :class:`BackendJob`.

aot may import only spec and target (tests/test_imports.py), so what the run needs from the layers beside
it comes in the first state from the CLI: the meta-tensor arguments of a case (``correctness.args`` builds
them) and the atomic write (``results.io``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from harness.aot import parallel
from harness.aot import triton as aot_triton
from harness.aot.launches import record_launches as record_calls
from harness.aot.nvcc import build_cuda, torch_extension_flags
from harness.aot.summary import (
    MATRIX_SCHEMA,
    MatrixEntry,
    cuda_entries,
    not_applicable,
    triton_entries,
    unclaimed_nvidia,
)
from harness.aot.triton import TableRow, render_table, table_rows
from harness.spec import select
from harness.spec.archs import DEFAULT_ARCHS, ArchError, build_target, is_amd, parse_targets
from harness.spec.imports import resolve_import, use_interpreter_if_no_gpu
from harness.spec.model import TIERS, Backend, Case, Spec
from harness.spec.waivers import backward_matrix_waiver, matrix_waiver
from harness.steps import BadInput

CUDA, TRITON = "cuda", "triton"


@dataclass(frozen=True)
class BackendJob:
    """One backend of one spec, filled in as the steps go."""
    spec: Spec
    backend: Backend
    kind: str                             # CUDA (nvcc), TRITON, or "" (nothing to compile: torch, say)
    archs: tuple[str, ...] = ()           # the targets compiled: not waived, not applicable
    entries: tuple[MatrixEntry, ...] = ()  # waived and not applicable first, then the compiled targets'
    records: tuple = ()                   # TRITON: each distinct launch (harness.aot.launches.LaunchRecord)
    errors: tuple[str, ...] = ()          # TRITON: launcher failures
    rows: tuple[TableRow, ...] = ()       # TRITON: the compiled rows no earlier backend had compiled
    backward: bool = False                # the backend's standalone backward kernel (named "<backend> backward")


@dataclass(frozen=True)
class MatrixRun:
    meta_args: Callable[[Spec, Case, str], dict]    # (spec, case, dtype) -> the call's arguments on "meta"
    write_text: Callable[[Path, str], None]         # (path, text), atomically
    # meta_args for a standalone backward kernel (``[backward.backends.<name>] kernel``); None: forwards only
    meta_backward_args: Callable[[Spec, Case, str], dict] | None = None
    specs_dir: str = "specs"
    kernels: tuple[str, ...] = ()                   # --kernel, each item comma-separated; () = every spec
    arch_options: tuple[str, ...] = ()              # --arch, each item comma-separated
    compile_waived: bool = False
    out: str | None = None
    jobs: int | None = None                         # --jobs
    # filled by the steps
    archs: tuple[str, ...] = ()
    workers: int = 1
    specs: tuple[Spec, ...] = ()
    backends: tuple[BackendJob, ...] = ()
    entries: tuple[MatrixEntry, ...] = ()
    rows: tuple[TableRow, ...] = ()                 # each compiled config x arch once
    problems: tuple[str, ...] = ()


def pick_archs(run: MatrixRun) -> MatrixRun:
    try:
        archs = parse_targets(run.arch_options) or DEFAULT_ARCHS
    except ArchError as exc:
        raise BadInput(f"--arch: {exc}") from None
    return replace(run, archs=archs)


def pick_workers(run: MatrixRun) -> MatrixRun:
    try:
        workers = parallel.jobs(run.jobs)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    print(f"matrix: compiling Triton kernels in {workers} worker process{'es' if workers != 1 else ''}",
          file=sys.stderr, flush=True)
    return replace(run, workers=workers)


def load_specs(run: MatrixRun) -> MatrixRun:
    """The specs of --kernel (every one by default), bound to their code; every problem as one BadInput."""
    use_interpreter_if_no_gpu()  # before binding imports the first kernel module, and with it triton
    return replace(run, specs=tuple(select.load_specs(select.spec_paths([], run.specs_dir, run.kernels))))


def plan_backends(run: MatrixRun) -> MatrixRun:
    """Which targets each backend compiles; a waived target, like a waived check, is not run at all."""
    nvidia, amd = tuple(a for a in run.archs if not is_amd(a)), tuple(a for a in run.archs if is_amd(a))
    planned = []
    for spec in run.specs:
        waived = {} if run.compile_waived else \
            {a: r for a in run.archs if (r := matrix_waiver(spec.waivers, a)) is not None}
        for backend in spec.backends.values():
            # a CUDA C++ backend on AMD is not applicable, which says more than its waiver would
            entries = [MatrixEntry(spec.name, backend.name, a, "waived", 0, "not compiled", (), r)
                       for a, r in waived.items() if not (backend.source and is_amd(a))]
            compiled = backend.source or "triton" in backend.requires or backend.name == "triton"
            below = unclaimed_nvidia(backend.arch, run.archs) if compiled else ()
            entries += [not_applicable(spec.name, backend.name, a, f"the backend's arch list "
                                       f"({', '.join(backend.arch)}) does not claim {a}") for a in below]
            if backend.source:
                entries += [not_applicable(spec.name, backend.name, a) for a in amd]
                kind, archs = CUDA, tuple(a for a in nvidia if a not in waived and a not in below)
            elif compiled:
                kind, archs = TRITON, tuple(a for a in run.archs if a not in waived and a not in below)
            else:
                kind, archs = "", ()
            planned.append(BackendJob(spec, backend, kind, archs, tuple(entries)))
            if kind == TRITON and run.meta_backward_args is not None and (kernel := _backward_kernel(spec, backend)):
                planned.append(_backward_job(spec, backend, kernel, archs, run.compile_waived))
    return replace(run, backends=tuple(planned))


def _backward_kernel(spec: Spec, backend: Backend) -> str | None:
    """The import path of the backend's standalone backward kernel, or None."""
    bwd = spec.backward.backends.get(backend.name) if spec.backward is not None else None
    return bwd.kernel if bwd is not None else None


def _backward_job(spec: Spec, backend: Backend, kernel: str, archs: tuple, compile_waived: bool) -> BackendJob:
    """A backend's standalone backward kernel as a matrix backend of its own (``<backend> backward``), its targets
    the forward's less those the spec waives for it (``[waive] backward.matrix.<target>``)."""
    name = f"{backend.name} backward"
    waived = {} if compile_waived else \
        {a: r for a in archs if (r := backward_matrix_waiver(spec.waivers, a)) is not None}
    entries = tuple(MatrixEntry(spec.name, name, a, "waived", 0, "not compiled", (), r) for a, r in waived.items())
    return BackendJob(spec, dataclasses.replace(backend, name=name, impl=kernel), TRITON,
                      tuple(a for a in archs if a not in waived), entries, backward=True)


def _each(run: MatrixRun, kind: str, fn: Callable[[BackendJob], BackendJob]) -> MatrixRun:
    """``fn`` on every backend of ``kind`` with a target left to compile, in the specs' order."""
    return replace(run, backends=tuple(fn(j) if j.kind == kind and j.archs else j for j in run.backends))


def build_cuda_backends(run: MatrixRun) -> MatrixRun:
    """Each CUDA backend's nvcc build, up to ``run.workers`` at once: a build is a subprocess, one core's work per
    target, and built one after another the sources alone outlast a many-core runner's Triton compiles. Printed
    in the specs' order once all are done."""
    jobs = [j for j in run.backends if j.kind == CUDA and j.archs]
    # the sources and flags first, in this thread: importing a kernel module is no work for a pool
    # sm_90a where the backend's rules name it: the entries stay under the matrix's target (sm_90)
    asks = [(resolve_import(j.backend.source), [build_target(j.backend.arch, a) for a in j.archs]) for j in jobs]
    flags = torch_extension_flags() if jobs else ()
    with ThreadPoolExecutor(max_workers=max(1, min(run.workers, len(jobs)))) as pool:
        built = pool.map(lambda ask: build_cuda(ask[0], ask[1], extra_flags=flags), asks)
        results = {id(j): (targets, result) for j, (_, targets), result in zip(jobs, asks, built, strict=True)}

    def build(job: BackendJob) -> BackendJob:
        targets, result = results[id(job)]
        built_as = f" (built as {', '.join(targets)})" if targets != list(job.archs) else ""
        print(f"{job.spec.name} {job.backend.name}: nvcc {result.status}{built_as}; SASS "
              f"{', '.join(result.sass_archs) or '-'}; PTX {', '.join(result.ptx_archs) or '-'}")
        for k in result.kernels:
            r = k.resources
            print(f"  {k.arch} {k.label[:120]}: {r.registers} regs, spills {r.spill_store_bytes}/"
                  f"{r.spill_load_bytes} B, stack {r.stack_bytes} B, smem {r.shared_bytes} B")
        built = cuda_entries(job.spec.name, job.backend.name, job.archs, result, job.spec.waivers)
        return replace(job, entries=job.entries + tuple(built))

    return _each(run, CUDA, build)


def record_launches(run: MatrixRun) -> MatrixRun:
    def record(job: BackendJob) -> BackendJob:
        records, errors = triton_launches(job.spec, job.backend,
                                          run.meta_backward_args if job.backward else run.meta_args)
        return replace(job, records=tuple(records), errors=tuple(errors))

    return _each(run, TRITON, record)


def compile_launches(run: MatrixRun) -> MatrixRun:
    """Each backend's launches for its targets; a launch another backend of the spec compiled already for a
    target is not compiled again, and its row is counted once."""
    compiled: dict = {}  # across backends, keyed by spec: a launch two backends share is compiled once

    def compile_(job: BackendJob) -> BackendJob:
        spec, backend = job.spec, job.backend
        print(f"{spec.name} {backend.name}: {len(job.records)} distinct launch configs x {len(job.archs)} archs",
              file=sys.stderr, flush=True)
        results, fresh = compile_once(list(job.records), job.archs, compiled, spec.name, run.workers)
        if len(fresh) < len(results):
            print(f"  ({len(results) - len(fresh)} of {len(results)} compiled already for another backend)",
                  file=sys.stderr, flush=True)
        table = [replace(t, kernel=f"{spec.name}:{t.kernel}") for t in table_rows(results)]
        rows = tuple(t for t, res in zip(table, results, strict=True) if id(res) in fresh)
        built = triton_entries(spec.name, backend.name, job.archs, table, spec.waivers)
        return replace(job, rows=rows, entries=job.entries + tuple(built))

    return _each(run, TRITON, compile_)


def collect(run: MatrixRun) -> MatrixRun:
    """The backends' entries and rows in the specs' order; the problems: launcher failures, then each failed
    entry's (a waived one's problems are listed under its waiver instead)."""
    entries = tuple(e for j in run.backends for e in j.entries)
    problems = [p for j in run.backends for p in j.errors]
    problems += [f"{e.backend} {p}" for e in entries if e.status == "failed" for p in e.problems]
    return replace(run, entries=entries, rows=tuple(r for j in run.backends for r in j.rows),
                   problems=tuple(problems))


def print_summary(run: MatrixRun) -> MatrixRun:
    if run.rows:
        print(render_table(list(run.rows)))
    for e in run.entries:
        if e.status == "not applicable":
            print(f"NOT APPLICABLE: {e.kernel} {e.backend} on {e.arch}: {e.reason}")
        elif e.status == "waived":
            seen = "; ".join(e.problems) or "not compiled; --compile-waived shows its problems"
            print(f"WAIVED: {e.kernel} {e.backend} on {e.arch}: {e.reason} ({seen})")
    for p in run.problems:
        print(f"PROBLEM: {p}")
    return run


def write_entries(run: MatrixRun) -> MatrixRun:
    """``--out``: the entries for the report (it reads matrix.json next to results.json)."""
    if not run.out:
        return run
    path = Path(run.out)
    if path.is_dir():
        raise BadInput(f"--out {run.out}: is a folder; give the file to write (e.g. {path / 'matrix.json'})")
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": MATRIX_SCHEMA, "archs": list(run.archs), "entries": [dataclasses.asdict(e) for e in run.entries],
           # what compiled it and each config's figures: what the diff across Triton releases compares
           "toolchain": toolchain_versions(), "rows": [dataclasses.asdict(r) for r in run.rows]}
    run.write_text(path, json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")
    return run


def print_totals(run: MatrixRun) -> MatrixRun:
    count = lambda s: sum(e.status == s for e in run.entries)
    print(f"matrix: {len(run.rows)} compiled kernel configs x archs ({', '.join(run.archs)}), "
          f"{len(run.problems)} problem(s), {count('waived')} waived, {count('not applicable')} not applicable")
    return run


def toolchain_versions() -> dict[str, str]:
    """The versions of the packages that compiled the matrix (imported by now: the specs bound their kernels)."""
    import importlib.metadata as metadata

    out = {}
    for name in ("triton", "torch"):
        module = sys.modules.get(name)
        version = getattr(module, "__version__", None)
        if version is None:
            try:
                version = metadata.version(name)
            except metadata.PackageNotFoundError:
                version = "not installed"
        out[name] = str(version)
    return out


STEPS = (pick_archs, pick_workers, load_specs, plan_backends, build_cuda_backends, record_launches,
         compile_launches, collect, print_summary, write_entries, print_totals)


def config_key(r) -> tuple:
    """What decides a compiled kernel's resources: its declared constexprs, warps, stages and element types.

    Launches that differ only in Triton's value specialisations (a stride of 1) or divisibility hints
    compile to near-identical code; compiling each of them for every architecture would multiply the
    matrix's time several-fold for no new information.
    """
    constexprs = tuple((k, repr(v)) for k, v in r.constexprs.items() if k not in r.specialised)
    pointers = tuple(t for t in r.signature.values() if str(t).startswith("*"))
    return (r.kernel_name, constexprs, r.num_warps, r.num_stages, pointers)


def triton_launches(spec: Spec, backend: Backend, meta_args) -> tuple[list, list[str]]:
    """Every distinct Triton launch the backend makes over all cases and dtypes, and launcher errors."""
    fn, records, errors, seen = resolve_import(backend.impl), [], [], set()
    for tier in TIERS:
        for case in spec.cases.get(tier, ()):
            for dtype in spec.dtypes:
                try:
                    for r in record_calls(fn, meta_args(spec, case, dtype)):
                        key = config_key(r)
                        if key not in seen:
                            seen.add(key)
                            records.append(r)
                except Exception as exc:  # noqa: BLE001 - reported, the matrix goes on
                    if spec.must_refuse(backend.name.removesuffix(" backward"), case.layout) \
                            or isinstance(exc, ValueError):
                        continue  # a layout refused as declared (any exception, as in pytest), or a shape
                    errors.append(f"{spec.name} {backend.name} {dtype} {case.id}: launcher failed: "
                                  f"{type(exc).__name__}: {exc}")
    return records, errors


def compile_once(records: list, archs: tuple, compiled: dict, scope: str, jobs: int | None) -> tuple[list, set]:
    """Each record compiled for each of ``archs`` unless ``compiled`` (``{(scope, config_key): {arch: result}}``,
    shared by a spec's backends) has it: a backend that hands some launches to another's kernel (matmul's
    triton_tma to the pointer kernel) records them too, and each is compiled once per target. Returns the
    results in (record, arch) order and the ids of those compiled by this call."""
    need: dict[tuple, list] = {}  # the archs a launch still lacks -> those launches
    for r in records:
        have = compiled.get((scope, config_key(r)), {})
        if missing := tuple(a for a in archs if a not in have):
            need.setdefault(missing, []).append(r)
    fresh = set()
    for missing, recs in need.items():
        for res in aot_triton.compile_all(recs, missing, jobs):  # through the module: tests replace it
            compiled.setdefault((scope, config_key(res.record)), {})[res.arch] = res
            fresh.add(id(res))
    results = [compiled[(scope, config_key(r))][a] for r in records for a in archs
               if a in compiled.get((scope, config_key(r)), {})]
    return results, fresh
