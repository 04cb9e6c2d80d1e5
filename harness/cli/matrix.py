"""``matrix``: compile every Triton kernel (each launch config the spec's cases use) and every CUDA C++
backend ahead of time for each target architecture (NVIDIA sm_80/90/100, AMD gfx942/gfx950), and read the
resources from the binaries. No GPU. CUDA C++ backends are not applicable on AMD targets; a spec may waive a
target with a reason (`[waive] "matrix.gfx950" = "..."`): a waived target is not compiled (like a waived check,
it is not run) unless --compile-waived asks to see its problems. `--out` writes the entries for the report.
The run itself is harness.aot.workflow's steps.
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


@command("matrix", "compile every kernel for each target architecture (NVIDIA and AMD); print registers, spills, "
                   "shared memory / LDS, occupancy")
@options(_options)
def cmd_matrix(args) -> int:
    from harness.aot.workflow import STEPS, MatrixRun
    from harness.correctness.args import meta_args
    from harness.results.io import atomic_write_text
    from harness.steps import execute

    first = MatrixRun(meta_args=meta_args, write_text=atomic_write_text, specs_dir=args.specs_dir,
                      kernels=tuple(args.kernel), arch_options=tuple(args.arch), compile_waived=args.compile_waived,
                      out=args.out, jobs=args.jobs)
    run = execute(STEPS, first, trace=os.environ.get("KH_TRACE_STEPS") == "1")
    return EXIT_FAILED if run.problems else EXIT_OK
