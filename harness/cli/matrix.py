"""``matrix``: compile every Triton kernel (each launch config the spec's cases use) and every CUDA C++
backend ahead of time for each target architecture, and read the resources from the binaries. No GPU.
"""

from __future__ import annotations

import dataclasses
import sys

from harness.cli.registry import EXIT_FAILED, EXIT_OK, command, load_specs, options, spec_paths
from harness.spec.archs import DEFAULT_ARCHS
from harness.spec.model import TIERS


def _options(p) -> None:
    p.add_argument("--kernel", action="append", default=[])
    p.add_argument("--arch", action="append", default=[], help="targets (default: sm_80, sm_90, sm_100)")
    p.add_argument("--specs-dir", default="specs")


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


@command("matrix", "compile every kernel for each target architecture; print registers, spills, shared memory")
@options(_options)
def cmd_matrix(args) -> int:
    from harness.aot.nvcc import build_cuda, torch_extension_flags
    from harness.aot.triton import compile_all, render_table, table_rows
    from harness.spec.imports import resolve_import, use_interpreter_if_no_gpu

    use_interpreter_if_no_gpu()
    archs = tuple(a for item in args.arch for a in item.split(",")) or DEFAULT_ARCHS
    problems, rows = [], []
    for spec in load_specs(spec_paths([], args.specs_dir, args.kernel)):
        for backend in spec.backends.values():
            if backend.source:
                result = build_cuda(resolve_import(backend.source), archs, extra_flags=torch_extension_flags())
                print(f"{spec.name} {backend.name}: nvcc {result.status}; SASS {', '.join(result.sass_archs) or '-'}; "
                      f"PTX {', '.join(result.ptx_archs) or '-'}")
                for k in result.kernels:
                    r = k.resources
                    print(f"  {k.arch} {k.kernel[:60]}: {r.registers} regs, spills {r.spill_store_bytes}/"
                          f"{r.spill_load_bytes} B, stack {r.stack_bytes} B, smem {r.shared_bytes} B")
                if result.status == "error":
                    problems.append(f"{spec.name} {backend.name}: {result.error}")
                problems += [f"{spec.name} {backend.name}: {p}" for p in result.problems]
                continue
            if "triton" not in backend.requires and backend.name != "triton":
                continue
            records, errors = triton_launches(spec, backend)
            problems += errors
            print(f"{spec.name} {backend.name}: {len(records)} distinct launch configs x {len(archs)} archs",
                  file=sys.stderr, flush=True)
            table = table_rows(compile_all(records, archs))
            rows += [dataclasses.replace(r, kernel=f"{spec.name}:{r.kernel}") for r in table]
            problems += [f"{r.kernel} [{r.config}] {r.arch}: {r.status}" for r in table if r.status != "ok"]
    if rows:
        print(render_table(rows))
    for p in problems:
        print(f"PROBLEM: {p}")
    print(f"matrix: {len(rows)} compiled kernel configs x archs, {len(problems)} problem(s)")
    return EXIT_FAILED if problems else EXIT_OK
