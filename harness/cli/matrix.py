"""``matrix``: compile every Triton kernel (each launch config the spec's cases use) and every CUDA C++
backend ahead of time for each target architecture (NVIDIA sm_80/90/100, AMD gfx942/gfx950), and read the
resources from the binaries. No GPU. CUDA C++ backends are not applicable on AMD targets; a spec may waive a
target with a reason (`[waive] "matrix.gfx950" = "..."`): a waived target is not compiled (like a waived check,
it is not run) unless --compile-waived asks to see its problems. `--out` writes the entries for the report.
The run itself is harness.aot.workflow's steps. `--triton 3.5,3.6,3.9` runs it once per Triton release, each in
its own cached environment, and compares them kernel by kernel: harness.aot.release_workflow's steps.
"""

from __future__ import annotations

import os

from harness.cli.registry import EXIT_FAILED, EXIT_OK, command, options, specs_option
from harness.spec.archs import DEFAULT_ARCHS


def _options(p) -> None:
    p.add_argument("--kernel", action="append", default=[])
    p.add_argument("--arch", action="append", default=[],
                   help=f"targets, comma-separated (default: {','.join(DEFAULT_ARCHS)})")
    specs_option(p)
    p.add_argument("--compile-waived", action="store_true",
                   help="also compile the targets a spec waives, listing their problems as waived")
    p.add_argument("--out", help="write the per kernel x target entries here (JSON; the report reads "
                                 "matrix.json next to results.json)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="compile Triton kernels in N worker processes (default: $KH_MATRIX_JOBS, else every "
                        "core; 1: one after the other in this process)")
    p.add_argument("--triton", action="append", nargs="?", const="", default=None, metavar="RELEASES",
                   help="compile under each of these Triton releases (3.5,3.6,3.9; alone: [tool.kernel-harness."
                        "toolchains] triton), each in its own cached environment, and compare them kernel by "
                        "kernel; --out is then a folder (default build/toolchains)")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="with --triton: a flagged difference between releases (compile failure, new spill, lost "
                        "occupancy) fails the run (also: toolchains.regressions = \"fail\")")
    p.add_argument("--cache", metavar="DIR", help="with --triton: the release environments' folder (default: "
                                                  "$KH_TOOLCHAINS_CACHE, else ~/.cache/kernel-harness/toolchains)")


@command("matrix", "compile every kernel for each target architecture (NVIDIA and AMD); print registers, spills, "
                   "shared memory / LDS, occupancy")
@options(_options)
def cmd_matrix(args) -> int:
    if args.triton is not None:
        return _across_releases(args)
    from harness.aot.workflow import STEPS, MatrixRun
    from harness.correctness.args import meta_args, meta_backward_args
    from harness.results.io import atomic_write_text
    from harness.steps import execute

    first = MatrixRun(meta_args=meta_args, meta_backward_args=meta_backward_args, write_text=atomic_write_text,
                      specs_dir=args.specs_dir, kernels=tuple(args.kernel), arch_options=tuple(args.arch),
                      compile_waived=args.compile_waived, out=args.out, jobs=args.jobs)
    run = execute(STEPS, first, trace=os.environ.get("KH_TRACE_STEPS") == "1")
    return EXIT_FAILED if run.problems else EXIT_OK


def _across_releases(args) -> int:
    from pathlib import Path

    from harness.aot.release_workflow import STEPS, ReleaseMatrix
    from harness.config import load_config
    from harness.results.io import atomic_write_text
    from harness.steps import execute

    config = load_config()
    child = [*(f"--kernel={k}" for k in args.kernel), *(f"--arch={a}" for a in args.arch),
             *(f"--specs={d}" for d in args.specs_dir), *(["--compile-waived"] if args.compile_waived else []),
             *([f"--jobs={args.jobs}"] if args.jobs is not None else [])]
    releases = tuple(r for r in args.triton if r)
    shown = ["python -m harness matrix", f"--triton {','.join(releases)}".rstrip(), *child]  # for the page
    first = ReleaseMatrix(write_text=atomic_write_text, out=args.out or str(config.root / "build" / "toolchains"),
                          releases=releases, configured=config.toolchains.triton,
                          where=config.where("toolchains"), policy=config.toolchains.regressions,
                          fail_on_regression=args.fail_on_regression, matrix_args=tuple(child), cache=args.cache,
                          command=" ".join(shown), cwd=Path.cwd())
    run = execute(STEPS, first, trace=os.environ.get("KH_TRACE_STEPS") == "1")
    return EXIT_FAILED if run.failed else EXIT_OK
