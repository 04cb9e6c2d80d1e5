"""The merge gate's two commands as chains of small typed steps.

``compare BASE.json PR.json`` (:data:`COMPARE_STEPS`): ``load_runs -> thresholds -> compare -> write``.
``bench --against REF`` (:data:`AGAINST_STEPS`): ``configure -> materialize -> take_candidate -> load_sides ->
review_policy -> scan_kernels -> pair -> measure_machine -> time_pairs -> judge -> write``: the base ref's
kernels and specs under their own module root (and with ``--candidate SHA`` the pull request's under theirs:
the trusted run, where this checkout is the base and its harness, policy and calibration decide), the
policy in force per kernel, the static scan, both sides checked and timed interleaved on one GPU (in worker
processes: this process imports no kernel), a verdict per case.

``harness.cli.compare`` parses the options into :class:`CompareOptions` / :class:`AgainstOptions`, prints
what :func:`summary` says and returns the exit code; the code is the verdicts' (0 nothing regressed, 1 a case
SLOWER, WRONG or ERROR).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.steps import BadInput, execute


@dataclass(frozen=True)
class CompareOptions:
    base: str
    pr: str
    out: str | None = None
    force: bool = False
    noise: str | None = None
    min_effect: str | None = None
    floor_us: str | None = None
    provider: str | None = None
    specs_dir: str | tuple[str, ...] = ()   # spec folder(s); (): the project's (harness.spec.select.spec_folders)
    calibration: str | None = None


@dataclass(frozen=True)
class AgainstOptions:
    against: str
    specs_dir: str | tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()
    seed: int = 0
    out: str | None = None
    timeout: float | None = None
    warm: bool = False
    method: str = "auto"
    blocks: int | None = None
    samples: int | None = None
    noise: str | None = None
    refresh_ceilings: bool = False
    isolate: bool | None = None
    candidate: str | None = None       # the pull request's commit: its kernels and specs are the PR side
    accept_policy: str | None = None   # the commit a maintainer accepted the pull request's policy changes for
    modes: tuple[str, ...] = ()        # the passes compared (harness.bench.modes); () every one both sides have


@dataclass(frozen=True)
class GateRun:
    options: CompareOptions | AgainstOptions
    stack: contextlib.ExitStack | None = None   # holds the base tree's temporary folder for the whole run
    base_results: object = None
    pr_results: object = None
    threshold: object = None
    host_threshold: object = None                # the rule for host time per call (bench --against)
    rules: dict = field(default_factory=dict)
    noise: dict = field(default_factory=dict)
    notes: tuple = ()
    device: object = None
    blocks: object = None
    out: Path | None = None
    base: object = None                          # the materialized base tree
    candidate: object = None                     # the materialized pull-request tree (--candidate), else None
    policy: object = None                        # harness.gate.model.PolicyReview
    scan: tuple = ()                             # harness.gate.model.Finding of the PR's kernel modules
    expected: dict = field(default_factory=dict)  # harness.gate.integrity.fingerprints, taken before any import
    pr_paths: tuple = ()
    pr_specs: dict = field(default_factory=dict)
    base_specs: dict = field(default_factory=dict)
    plan: object = None
    tasks: tuple = ()
    ceilings: object = None
    environment: dict = field(default_factory=dict)
    found: dict = field(default_factory=dict)     # task index -> the case's comparison fields
    comparison: object = None
    code: int = 0
    written: dict = field(default_factory=dict)


def number(text: str, name: str, lo: float, hi: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"{name}: expected a number, got {text!r}") from None
    if not lo <= value < hi:
        raise BadInput(f"{name}: expected a number in [{lo:g}, {hi:g}), got {text}")
    return value


def read_noise(path) -> tuple[dict, tuple[str, ...]]:
    from harness.gate.calibration import CalibrationError, load_noise

    if not path:
        return {}, ()
    try:
        return load_noise(path), (f"Minimum effects raised to each case's A/A spread from {path}.",)
    except CalibrationError as exc:
        raise BadInput(str(exc)) from None


def _threshold(kind: str, calibration: str | None = None):
    """The default rule: --calibration, else the project's gate policy (its calibration, its minimum effect)."""
    from harness.config import load_config
    from harness.gate.calibration import CalibrationError, default_threshold

    policy = load_config().gate
    try:
        return default_threshold(kind, calibration or policy.calibration, policy.min_effect)
    except CalibrationError as exc:
        raise BadInput(str(exc)) from None


