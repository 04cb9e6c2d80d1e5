"""The merge gate's commands: ``compare BASE.json PR.json`` and ``bench --against REF`` (``cmd_against``).

Exit codes: 0 nothing regressed (inconclusive cases included), 1 a case is SLOWER or a PR candidate is
wrong or fails, 2 bad input (a file, a ref, an option, or two runs that must not be compared).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from harness.cli.registry import BadInput, comma_list, command, load_specs, options, spec_paths


def _number(text: str, name: str, lo: float, hi: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"{name}: expected a number, got {text!r}") from None
    if not lo <= value < hi:
        raise BadInput(f"{name}: expected a number in [{lo:g}, {hi:g}), got {text}")
    return value


def _noise(path):
    from harness.gate.calibration import CalibrationError, load_noise

    if not path:
        return {}, ()
    try:
        return load_noise(path), (f"Minimum effects raised to each case's A/A spread from {path}.",)
    except CalibrationError as exc:
        raise BadInput(str(exc)) from None


def _write(cmp, out: Path) -> int:
    from harness.gate.calibration import noise_doc
    from harness.gate.verdict import exit_code
    from harness.report.compare import summary_line, write_comparison
    from harness.results.io import atomic_write_text

    code = exit_code([c.verdict for c in cmp.cases])
    paths = write_comparison(cmp, out, code)
    if cmp.aa:  # an A/A run measured the noise floor: the next run may read it with --noise
        paths["noise"] = out / "noise.json"
        doc = noise_doc(cmp.cases, cmp.kind, f"{cmp.base.commit} vs {cmp.pr.commit}")
        atomic_write_text(paths["noise"], json.dumps(doc, indent=1, allow_nan=False) + "\n")
    print(f"merge gate ({cmp.kind}): {summary_line(cmp.cases)}")
    for c in cmp.cases:
        if c.failing:
            print(f"{c.verdict}: {c.kernel} {c.dtype} {c.case_id}: {c.reason or f'ratio {c.ratio:.4f}'}")
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return code


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
    p.add_argument("--specs-dir", default="specs", help="specs whose [gate] rules apply (skipped if absent)")
    p.add_argument("--calibration", help="gate calibration file (default: the one shipped with the harness)")


def _load(path: str):
    from harness.results.load import load_results
    from harness.results.model import ResultsError

    try:
        return load_results(path)
    except ResultsError as exc:
        raise BadInput(str(exc)) from None


def _spec_rules(specs_dir: str, kernels, threshold) -> dict:
    """Each kernel's [gate] rule from its spec, where the spec is here and loads."""
    from harness.gate.calibration import for_spec
    from harness.spec.load import load
    from harness.spec.schema import SpecError

    rules = {}
    for k in sorted(kernels):
        path = Path(specs_dir) / f"{k}.toml"
        if path.is_file():
            try:
                rules[k] = for_spec(threshold, load(path))
            except SpecError:
                continue  # a spec that does not load here sets no rule; compare needs only the results
    return rules


@command("compare", "compare two stored results files case by case: the merge gate's verdicts, compare.md")
@options(_compare_options)
def cmd_compare(args) -> int:
    from harness.gate.calibration import CalibrationError, default_threshold, with_options
    from harness.gate.compare import Refused, compare_results
    from harness.gate.model import STORED

    base, pr = _load(args.base), _load(args.pr)
    min_effect = _number(args.min_effect, "--min-effect", 0.0, 1.0) if args.min_effect is not None else None
    floor = _number(args.floor_us, "--floor-us", 0.0, float("inf")) if args.floor_us is not None else None
    try:
        threshold = default_threshold(STORED, args.calibration)
    except CalibrationError as exc:
        raise BadInput(str(exc)) from None
    if min_effect is not None or floor is not None:
        threshold, rules = with_options(threshold, min_effect, floor), {}
    else:
        rules = _spec_rules(args.specs_dir, {c.kernel for c in pr.cases}, threshold)
    noise, notes = _noise(args.noise)
    try:
        cmp = compare_results(base, pr, base_source=args.base, pr_source=args.pr, threshold=threshold,
                              force=args.force, noise=noise, provider=args.provider, spec_rules=rules)
    except Refused as exc:
        raise BadInput(str(exc)) from None
    if notes:
        import dataclasses

        cmp = dataclasses.replace(cmp, notes=cmp.notes + notes)
    return _write(cmp, Path(args.out) if args.out else Path(args.pr).parent)


# ----------------------------------------------------------------------------- bench --against REF


