"""``bench``, ``report`` and ``export`` commands: the benchmark pipeline and its outputs."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from pathlib import Path

from harness.cli.registry import EXIT_FAILED, EXIT_OK, BadInput, comma_list, command, load_specs, options, spec_paths


def _bench_options(p) -> None:
    p.add_argument("--kernel", action="append", default=[], help="only these kernels (repeatable, comma list)")
    p.add_argument("--dtype", action="append", default=[],
                   help="dtypes to measure (default: bf16 where the spec has it; 'all' for every dtype)")
    p.add_argument("--provider", action="append", default=[], help="only these providers")
    p.add_argument("--out", help="output directory (default: build/reports/<device>/, which git ignores)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, help="wall-clock seconds per case (default 15 on a GPU, 3 on CPU)")
    p.add_argument("--min-time", type=float, help="device seconds before the noise rule may stop (default 0.5)")
    p.add_argument("--max-rsd", type=float, default=0.005, help="stop at this relative std (default 0.005)")
    p.add_argument("--method", default="auto", choices=["auto", "cupti", "events", "host"])
    p.add_argument("--warm", action="store_true", help="no L2 flush between samples (hot cache)")
    p.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    p.add_argument("--specs-dir", default="specs")
    p.add_argument("--refresh-ceilings", action="store_true",
                   help="measure the machine's ceilings again instead of using the cached ones (cached per device, "
                        "driver and torch in ~/.cache/kernel-harness; measure on an idle machine)")
    p.add_argument("--pytest-benchmark", metavar="FILE", help="also write pytest-benchmark JSON here")
    p.add_argument("--against", metavar="REF",
                   help="merge gate: time the kernels of git REF (e.g. origin/main; HEAD for an A/A run) and of the "
                        "working tree interleaved on one GPU, then write compare.md and compare.json to --out")
    p.add_argument("--noise", metavar="FILE",
                   help="with --against: the noise.json an A/A run (--against HEAD) wrote; each case's minimum "
                        "effect is raised to its measured spread")
    p.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                   help="run each job in a worker process (one per GPU), so a crash or hang fails that job only "
                        "(default: on with a GPU, off on the CPU)")



def timing_config(args, device):
    from harness.timing.engine import TimingConfig

    gpu = device.is_gpu
    return TimingConfig(timeout_s=args.timeout or (15.0 if gpu else 3.0),
                        min_time_s=args.min_time if args.min_time is not None else (0.5 if gpu else 0.2),
                        max_rsd=args.max_rsd, method=args.method, cold=not args.warm)


@command("bench", "benchmark kernels at their bench shapes and write results and a report")
@options(_bench_options)
def cmd_bench(args) -> int:
    if args.against:
        from harness.cli.compare import cmd_against

        return cmd_against(args)
    from harness.bench.dispatch import run_jobs
    from harness.bench.plan import default_out_dir, plan
    from harness.bench.run import Progress
    from harness.bench.speedups import attach_speedups
    from harness.report.render import render_report
    from harness.results.io import append_case, atomic_write_text, finite_json, write_results
    from harness.results.load import load_partial
    from harness.results.model import SCHEMA_VERSION, Results
    from harness.spec.imports import use_interpreter_if_no_gpu
    from harness.target.device import detect
    from harness.timing.ceilings import measure_ceilings
    from harness.timing.environment import collect_environment

    use_interpreter_if_no_gpu()
    paths = spec_paths([], args.specs_dir, args.kernel)
    specs = load_specs(paths)
    device = detect()
    out = Path(args.out) if args.out else default_out_dir(device)
    dtypes = comma_list(args.dtype)
    dtypes = () if dtypes == ("all",) else (dtypes or ("bf16",))
    timing = timing_config(args, device)
    jobs, arch_rows, waivers = plan(specs, device, dtypes, comma_list(args.provider))
    if not jobs:
        raise BadInput("bench: nothing to measure (check --kernel / --dtype / --provider)")
    out.mkdir(parents=True, exist_ok=True)
    journal = out / "cases.jsonl"
    done = {}
    if args.resume and journal.exists():
        done = {(c.kernel, c.provider, c.dtype, c.case_id): c for c in load_partial(journal)}
    elif journal.exists():
        journal.unlink()
    environment = collect_environment(device=device.torch_device, spec_paths=paths, seed=args.seed, timing=timing)
    ceilings = measure_ceilings(device.torch_device, refresh=args.refresh_ceilings)
    if not device.is_gpu:  # after the ceilings (their probes are sized for the machine): see cap_address_space
        from harness.bench.run import cap_address_space

        cap_address_space()
    # What a partial report needs besides the cases: written before the first case, atomically.
    header = {"environment": environment, "ceilings": dataclasses.asdict(ceilings),
              "arch_matrix": [dataclasses.asdict(r) for r in arch_rows],
              "waivers": [dataclasses.asdict(w) for w in waivers]}
    atomic_write_text(out / "run.json", json.dumps(finite_json(header), indent=1, default=str, allow_nan=False) + "\n")
    progress = Progress(len(jobs))
    cases = [done.get((job.spec.name, job.provider.name, job.dtype, job.case.id)) for job in jobs]
    for job, result in zip(jobs, cases, strict=True):
        if result is not None:
            progress.step(job, result)
    todo = [i for i, result in enumerate(cases) if result is None]
    with _pool(args, device) as pool:  # started after the ceilings: its imports must not disturb them
        for k, result in run_jobs([jobs[i] for i in todo], device, ceilings, timing, args.seed, pool):
            append_case(journal, result)
            cases[todo[k]] = result  # the plan's order, whatever order the workers finish in
            progress.step(jobs[todo[k]], result)
    end = collect_environment(device=device.torch_device, seed=args.seed, timing=timing)
    environment["at_end"] = {k: end.get(k) for k in ("date", "nvml") if k in end}
    results = Results(SCHEMA_VERSION, environment, dataclasses.asdict(ceilings), tuple(attach_speedups(cases)),
                      tuple(arch_rows), tuple(waivers), True)
    json_path, csv_path = write_results(results, out)
    report = render_report(results, out)
    if args.pytest_benchmark:
        from harness.results.pbexport import write_pytest_benchmark

        write_pytest_benchmark(results, args.pytest_benchmark)
    journal.unlink(missing_ok=True)
    (out / "run.json").unlink(missing_ok=True)
    print(f"wrote {json_path}, {csv_path}, {report}")
    return exit_code(results.cases)


def exit_code(cases) -> int:
    """1 when a *candidate* (the kernel under test) is wrong or crashed; a baseline or peer that cannot run
    (torch.compile failing on a reference, say) is a finding of the report, printed here, not a failed run."""
    bad = [c for c in cases if c.status in ("wrong", "error")]
    for c in bad:
        what = "FAILED" if c.role == "candidate" else f"note ({c.role}, does not fail the run)"
        print(f"{what}: {c.kernel} {c.provider} {c.dtype} {c.case_id}: {c.status}: {c.reason}")
    return EXIT_FAILED if any(c.role == "candidate" for c in bad) else EXIT_OK


def _pool(args, device):
    isolate = args.isolate if args.isolate is not None else device.is_gpu
    if not isolate:
        return contextlib.nullcontext()
    from harness.workers.pool import WorkerPool, default_devices

    return WorkerPool(default_devices())


@command("report", "re-render report.md and plots from a results.json (or a partial cases.jsonl)")
@options(lambda p: (p.add_argument("results", help="results.json, or cases.jsonl of an interrupted run"),
                    p.add_argument("--out", help="output directory (default: next to the results)")))
def cmd_report(args) -> int:
    from harness.report.render import render_report

    results = load_any(args.results)
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

    results = load_any(args.results)
    out = Path(args.out)
    if out.is_dir():
        raise BadInput(f"--out {out}: is a folder; give the name of the file to write")
    _folder_for_output(out.parent, out)
    print(f"wrote {write_pytest_benchmark(results, out)}")
    return EXIT_OK


def _folder_for_output(folder: Path, out: Path) -> None:
    """``folder`` is, or can be made, a folder: a file in the way is one line, not a traceback mid-write."""
    for p in (folder, *folder.parents):
        if p.exists():
            if not p.is_dir():
                raise BadInput(f"--out {out}: {p} is not a folder")
            return


def _partial(path: str):
    """An interrupted run: its finished cases, with the run's header (run.json beside it) when present."""
    from harness.results.load import load_partial, results_from_json
    from harness.results.model import SCHEMA_VERSION, to_json

    cases = [to_json(c) for c in load_partial(path)]
    header_path = Path(path).with_name("run.json")
    header = {}
    if header_path.exists():
        try:
            header = json.loads(header_path.read_text())
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON or UTF-8, a 5000-digit number
            raise BadInput(f"{header_path}: unreadable run header: {exc}") from None
        if not isinstance(header, dict):
            raise BadInput(f"{header_path}: expected a JSON object")
    doc = {"schema_version": SCHEMA_VERSION, "environment": header.get("environment", {}),
           "ceilings": header.get("ceilings", {}), "cases": cases, "arch_matrix": header.get("arch_matrix", []),
           "waivers": header.get("waivers", []), "complete": False}
    results_from_json({**doc, "cases": []}, str(header_path))  # a problem in the header names run.json...
    return results_from_json(doc, path)  # ...then only the cases can be wrong (duplicates): cases.jsonl


def load_any(path: str):
    from harness.results.load import load_results
    from harness.results.model import ResultsError

    try:
        if path.endswith(".jsonl"):
            return _partial(path)
        return load_results(path)
    except ResultsError as exc:
        raise BadInput(str(exc)) from None