def _host_threshold():
    """The rule for host time per call: the project's calibration file's host entry, else the default."""
    from harness.config import load_config
    from harness.gate.calibration import CalibrationError, host_threshold

    try:
        return host_threshold(load_config().gate.calibration)
    except CalibrationError as exc:
        raise BadInput(str(exc)) from None


# ----------------------------------------------------------------------------- compare (stored runs)

def load_runs(run: GateRun) -> GateRun:
    from harness.results.load import load_results
    from harness.results.model import ResultsError

    try:
        base, pr = load_results(run.options.base), load_results(run.options.pr)
    except ResultsError as exc:
        raise BadInput(str(exc)) from None
    return replace(run, base_results=base, pr_results=pr)


def thresholds(run: GateRun) -> GateRun:
    """The calibrated minimum effect, or the options' own; else each kernel's [gate] rule from its spec."""
    from harness.gate.calibration import with_options
    from harness.gate.model import STORED

    o = run.options
    min_effect = number(o.min_effect, "--min-effect", 0.0, 1.0) if o.min_effect is not None else None
    floor = number(o.floor_us, "--floor-us", 0.0, float("inf")) if o.floor_us is not None else None
    threshold = _threshold(STORED, o.calibration)
    if min_effect is not None or floor is not None:
        threshold, rules = with_options(threshold, min_effect, floor), {}
    else:
        rules = spec_rules(o.specs_dir, {c.kernel for c in run.pr_results.cases}, threshold)
    noise, notes = read_noise(o.noise)
    return replace(run, threshold=threshold, rules=rules, noise=noise, notes=notes)


def spec_rules(specs_dir, kernels, threshold) -> dict:
    """Each kernel's [gate] rule from its spec, where the spec is here and loads."""
    from harness.gate.calibration import for_spec
    from harness.spec.load import load
    from harness.spec.schema import SpecError
    from harness.spec.select import spec_folders

    rules, folders = {}, spec_folders(specs_dir)
    for k in sorted(kernels):
        path = next((f / f"{k}.toml" for f in folders if (f / f"{k}.toml").is_file()), None)
        if path is not None:
            try:
                rules[k] = for_spec(threshold, load(path))
            except SpecError:
                continue  # a spec that does not load here sets no rule; compare needs only the results
    return rules


def compare(run: GateRun) -> GateRun:
    from harness.gate.compare import Refused, compare_results

    o = run.options
    try:
        cmp = compare_results(run.base_results, run.pr_results, base_source=o.base, pr_source=o.pr,
                              threshold=run.threshold, force=o.force, noise=run.noise, provider=o.provider,
                              spec_rules=run.rules)
    except Refused as exc:
        raise BadInput(str(exc)) from None
    if run.notes:
        cmp = replace(cmp, notes=cmp.notes + run.notes)
    return replace(run, comparison=cmp, out=Path(o.out) if o.out else Path(o.pr).parent)


def write(run: GateRun) -> GateRun:
    """compare.md, compare.json and the plot (noise.json after an A/A run), and the verdicts' exit code."""
    from harness.gate.calibration import noise_doc
    from harness.gate.verdict import exit_code
    from harness.report.compare import write_comparison
    from harness.results.io import atomic_write_text

    cmp = run.comparison
    code = exit_code([c.verdict for c in cmp.cases])
    paths = write_comparison(cmp, run.out, code)
    if cmp.aa:  # an A/A run measured the noise floor: the next run may read it with --noise
        paths["noise"] = run.out / "noise.json"
        doc = noise_doc(cmp.cases, cmp.kind, f"{cmp.base.commit} vs {cmp.pr.commit}")
        atomic_write_text(paths["noise"], json.dumps(doc, indent=1, allow_nan=False) + "\n")
    return replace(run, code=code, written=paths)


