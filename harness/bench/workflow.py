"""``bench`` as a chain of small typed steps over one frozen :class:`BenchRun`:

``load -> plan -> open_journal -> measure_machine -> run -> finish -> write``

Each step reads what the earlier ones filled and returns a copy with its own fields; ``harness.cli.bench``
only parses the options into :class:`BenchOptions` and maps the outcome to an exit code. Every finished case
is appended to ``cases.jsonl`` at once, so an interrupted run leaves a renderable partial result, and
``--resume`` continues it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.steps import BadInput, execute

CPU_TIER_NOTE = ("CPU figures are host timings of eager torch at the spec's small cpu-tier shapes, not timings "
                 "of GPU kernels (the Triton interpreter is a correctness tool); bench a GPU for those")
# torch.compile on a CPU generates and compiles C++ per shape (seconds each): figures of Inductor's CPU code,
# which say nothing of a GPU kernel, at the cost of most of a first run.
CPU_SKIP = {"torch.compile": "the cpu tier: torch.compile's CPU code says nothing of a GPU kernel and compiles "
                             "C++ per shape (seconds each); --tier bench or --provider torch.compile times it"}


@dataclass(frozen=True)
class BenchOptions:
    specs_dir: str | tuple[str, ...] = ()  # spec folder(s); (): the project's (harness.spec.select.spec_folders)
    kernels: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()          # () means bf16 where the spec has it; ("all",) every dtype
    providers: tuple[str, ...] = ()
    tier: str | None = None               # "bench" or "cpu"; None: cpu on a CPU-only machine, else bench
    out: str | None = None
    seed: int = 0
    timeout: float | None = None
    min_time: float | None = None
    max_rsd: float = 0.005
    method: str = "auto"
    warm: bool = False
    resume: bool = False
    refresh_ceilings: bool = False
    pytest_benchmark: str | None = None
    isolate: bool | None = None
    modes: tuple[str, ...] = ()           # harness.bench.modes.MODES; (): every mode each spec supports
    targets: bool = False                 # only what the specs' [[targets]] compare


@dataclass(frozen=True)
class BenchRun:
    options: BenchOptions
    paths: tuple = ()
    specs: tuple = ()
    device: object = None
    tier: str = "bench"
    timing: object = None
    jobs: tuple = ()
    arch_rows: tuple = ()
    waivers: tuple = ()
    out: Path | None = None
    done: dict = field(default_factory=dict)      # resume_key(...) -> a resumed CaseResult
    environment: dict = field(default_factory=dict)
    ceilings: object = None
    cases: tuple = ()
    results: object = None
    written: tuple = ()


def resume_key(kernel: str, provider: str, dtype: str, case_id: str, mode: str = "fwd") -> tuple:
    """A finished case's key in ``BenchRun.done``: (kernel, provider, dtype, case), the mode after them for a bwd
    or full case (a fwd case keeps the key it had before modes)."""
    return (kernel, provider, dtype, case_id) + (() if mode == "fwd" else (mode,))


def timing_config(o: BenchOptions, device):
    from harness.timing.engine import TimingConfig

    gpu = device.is_gpu
    return TimingConfig(timeout_s=o.timeout or (15.0 if gpu else 3.0),
                        min_time_s=o.min_time if o.min_time is not None else (0.5 if gpu else 0.2),
                        max_rsd=o.max_rsd, method=o.method, cold=not o.warm)


def load(run: BenchRun) -> BenchRun:
    """The specs, bound to their code, and the device (the interpreter switched on where there is no GPU)."""
    from harness.spec.imports import use_interpreter_if_no_gpu
    from harness.spec.select import load_specs, spec_paths
    from harness.target.device import detect

    use_interpreter_if_no_gpu()
    paths = spec_paths([], run.options.specs_dir, run.options.kernels)
    return replace(run, paths=tuple(paths), specs=tuple(load_specs(paths)), device=detect())


def plan(run: BenchRun) -> BenchRun:
    """The jobs: every provider x case of the tier x dtype; on a CPU's default tier torch.compile sits out."""
    from harness.bench.plan import default_out_dir
    from harness.bench.plan import plan as plan_jobs

    o, device = run.options, run.device
    tier = o.tier or ("bench" if device.is_gpu else "cpu")
    # the targets name their dtypes; otherwise bf16 unless asked
    dtypes = () if o.dtypes == ("all",) or (o.targets and not o.dtypes) else (o.dtypes or ("bf16",))
    skip = CPU_SKIP if tier == "cpu" and not device.is_gpu else {}
    jobs, rows, waivers = plan_jobs(list(run.specs), device, dtypes, o.providers, tier, skip, o.modes, o.targets)
    if not jobs:
        raise BadInput("bench: nothing to measure (check --kernel / --dtype / --provider / --tier / --mode"
                       + (" / the specs' [[targets]], which name bench cases)" if o.targets else ")"))
    out = Path(o.out) if o.out else default_out_dir(device)
    return replace(run, tier=tier, timing=timing_config(o, device), jobs=tuple(jobs), arch_rows=tuple(rows),
                   waivers=tuple(waivers), out=out)


