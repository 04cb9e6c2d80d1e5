"""``test-releases``: the generated CPU tests under each Triton and torch release a project supports, each in its
own cached environment (``--triton 3.6,3.9``, ``--torch 2.13``; default: ``[tool.kernel-harness.toolchains]``).
Arguments after ``--`` go to pytest. The run itself is harness.aot.release_tests's steps. The matrix across
releases is ``matrix --triton`` (harness/cli/matrix.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.cli.registry import EXIT_FAILED, EXIT_OK, command, options, specs_option


def _options(p) -> None:
    p.add_argument("--triton", action="append", default=[], metavar="RELEASES",
                   help="Triton releases, comma-separated (3.6,3.9); default: [tool.kernel-harness.toolchains] "
                        "triton, else the installed one")
    p.add_argument("--torch", action="append", default=[], metavar="RELEASES",
                   help="torch releases, each paired with every Triton release; default: the table's torch, else "
                        "the installed one (a CUDA build comes with its nvidia-* libraries: several GB)")
    p.add_argument("--kernel", action="append", default=[], help="only this kernel's tests (repeatable)")
    p.add_argument("--tier", choices=["ci", "full"], default=None, help="default: [tool.kernel-harness] tier")
    p.add_argument("--cache", metavar="DIR", help="the release environments' folder (default: $KH_TOOLCHAINS_CACHE, "
                                                  "else ~/.cache/kernel-harness/toolchains)")
    specs_option(p)
    p.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")


@command("test-releases", "run the generated CPU tests under each Triton / torch release, each in its own cached "
                          "environment")
@options(_options)
def cmd_test_releases(args) -> int:
    from harness.aot.release_tests import STEPS, ReleaseTests
    from harness.config import load_config, shown
    from harness.steps import execute

    config = load_config()
    specs = tuple(args.specs_dir) or tuple(shown(p) for p in config.specs)
    first = ReleaseTests(specs=specs, tier=args.tier or config.tier,
                         pytest_args=(*(f"--kernel={k}" for k in args.kernel), *args.pytest_args),
                         triton=tuple(args.triton), torch=tuple(args.torch),
                         configured_triton=config.toolchains.triton, configured_torch=config.toolchains.torch,
                         where=config.where("toolchains"), cache=args.cache, cwd=Path.cwd())
    run = execute(STEPS, first, trace=os.environ.get("KH_TRACE_STEPS") == "1")
    return EXIT_FAILED if run.failed else EXIT_OK