def summary(run: GateRun) -> list[str]:
    from harness.report.compare import summary_line

    cmp = run.comparison
    lines = [f"merge gate ({cmp.kind}): {summary_line(cmp.cases)}"]
    lines += [f"{c.verdict}: {c.kernel} {c.dtype} {c.case_id}{' (host time per call)' if c.metric == 'host' else ''}"
              f": {c.reason or f'ratio {c.ratio:.4f}'}" for c in cmp.cases if c.failing]
    if cmp.policy is not None and cmp.policy.changes:
        lines.append(f"policy: {len(cmp.policy.changes)} change(s) of policy-carrying spec fields, "
                     + ("applied (accepted)" if cmp.policy.applied else "not applied: the base's values judged"))
    new = sum(not f.in_base for f in cmp.scan)
    if new:
        lines.append(f"static scan: {new} new finding(s) in the pull request's kernel modules (compare.md)")
    return lines + ["wrote " + ", ".join(str(p) for p in run.written.values())]


COMPARE_STEPS = (load_runs, thresholds, compare, write)


# ----------------------------------------------------------------------------- bench --against REF

def block_config(o: AgainstOptions, device):
    from harness.gate.interleave import BlockConfig

    if o.method in ("cupti", "graph"):
        raise BadInput(f"--method {o.method}: bench --against times with CUDA events (or host); use auto, events "
                       "or host")
    extra = {k: getattr(o, k) for k in ("blocks", "samples") if getattr(o, k)}
    try:
        return BlockConfig(budget_s=o.timeout or (10.0 if device.is_gpu else 2.0), cold=not o.warm,
                           method="host" if o.method == "host" else "events", **extra)
    except ValueError as exc:
        raise BadInput(f"bench --against: {exc}") from None


def configure(run: GateRun) -> GateRun:
    """The device, the block schedule, the in-process threshold and the A/A noise, before any git or import."""
    from harness.bench.plan import default_out_dir
    from harness.gate.model import IN_PROCESS
    from harness.spec.imports import use_interpreter_if_no_gpu
    from harness.target.device import detect

    use_interpreter_if_no_gpu()
    o, device = run.options, detect()
    if o.candidate is not None and o.isolate is False:
        raise BadInput("--candidate --no-isolate: a pull request's kernels run only in worker processes, never in "
                       "the process that decides")
    noise, notes = read_noise(o.noise)
    return replace(run, device=device, blocks=block_config(o, device), threshold=_threshold(IN_PROCESS),
                   host_threshold=_host_threshold(), noise=noise, notes=notes,
                   out=Path(o.out) if o.out else default_out_dir(device) / "gate")


def materialize(run: GateRun) -> GateRun:
    """The base ref's kernels and specs in a temporary folder: a typo in the ref is one line, before any spec
    or kernel is imported."""
    from harness.config import load_config
    from harness.gate.basetree import GitError, repo_root
    from harness.gate.basetree import materialize as take
    from harness.spec.select import spec_folders

    tmp = run.stack.enter_context(tempfile.TemporaryDirectory(prefix="kh-gate-"))
    try:
        base = take(run.options.against, repo_root(Path.cwd()), Path(tmp), spec_folders(run.options.specs_dir),
                    load_config())
    except GitError as exc:
        raise BadInput(str(exc)) from None
    return replace(run, base=base)


def take_candidate(run: GateRun) -> GateRun:
    """With ``--candidate REF``: the pull request's kernels and specs, as the base's are taken (its harness,
    pyproject.toml and anything else it holds are never read)."""
    from harness.config import load_config
    from harness.gate.basetree import GitError, repo_root
    from harness.gate.basetree import materialize as take
    from harness.spec.select import spec_folders

    if run.options.candidate is None:
        return run
    tmp = run.stack.enter_context(tempfile.TemporaryDirectory(prefix="kh-gate-pr-"))
    try:
        tree = take(run.options.candidate, repo_root(Path.cwd()), Path(tmp), spec_folders(run.options.specs_dir),
                    load_config(), prefix="kh_pr", option="--candidate")
    except GitError as exc:
        raise BadInput(str(exc)) from None
    aa = tree.digest == run.base.digest
    return replace(run, candidate=tree, base=replace(run.base, aa=aa))


