"""The merge gate's commands: ``compare BASE.json PR.json`` and ``bench --against REF`` (``cmd_against``).

Exit codes: 0 nothing regressed (inconclusive cases included), 1 a case is SLOWER or a PR candidate is
wrong or fails, 2 bad input (a file, a ref, an option, or two runs that must not be compared).
"""

from __future__ import annotations

import os

from harness.cli.registry import comma_list, command, options, specs_option

# ----------------------------------------------------------------------------- compare (stored runs)

def _compare_options(p) -> None:
    p.add_argument("base", help="results.json of the base")
    p.add_argument("pr", help="results.json of the pull request")
    p.add_argument("--out", help="output folder for compare.md, compare.json and the plot (default: beside PR)")
    p.add_argument("--force", action="store_true", help="compare runs of different devices, drivers or specs")
    p.add_argument("--noise", metavar="FILE", help="noise.json of an A/A comparison: raises each case's effect")
    p.add_argument("--min-effect", help="relative minimum effect (0.05 = 5 %%) instead of the calibrated one")
    p.add_argument("--floor-us", help="absolute floor in microseconds instead of the calibrated one")
    p.add_argument("--provider", help="compare this provider of each case (default: each side's candidate)")
    specs_option(p, "the spec folder whose specs' [gate] rules apply (a kernel without a spec there has none)")
    p.add_argument("--calibration", help="gate calibration file (default: [tool.kernel-harness.gate] calibration, "
                                         "else the one shipped with the harness)")


@command("compare", "compare two stored results files case by case: the merge gate's verdicts, compare.md")
@options(_compare_options)
def cmd_compare(args) -> int:
    from harness.gate.workflow import CompareOptions, run_compare

    return _report(run_compare(CompareOptions(
        base=args.base, pr=args.pr, out=args.out, force=args.force, noise=args.noise, min_effect=args.min_effect,
        floor_us=args.floor_us, provider=args.provider, specs_dir=args.specs_dir, calibration=args.calibration),
        trace=_trace()))


def cmd_against(args) -> int:
    """``bench --against REF``: its options are bench's (harness.cli.bench)."""
    from harness.bench.modes import parse_modes
    from harness.gate.workflow import AgainstOptions, run_against

    return _report(run_against(AgainstOptions(
        against=args.against, specs_dir=args.specs_dir, kernels=comma_list(args.kernel),
        dtypes=comma_list(args.dtype), providers=comma_list(args.provider), seed=args.seed, out=args.out,
        timeout=args.timeout, warm=args.warm, method=args.method, blocks=getattr(args, "blocks", None),
        samples=getattr(args, "samples", None), noise=getattr(args, "noise", None),
        refresh_ceilings=bool(getattr(args, "refresh_ceilings", False)), isolate=args.isolate,
        candidate=getattr(args, "candidate", None), accept_policy=getattr(args, "accept_policy", None),
        modes=parse_modes(getattr(args, "mode", ()))),
        trace=_trace()))


def _report(run) -> int:
    from harness.gate.workflow import summary

    print("\n".join(summary(run)))
    return run.code


def _trace() -> bool:
    return bool(os.environ.get("KH_TRACE_STEPS"))
