"""``bench``, ``report`` and ``export``: their options, and the exit code of what harness.bench.workflow did."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from harness.cli.registry import EXIT_FAILED, EXIT_OK, BadInput, comma_list, command, options, specs_option


def _bench_options(p) -> None:
    p.add_argument("--kernel", action="append", default=[], help="only these kernels (repeatable, comma list)")
    p.add_argument("--dtype", action="append", default=[],
                   help="dtypes to measure (default: bf16 where the spec has it; 'all' for every dtype)")
    p.add_argument("--provider", action="append", default=[], help="only these providers")
    p.add_argument("--tier", choices=["cpu", "bench"], default=None,
                   help="which cases: bench (the spec's bench shapes; the default on a GPU) or cpu (its small cpu "
                        "tier, by default its ci shapes; the default on a CPU-only machine)")
    p.add_argument("--out", help="output directory (default: build/reports/<device>/, which git ignores)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, help="wall-clock seconds per case (default 15 on a GPU, 3 on CPU)")
    p.add_argument("--min-time", type=float, help="device seconds before the noise rule may stop (default 0.5)")
    p.add_argument("--max-rsd", type=float, default=0.005, help="stop at this relative std (default 0.005)")
    p.add_argument("--method", default="auto", choices=["auto", "cupti", "events", "graph", "host"],
                   help="device timing: auto (= events), cupti, graph (CUDA-graph replay, L2 flushed between "
                        "replays: decode shapes as vLLM runs them), host; the gate takes auto, events or host")
    p.add_argument("--warm", action="store_true", help="no L2 flush between samples (hot cache)")
    p.add_argument("--mode", action="append", default=[],
                   help="which pass to time (repeatable, comma list): fwd, bwd (the backward alone, its forward "
                        "outside the timed region) or full (forward and backward in one call); default: fwd for a "
                        "spec without [backward], every mode for one with it")
    p.add_argument("--targets", action="store_true",
                   help="only what the specs' [[targets]] compare: their cases, dtypes and modes, and the two "
                        "providers of each (a quick look at where each target stands; report.md judges them)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    specs_option(p)
    p.add_argument("--refresh-ceilings", action="store_true",
                   help="measure the machine's ceilings again instead of using the cached ones (cached per device, "
                        "driver and torch in ~/.cache/kernel-harness; measure on an idle machine)")
    p.add_argument("--pytest-benchmark", metavar="FILE", help="also write pytest-benchmark JSON here")
    p.add_argument("--against", metavar="REF",
                   help="merge gate: time the kernels of git REF (e.g. origin/main; HEAD for an A/A run) and of the "
                        "working tree interleaved on one GPU, then write compare.md and compare.json to --out")
    p.add_argument("--candidate", metavar="REF",
                   help="with --against: the pull request side is git REF's kernels and specs (git archive, loaded "
                        "under their own module root, run in worker processes only) instead of the working tree's; "
                        "this checkout's harness, policy and calibration decide (the trusted gate)")
    p.add_argument("--accept-policy", metavar="SHA",
                   help="with --against: apply the pull request's changes to policy-carrying spec fields ([gate], "
                        "tolerances, waivers, reference) when SHA is the PR side's exact commit (a maintainer's "
                        "acceptance, which the trusted workflow passes); otherwise the base's values judge")
    p.add_argument("--noise", metavar="FILE",
                   help="with --against: the noise.json an A/A run (--against HEAD) wrote; each case's minimum "
                        "effect is raised to its measured spread")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="run each job in a worker process (one per GPU), so a crash or hang fails that job only "
                        "(default: on with a GPU, off on the CPU; with --against always on, so the process that "
                        "decides imports no kernel)")


@command("bench", "benchmark kernels at their bench shapes (a CPU: the small cpu tier) and write results and a report")
@options(_bench_options)
def cmd_bench(args) -> int:
    if args.against:
        from harness.cli.compare import cmd_against

        return cmd_against(args)
    for given, name in ((args.candidate, "--candidate"), (args.accept_policy, "--accept-policy")):
        if given is not None:
            raise BadInput(f"{name}: only with --against (the merge gate)")
    from harness.bench.modes import parse_modes
    from harness.bench.workflow import BenchOptions, bench, failures

    run = bench(BenchOptions(
        specs_dir=args.specs_dir, kernels=comma_list(args.kernel), dtypes=comma_list(args.dtype),
        providers=comma_list(args.provider), tier=args.tier, out=args.out, seed=args.seed, timeout=args.timeout,
        min_time=args.min_time, max_rsd=args.max_rsd, method=args.method, warm=args.warm, resume=args.resume,
        refresh_ceilings=args.refresh_ceilings, pytest_benchmark=args.pytest_benchmark, isolate=args.isolate,
        modes=parse_modes(args.mode), targets=args.targets),
        trace=bool(os.environ.get("KH_TRACE_STEPS")))
    print("wrote " + ", ".join(str(p) for p in run.written[:3]))
    from harness.report.targets import target_lines

    targets = target_lines(run.results)
    print("\n".join(targets), end="\n" if targets else "")
    lines, failed = failures(run.results.cases)
    print("\n".join(lines), end="\n" if lines else "")
    return EXIT_FAILED if failed else EXIT_OK


@command("report", "re-render report.md and plots from a results.json (or a partial cases.jsonl)")
@options(lambda p: (p.add_argument("results", help="results.json, or cases.jsonl of an interrupted run"),
                    p.add_argument("--out", help="output directory (default: next to the results)")))
def cmd_report(args) -> int:
    from harness.report.render import render_report

    results = _with_speedups(load_any(args.results))
    out = Path(args.out) if args.out else Path(args.results).parent
    _folder_for_output(out, out)
    beside = Path(args.results).with_name("profile.json")  # the run's own profile, wherever the report goes
    profile = beside if beside.is_file() else None
    print(f"wrote {render_report(results, out, profile=profile)}")
    return EXIT_OK


@command("export", "convert results.json to pytest-benchmark JSON (pytest-benchmark compare reads it)")
@options(lambda p: (p.add_argument("results"), p.add_argument("--out", required=True)))
def cmd_export(args) -> int:
    from harness.results.pbexport import write_pytest_benchmark

    results = _with_speedups(load_any(args.results))
    out = Path(args.out)
    if out.is_dir():
        raise BadInput(f"--out {out}: is a folder; give the name of the file to write")
    _folder_for_output(out.parent, out)
    print(f"wrote {write_pytest_benchmark(results, out)}")
    return EXIT_OK


def _with_speedups(results):
    """An interrupted run's journal records each case as it finished, before any speedup could be worked out
    (the run attaches them at its end): worked out here from the finished cases' samples, as the run would have."""
    if results.complete:
        return results
    import dataclasses

    from harness.bench.speedups import attach_speedups

    return dataclasses.replace(results, cases=tuple(attach_speedups(list(results.cases))))


def _folder_for_output(folder: Path, out: Path) -> None:
    """``folder`` is, or can be made, a folder: a file in the way is one line, not a traceback mid-write."""
    for p in (folder, *folder.parents):
        if p.exists():
            if not p.is_dir():
                raise BadInput(f"--out {out}: {p} is not a folder")
            return


def load_any(path: str):
    from harness.results.load import load_any as load
    from harness.results.model import ResultsError

    try:
        return load(path)
    except ResultsError as exc:
        raise BadInput(str(exc)) from None