def load_sides(run: GateRun) -> GateRun:
    """Both sides' specs read as data: nothing is imported here."""
    from harness.gate import ab
    from harness.spec.select import load_specs, spec_paths

    o = run.options
    pr_paths = spec_paths([], run.candidate.specs_dir if run.candidate else o.specs_dir, o.kernels)
    pr_specs = {s.name: s for s in load_specs(pr_paths, bind=False)}
    base_specs, problems = ab.load_base_specs(run.base, set(pr_specs) if o.kernels else None)
    plan = ab.plan_pairs(pr_specs, base_specs, _dtypes(o.dtypes), problems, o.modes)
    return replace(run, pr_paths=tuple(pr_paths), pr_specs=pr_specs, base_specs=base_specs, plan=plan)


def _dtypes(dtypes: tuple[str, ...]) -> tuple[str, ...]:
    return () if dtypes == ("all",) else (dtypes or ("bf16",))


def _pr_tree(run: GateRun):
    """(commit, dirty, module roots, kernel folders by package) of the PR side: the candidate, or the working
    tree."""
    from harness.config import load_config
    from harness.gate.basetree import GitError, git, repo_root

    if run.candidate is not None:
        c = run.candidate
        return c.sha, False, (Path(c.root, c.package),), dict(zip(c.packages, c.kernel_folders(), strict=True))
    config = load_config()
    try:
        repo = repo_root(Path.cwd())
        sha = git(repo, "rev-parse", "HEAD")
        dirty = bool(git(repo, "status", "--porcelain", "--", *map(str, (*config.kernels, *config.specs))))
    except GitError:
        sha, dirty = "", True
    return sha, dirty, (*config.import_roots, Path.cwd()), {config.package(k): Path(k) for k in config.kernels}


def review_policy(run: GateRun) -> GateRun:
    """The pull request's changes to policy-carrying spec fields (harness.gate.policy), and whether they apply:
    only with ``--accept-policy`` naming the PR side's exact commit."""
    from harness.gate.policy import review

    sha, dirty, pr_roots, _ = _pr_tree(run)
    both = {k: (run.base_specs[k], run.pr_specs[k]) for k in set(run.base_specs) & set(run.pr_specs)}
    policy = review(both, run.plan.new_kernels, accept_sha=run.options.accept_policy, candidate_sha=sha,
                    dirty=dirty, base_roots=(Path(run.base.root, run.base.package),), pr_roots=pr_roots)
    return replace(run, policy=policy)


def scan_kernels(run: GateRun) -> GateRun:
    """The static scan of the PR side's kernel modules (ast, no import), each finding marked when the base has it."""
    from harness.gate.scan import compare_scans, scan_folders

    *_, folders = _pr_tree(run)
    base = scan_folders(dict(zip(run.base.packages, run.base.kernel_folders(), strict=True)))
    return replace(run, scan=compare_scans(scan_folders(folders), base))


def pair(run: GateRun) -> GateRun:
    """One task per (kernel, case, dtype) both sides have; nothing to compare is bad input. The tripwire's
    fingerprints are taken here, before any kernel module is imported."""
    from harness.gate import ab
    from harness.gate.integrity import fingerprints
    from harness.gate.verdict import CONFIDENCE
    from harness.spec.imports import module_available

    plan, o = run.plan, run.options
    if not (plan.pairs or plan.new_kernels or plan.removed_kernels):
        why = "; ".join(plan.unmatched[:3]) or "check --kernel and --dtype"
        raise BadInput(f"bench --against {o.against}: nothing to compare ({why})")
    roots = [run.base.root] + ([run.candidate.root] if run.candidate else [])
    if module_available("triton"):
        import triton  # noqa: F401 - the worker imports it before any task (init_worker): both see its effects
    expected = fingerprints()
    tasks = ab.case_tasks(plan, roots, seed=o.seed, provider=o.providers[0] if o.providers else None,
                          blocks=run.blocks, default=run.threshold, noise=run.noise, confidence=CONFIDENCE,
                          pr_policy=run.policy.applied if run.policy else False, expected=expected,
                          host=run.host_threshold)
    return replace(run, tasks=tuple(tasks), expected=expected)


