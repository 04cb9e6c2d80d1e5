"""``matrix``: compile every Triton kernel (each launch config the spec's cases use) and every CUDA C++
backend ahead of time for each target architecture (NVIDIA sm_80/90/100, AMD gfx942/gfx950), and read the
resources from the binaries. No GPU. CUDA C++ backends are not applicable on AMD targets; a spec may waive a
target with a reason (`[waive] "matrix.gfx950" = "..."`): a waived target is not compiled (like a waived check,
it is not run) unless --compile-waived asks to see its problems. `--out` writes the entries for the report.
"""

from __future__ import annotations

import dataclasses
import sys

from harness.cli.registry import EXIT_FAILED, EXIT_OK, BadInput, command, load_specs, options, spec_paths
from harness.spec.archs import DEFAULT_ARCHS, ArchError, is_amd, parse_targets
from harness.spec.model import TIERS


def _options(p) -> None:
    p.add_argument("--kernel", action="append", default=[])
    p.add_argument("--arch", action="append", default=[],
                   help=f"targets, comma-separated (default: {','.join(DEFAULT_ARCHS)})")
    p.add_argument("--specs-dir", default="specs")
    p.add_argument("--compile-waived", action="store_true",
                   help="also compile the targets a spec waives, listing their problems as waived")
    p.add_argument("--out", help="write the per kernel x target entries here (JSON; the report reads "
                                 "matrix.json next to results.json)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="compile Triton kernels in N worker processes (default: $KH_MATRIX_JOBS, else every "
                        "core; 1: one after the other in this process)")


def meta_args(spec, case, dtype) -> dict:
    """The case's arguments as meta tensors in the case's layout: shapes and strides, no memory."""
    import torch

    from harness.correctness.args import full_env, shape_of, strided_like, tensor_dtype

    env = full_env(spec, case, dtype)
    out = {}
    for t in spec.tensors:
        x = torch.empty(shape_of(t, env), dtype=tensor_dtype(t, dtype), device="meta")
        out[t.name] = x if t.output or t.contiguous else strided_like(x, case.layout)
    return {**out, **{n: p(env) for n, p in spec.params.items()}}


def config_key(r) -> tuple:
    """What decides a compiled kernel's resources: its declared constexprs, warps, stages and element types.

    Launches that differ only in Triton's value specialisations (a stride of 1) or divisibility hints
    compile to near-identical code; compiling each of them for every architecture would multiply the
    matrix's time several-fold for no new information.
    """
    constexprs = tuple((k, repr(v)) for k, v in r.constexprs.items() if k not in r.specialised)
    pointers = tuple(t for t in r.signature.values() if str(t).startswith("*"))
    return (r.kernel_name, constexprs, r.num_warps, r.num_stages, pointers)


def triton_launches(spec, backend) -> tuple[list, list[str]]:
    """Every distinct Triton launch the backend makes over all cases and dtypes, and launcher errors."""
    from harness.aot.triton import record_launches
    from harness.spec.imports import resolve_import

    fn, records, errors, seen = resolve_import(backend.impl), [], [], set()
    for tier in TIERS:
        for case in spec.cases.get(tier, ()):
            for dtype in spec.dtypes:
                try:
                    for r in record_launches(fn, meta_args(spec, case, dtype)):
                        key = config_key(r)
                        if key not in seen:
                            seen.add(key)
                            records.append(r)
                except ValueError:
                    continue  # a layout the launcher refuses, as declared
                except Exception as exc:  # noqa: BLE001 - reported, the matrix goes on
                    errors.append(f"{spec.name} {backend.name} {dtype} {case.id}: launcher failed: "
                                  f"{type(exc).__name__}: {exc}")
    return records, errors


def compile_once(records: list, archs: tuple, compiled: dict, scope: str, jobs: int | None) -> tuple[list, set]:
    """Each record compiled for each of ``archs`` unless ``compiled`` (``{(scope, config_key): {arch: result}}``,
    shared by a spec's backends) has it: a backend that hands some launches to another's kernel (matmul's
    triton_tma to the pointer kernel) records them too, and each is compiled once per target. Returns the
    results in (record, arch) order and the ids of those compiled by this call."""
    from harness.aot.triton import compile_all

    need: dict[tuple, list] = {}  # the archs a launch still lacks -> those launches
    for r in records:
        have = compiled.get((scope, config_key(r)), {})
        if missing := tuple(a for a in archs if a not in have):
            need.setdefault(missing, []).append(r)
    fresh = set()
    for missing, recs in need.items():
        for res in compile_all(recs, missing, jobs):
            compiled.setdefault((scope, config_key(res.record)), {})[res.arch] = res
            fresh.add(id(res))
    results = [compiled[(scope, config_key(r))][a] for r in records for a in archs
               if a in compiled.get((scope, config_key(r)), {})]
    return results, fresh


@command("matrix", "compile every kernel for each target architecture (NVIDIA and AMD); print registers, spills, "
                   "shared memory / LDS, occupancy")
@options(_options)
def cmd_matrix(args) -> int:
    from harness.aot import parallel
    from harness.aot.nvcc import build_cuda, torch_extension_flags
    from harness.aot.summary import MatrixEntry, cuda_entries, not_applicable, triton_entries, unclaimed_nvidia
    from harness.aot.triton import render_table, table_rows
    from harness.spec.archs import matrix_waiver
    from harness.spec.imports import resolve_import, use_interpreter_if_no_gpu

    use_interpreter_if_no_gpu()
    try:
        archs = parse_targets(args.arch) or DEFAULT_ARCHS
    except ArchError as exc:
        raise BadInput(f"--arch: {exc}") from None
    try:
        jobs = parallel.jobs(args.jobs)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    print(f"matrix: compiling Triton kernels in {jobs} worker process{'es' if jobs != 1 else ''}",
          file=sys.stderr, flush=True)
    nvidia, amd = tuple(a for a in archs if not is_amd(a)), tuple(a for a in archs if is_amd(a))
    problems, rows, entries, compiled = [], [], [], {}
    for spec in load_specs(spec_paths([], args.specs_dir, args.kernel)):
        waived = {a: r for a in archs if (r := matrix_waiver(spec.waivers, a)) is not None and not args.compile_waived}
        for backend in spec.backends.values():
            entries += [MatrixEntry(spec.name, backend.name, a, "waived", 0, "not compiled", (), r)
                        for a, r in waived.items() if not (backend.source and is_amd(a))]
            if backend.source:
                entries += [not_applicable(spec.name, backend.name, a) for a in amd]
                if not nvidia:
                    continue
                checked = tuple(a for a in nvidia if a not in waived)
                if not checked:
                    continue
                result = build_cuda(resolve_import(backend.source), checked, extra_flags=torch_extension_flags())
                print(f"{spec.name} {backend.name}: nvcc {result.status}; SASS {', '.join(result.sass_archs) or '-'}; "
                      f"PTX {', '.join(result.ptx_archs) or '-'}")
                for k in result.kernels:
                    r = k.resources
                    print(f"  {k.arch} {k.kernel[:60]}: {r.registers} regs, spills {r.spill_store_bytes}/"
                          f"{r.spill_load_bytes} B, stack {r.stack_bytes} B, smem {r.shared_bytes} B")
                entries += cuda_entries(spec.name, backend.name, checked, result, spec.waivers)
                continue
            if "triton" not in backend.requires and backend.name != "triton":
                continue
            below = unclaimed_nvidia(backend.arch, archs)
            entries += [not_applicable(spec.name, backend.name, a, f"the backend's arch list "
                                       f"({', '.join(backend.arch)}) does not claim {a}") for a in below]
            checked = tuple(a for a in archs if a not in waived and a not in below)
            if not checked:
                continue
            records, errors = triton_launches(spec, backend)
            problems += errors
            print(f"{spec.name} {backend.name}: {len(records)} distinct launch configs x {len(checked)} archs",
                  file=sys.stderr, flush=True)
            results, fresh = compile_once(records, checked, compiled, spec.name, jobs)
            if len(fresh) < len(results):
                print(f"  ({len(results) - len(fresh)} of {len(results)} compiled already for another backend)",
                      file=sys.stderr, flush=True)
            table = [dataclasses.replace(t, kernel=f"{spec.name}:{t.kernel}") for t in table_rows(results)]
            rows += [t for t, res in zip(table, results, strict=True) if id(res) in fresh]  # counted once
            entries += triton_entries(spec.name, backend.name, checked, table, spec.waivers)
    if rows:
        print(render_table(rows))
    problems += [f"{e.backend} {p}" for e in entries if e.status == "failed" for p in e.problems]
    for e in entries:
        if e.status == "not applicable":
            print(f"NOT APPLICABLE: {e.kernel} {e.backend} on {e.arch}: {e.reason}")
        elif e.status == "waived":
            seen = '; '.join(e.problems) or "not compiled; --compile-waived shows its problems"
            print(f"WAIVED: {e.kernel} {e.backend} on {e.arch}: {e.reason} ({seen})")
    for p in problems:
        print(f"PROBLEM: {p}")
    if args.out:
        _write(args.out, archs, entries)
    count = lambda s: sum(e.status == s for e in entries)
    print(f"matrix: {len(rows)} compiled kernel configs x archs ({', '.join(archs)}), {len(problems)} problem(s), "
          f"{count('waived')} waived, {count('not applicable')} not applicable")
    return EXIT_FAILED if problems else EXIT_OK


def _write(out: str, archs, entries) -> None:
    import json
    from pathlib import Path

    from harness.aot.summary import MATRIX_SCHEMA
    from harness.results.io import atomic_write_text

    path = Path(out)
    if path.is_dir():
        raise BadInput(f"--out {out}: is a folder; give the file to write (e.g. {path / 'matrix.json'})")
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": MATRIX_SCHEMA, "archs": list(archs), "entries": [dataclasses.asdict(e) for e in entries]}
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")