def open_journal(run: BenchRun) -> BenchRun:
    """The output folder, and with --resume the cases an interrupted run there finished."""
    from harness.results.load import load_partial

    run.out.mkdir(parents=True, exist_ok=True)
    journal = run.out / "cases.jsonl"
    done = {}
    if run.options.resume and journal.exists():
        done = {resume_key(c.kernel, c.provider, c.dtype, c.case_id, c.mode): c for c in load_partial(journal)}
    elif journal.exists():
        journal.unlink()
    return replace(run, done=done)


def measure_machine(run: BenchRun) -> BenchRun:
    """Provenance and the machine's ceilings, and the header a partial report needs, written before any case."""
    from harness.results.io import atomic_write_text, finite_json
    from harness.timing.ceilings import measure_ceilings
    from harness.timing.environment import collect_environment

    device, o = run.device, run.options
    environment = collect_environment(device=device.torch_device, spec_paths=list(run.paths), seed=o.seed,
                                      timing=run.timing)
    environment["bench_tier"] = run.tier
    if run.tier == "cpu":
        environment["note"] = CPU_TIER_NOTE
    ceilings = measure_ceilings(device.torch_device, refresh=o.refresh_ceilings)
    if not device.is_gpu:  # after the ceilings (their probes are sized for the machine): see cap_address_space
        from harness.bench.run import cap_address_space

        cap_address_space()
    header = {"environment": environment, "ceilings": dataclasses.asdict(ceilings),
              "arch_matrix": [dataclasses.asdict(r) for r in run.arch_rows],
              "waivers": [dataclasses.asdict(w) for w in run.waivers]}
    atomic_write_text(run.out / "run.json", json.dumps(finite_json(header), indent=1, default=str,
                                                       allow_nan=False) + "\n")
    return replace(run, environment=environment, ceilings=ceilings)


def run_jobs(run: BenchRun) -> BenchRun:
    """Each job not resumed, timed in plan order's result slots (workers finish in any order), journalled."""
    from harness.bench.dispatch import run_jobs as dispatch
    from harness.bench.run import Progress
    from harness.results.io import append_case

    jobs, journal = run.jobs, run.out / "cases.jsonl"
    progress = Progress(len(jobs))
    cases = [run.done.get(resume_key(j.spec.name, j.provider.name, j.dtype, j.case.id, j.mode)) for j in jobs]
    for job, result in zip(jobs, cases, strict=True):
        if result is not None:
            progress.step(job, result)
    todo = [i for i, result in enumerate(cases) if result is None]
    from harness.workers.pool import isolating, maybe_pool

    isolate = isolating(run.options.isolate, run.device.is_gpu)
    with maybe_pool(isolate) as pool:  # started after the ceilings: its imports must not disturb them
        for k, result in dispatch([jobs[i] for i in todo], run.device, run.ceilings, run.timing,
                                  run.options.seed, pool):
            append_case(journal, result)
            cases[todo[k]] = result
            progress.step(jobs[todo[k]], result)
    return replace(run, cases=tuple(cases))


def finish(run: BenchRun) -> BenchRun:
    """The results record: the cases with their speedups, and the environment at the end of the run."""
    from harness.bench.speedups import attach_speedups
    from harness.results.model import SCHEMA_VERSION, Results
    from harness.timing.environment import collect_environment

    end = collect_environment(device=run.device.torch_device, seed=run.options.seed, timing=run.timing)
    environment = {**run.environment, "at_end": {k: end.get(k) for k in ("date", "nvml") if k in end}}
    results = Results(SCHEMA_VERSION, environment, dataclasses.asdict(run.ceilings),
                      tuple(attach_speedups(list(run.cases))), run.arch_rows, run.waivers, True)
    return replace(run, environment=environment, results=results)


def write(run: BenchRun) -> BenchRun:
    """results.json, results.csv, report.md (and pytest-benchmark JSON); the journal and header go."""
    from harness.report.render import render_report
    from harness.results.io import write_results

    json_path, csv_path = write_results(run.results, run.out)
    written = [json_path, csv_path, render_report(run.results, run.out)]
    if run.options.pytest_benchmark:
        from harness.results.pbexport import write_pytest_benchmark

        written.append(write_pytest_benchmark(run.results, run.options.pytest_benchmark))
    (run.out / "cases.jsonl").unlink(missing_ok=True)
    (run.out / "run.json").unlink(missing_ok=True)
    return replace(run, written=tuple(written))


STEPS = (load, plan, open_journal, measure_machine, run_jobs, finish, write)


def bench(options: BenchOptions, *, trace: bool = False) -> BenchRun:
    return execute(STEPS, BenchRun(options), trace=trace)


def failures(cases) -> tuple[list[str], bool]:
    """The lines to print for cases that are wrong or crashed, and whether the run failed: only a *candidate*
    (the kernel under test) fails it; a baseline or peer that cannot run (torch.compile failing on a
    reference, say) is a finding of the report. A case has a row per mode timed: the mode is named where it is
    not the forward, or a case's bwd and full lines would read the same."""
    bad = [c for c in cases if c.status in ("wrong", "error")]
    lines = [f"{'FAILED' if c.role == 'candidate' else f'note ({c.role}, does not fail the run)'}: {c.kernel} "
             f"{c.provider} {c.dtype} {c.case_id}{'' if c.mode == 'fwd' else f' {c.mode}'}: {c.status}: {c.reason}"
             for c in bad]
    return lines, any(c.role == "candidate" for c in bad)