def block_config(args, device):
    from harness.gate.interleave import BlockConfig

    if args.method == "cupti":
        raise BadInput("--method cupti: bench --against times with CUDA events (or host); use auto, events or host")
    extra = {k: getattr(args, k) for k in ("blocks", "samples") if getattr(args, k, None)}
    try:
        return BlockConfig(budget_s=args.timeout or (10.0 if device.is_gpu else 2.0), cold=not args.warm,
                           method="host" if args.method == "host" else "events", **extra)
    except ValueError as exc:
        raise BadInput(f"bench --against: {exc}") from None


def _progress(i: int, total: int, d: dict) -> None:
    ratio = d.get("ratio")
    what = f"{100 * (ratio - 1):+.2f}%" if isinstance(ratio, float) and ratio == ratio else d.get("reason", "")
    print(f"[{i}/{total}] {d['kernel']} {d['dtype']} {d['case_id']}: {d['verdict']} {what} "
          f"({d.get('blocks', 0)} block pairs, {d.get('wall_s', 0.0):.1f} s)", file=sys.stderr, flush=True)


def cmd_against(args) -> int:
    import dataclasses

    from harness.bench.plan import default_out_dir
    from harness.gate import ab
    from harness.gate.basetree import GitError, materialize, repo_root
    from harness.gate.calibration import CalibrationError, default_threshold
    from harness.gate.model import IN_PROCESS
    from harness.gate.verdict import CONFIDENCE
    from harness.spec.imports import use_interpreter_if_no_gpu
    from harness.target.device import detect
    from harness.timing.ceilings import measure_ceilings
    from harness.timing.environment import collect_environment

    use_interpreter_if_no_gpu()
    device = detect()
    blocks = block_config(args, device)
    dtypes = comma_list(args.dtype)
    dtypes = () if dtypes == ("all",) else (dtypes or ("bf16",))
    try:
        default = default_threshold(IN_PROCESS)
    except CalibrationError as exc:
        raise BadInput(str(exc)) from None
    noise, notes = _noise(getattr(args, "noise", None))
    out = Path(args.out) if args.out else default_out_dir(device) / "gate"
    with tempfile.TemporaryDirectory(prefix="kh-gate-") as tmp:
        try:  # the ref first: a typo in it is one line, before any spec or kernel is imported
            base = materialize(args.against, repo_root(Path.cwd()), Path(tmp), Path(args.specs_dir))
        except GitError as exc:
            raise BadInput(str(exc)) from None
        pr_paths = spec_paths([], args.specs_dir, args.kernel)
        pr_specs = {s.name: s for s in load_specs(pr_paths)}
        base_specs, problems = ab.load_base_specs(base, set(pr_specs) if args.kernel else None)
        plan = ab.plan_pairs(pr_specs, base_specs, dtypes, problems)
        if not (plan.pairs or plan.new_kernels or plan.removed_kernels):
            why = "; ".join(plan.unmatched[:3]) or "check --kernel and --dtype"
            raise BadInput(f"bench --against {args.against}: nothing to compare ({why})")
        provider = comma_list(args.provider)[0] if args.provider else None
        tasks = ab.case_tasks(plan, base, seed=args.seed, provider=provider, blocks=blocks, default=default,
                              noise=noise, confidence=CONFIDENCE)
        ceilings = measure_ceilings(device.torch_device, refresh=bool(getattr(args, "refresh_ceilings", False)))
        environment = collect_environment(device=device.torch_device, spec_paths=pr_paths, seed=args.seed)
        found: dict[int, dict] = {}
        with _pool(args, device) as pool:  # started after the ceilings, as in bench
            for i, d in ab.run_tasks(tasks, pool):
                found[i] = d
                _progress(len(found), len(tasks), d)
        records = [ab.record(found[i], pr_specs[found[i]["kernel"]], ceilings) for i in range(len(tasks))]
    timed = sorted({d["method"] for d in found.values() if d.get("method")})
    settings = {**dataclasses.asdict(blocks), "timed with": ", ".join(timed) or "nothing timed",
                "isolate": _isolate(args, device)}
    kernels = set(pr_specs) if args.kernel else set(pr_specs) | set(base_specs)
    cmp = ab.comparison(plan, records, base, environment, kernels, default=default, confidence=CONFIDENCE,
                        settings=settings, notes=notes)
    return _write(cmp, out)


def _isolate(args, device) -> bool:
    return args.isolate if args.isolate is not None else device.is_gpu


def _pool(args, device):
    import contextlib

    if not _isolate(args, device):
        return contextlib.nullcontext()
    from harness.workers.pool import WorkerPool, default_devices

    return WorkerPool(default_devices())