def _isolate(run: GateRun) -> bool:
    """Worker processes, on a CPU too, so the process that decides imports no kernel; ``--no-isolate`` (never
    with --candidate) runs the cases here, for debugging."""
    return True if run.candidate is not None or run.options.isolate is None else run.options.isolate


def measure_machine(run: GateRun) -> GateRun:
    from harness.timing.ceilings import measure_ceilings
    from harness.timing.environment import collect_environment

    torch_device = run.device.torch_device
    ceilings = measure_ceilings(torch_device, refresh=run.options.refresh_ceilings)
    environment = collect_environment(device=torch_device, spec_paths=list(run.pr_paths), seed=run.options.seed)
    return replace(run, ceilings=ceilings, environment=environment)


def time_pairs(run: GateRun) -> GateRun:
    from harness.gate import ab
    from harness.workers.pool import maybe_pool

    found: dict[int, dict] = {}
    with maybe_pool(_isolate(run)) as pool:  # after the ceilings, as in bench
        for i, d in ab.run_tasks(list(run.tasks), pool):
            found[i] = d
            _progress(len(found), len(run.tasks), d)
    return replace(run, found=found)


def judge(run: GateRun) -> GateRun:
    """The comparison record: each case's verdict with its roofline, the settings and provenance."""
    from harness.gate import ab
    from harness.gate.verdict import CONFIDENCE

    found, o = run.found, run.options
    plausible = run.device.is_gpu and run.blocks.cold
    specs = run.pr_specs if run.policy and run.policy.applied else run.base_specs  # the roofline model in force
    records = []
    for i in range(len(run.tasks)):  # each case's device row, then its host-time row when that was judged
        records.append(ab.record(found[i], specs[found[i]["kernel"]], run.ceilings, plausible))
        host = ab.host_record(found[i])
        records += [host] if host is not None else []
    timed = sorted({d["method"] for d in found.values() if d.get("method")})
    settings = {**dataclasses.asdict(run.blocks), "timed with": ", ".join(timed) or "nothing timed",
                "isolate": _isolate(run)}
    kernels = set(run.pr_specs) if o.kernels else set(run.pr_specs) | set(run.base_specs)
    notes = run.notes + _trust_notes(run)
    cmp = ab.comparison(run.plan, records, run.base, run.environment, kernels, default=run.threshold,
                        confidence=CONFIDENCE, settings=settings, notes=notes, candidate=run.candidate)
    return replace(run, comparison=replace(cmp, policy=run.policy, scan=run.scan))


def _trust_notes(run: GateRun) -> tuple[str, ...]:
    if run.candidate is None:
        return ()
    c, here = run.candidate, run.environment.get("git_commit") or "unknown commit"
    return (f"Trusted run: the harness, its policy and its calibration are this checkout's ({str(here)[:12]}); "
            f"the pull request contributes the kernels and specs of {c.sha[:12]}, imported only in worker processes.",)


AGAINST_STEPS = (configure, materialize, take_candidate, load_sides, review_policy, scan_kernels, pair,
                 measure_machine, time_pairs, judge, write)


def run_compare(options: CompareOptions, *, trace: bool = False) -> GateRun:
    return execute(COMPARE_STEPS, GateRun(options), trace=trace)


def run_against(options: AgainstOptions, *, trace: bool = False) -> GateRun:
    with contextlib.ExitStack() as stack:
        return execute(AGAINST_STEPS, GateRun(options, stack=stack), trace=trace)


def _progress(i: int, total: int, d: dict) -> None:
    ratio = d.get("ratio")
    what = f"{100 * (ratio - 1):+.2f}%" if isinstance(ratio, float) and ratio == ratio else d.get("reason", "")
    host = d.get("host")
    if host and isinstance(host.get("ratio"), float) and host["ratio"] == host["ratio"]:
        what += f"; host per call {host['verdict']} {100 * (host['ratio'] - 1):+.2f}%"
    mode = "" if d.get("mode", "fwd") == "fwd" else f" {d['mode']}"
    print(f"[{i}/{total}] {d['kernel']} {d['dtype']} {d['case_id']}{mode}: {d['verdict']} {what} "
          f"({d.get('blocks', 0)} block pairs, {d.get('wall_s', 0.0):.1f} s)", file=sys.stderr, flush=True)
