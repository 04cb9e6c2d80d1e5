"""``bench --against REF``: the kernels of a git ref and of the working tree (or of ``--candidate REF``), timed
interleaved on one GPU.

``load both sides -> match kernels, cases and dtypes -> one task per case -> records``. Both sides' specs are
read as data here (harness.spec.load imports nothing); their kernel modules are imported only by each case's
task (harness/gate/abcase.py), which checks and times both sides on one device; with a worker pool the cases
of a multi-GPU host spread over the GPUs, each case whole on one. Only kernels present on both sides are
compared; new and removed kernels, and cases on one side only, are listed.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.gate.basetree import BaseTree
from harness.gate.calibration import for_spec
from harness.gate.compare import side_from_environment
from harness.gate.interleave import BlockConfig
from harness.gate.model import IN_PROCESS, CaseComparison, Comparison, Threshold


@dataclass(frozen=True)
class ABPlan:
    pairs: tuple                   # (pr spec, base spec, case id, dtype, mode) per case to compare
    new_kernels: tuple[str, ...]
    removed_kernels: tuple[str, ...]
    unmatched: tuple[str, ...]


def load_base_specs(base: BaseTree, names=None) -> tuple[dict, list[str]]:
    """The base's specs by name, read as data, and a line for each that does not load."""
    from harness.spec.load import load
    from harness.spec.schema import SpecError

    specs, problems = {}, []
    for path in sorted(Path(base.specs_dir).glob("*.toml")):
        if names and path.stem not in names:
            continue
        try:
            specs[path.stem] = load(path)
        except SpecError as exc:
            problems.append(f"{path.stem}: the base spec does not load with this harness: {exc.problems[0]}")
    return specs, problems


def plan_pairs(pr_specs: dict, base_specs: dict, dtypes: tuple[str, ...], base_problems=(),
               modes: tuple[str, ...] = ()) -> ABPlan:
    """Kernels on both sides, then their bench cases (by id), dtypes and modes (those asked for, else every one
    both sides support: harness.bench.modes) on both sides."""
    from harness.bench.modes import spec_modes

    broken = {line.split(":", 1)[0] for line in base_problems}
    pairs, unmatched = [], list(base_problems)
    for name in sorted(set(pr_specs) & set(base_specs)):
        pr, base = pr_specs[name], base_specs[name]
        # the base's spec decides (policy comes from the base): a pull request that adds [distributed] to a kernel
        # is still compared, and fails there, rather than escaping the gate
        if base.distributed is not None:
            unmatched.append(f"{name}: a [distributed] kernel: the A/B timing runs in one process, not on a group "
                             "of ranks, so its cases are not compared (bench times them alone)")
            continue
        base_ids = {c.id for c in base.cases["bench"]}
        pr_ids = {c.id for c in pr.cases["bench"]}
        unmatched += [f"{name} {i}: only in the PR" for i in sorted(pr_ids - base_ids)]
        unmatched += [f"{name} {i}: only in the base" for i in sorted(base_ids - pr_ids)]
        both = [m for m in spec_modes(pr, modes) if m in spec_modes(base, modes)]
        unmatched += [f"{name} {m}: only the {'PR' if m in spec_modes(pr, modes) else 'base'} declares [backward]"
                      for m in dict.fromkeys(spec_modes(pr, modes) + spec_modes(base, modes)) if m not in both]
        wanted = [d for d in pr.dtypes if not dtypes or d in dtypes]
        for dtype in wanted:
            if dtype not in base.dtypes:
                unmatched.append(f"{name} {dtype}: the base does not declare this dtype")
                continue
            pairs += [(pr, base, c.id, dtype, m) for c in pr.cases["bench"] if c.id in base_ids for m in both]
    return ABPlan(tuple(pairs), tuple(sorted(set(pr_specs) - set(base_specs) - broken)),
                  tuple(sorted(set(base_specs) - set(pr_specs))), tuple(unmatched))


def case_tasks(plan: ABPlan, roots, *, seed: int, provider: str | None, blocks: BlockConfig, default: Threshold,
               noise: dict, confidence: float, pr_policy: bool = False, expected: dict | None = None,
               warmup_s: float = 60.0, host: Threshold | None = None):
    """One task per pair; ``roots``: the materialized trees' module roots; ``pr_policy``: the pull request's
    policy was accepted (else every rule and check is the base spec's); ``expected``: the tripwire's
    fingerprints; ``host``: the rule for host time per call (None: not judged)."""
    from harness.correctness.args import case_seed
    from harness.workers.pool import Task

    tasks = []
    for pr, base_spec, case_id, dtype, mode in plan.pairs:
        case = next(c for c in pr.cases["bench"] if c.id == case_id)
        rule = for_spec(default, pr if pr_policy else base_spec)
        kwargs = dict(pr_spec_path=str(pr.path), base_spec_path=str(base_spec.path), roots=list(roots),
                      case_id=case_id, dtype=dtype, seed=case_seed(pr, dtype, case, seed), provider=provider,
                      blocks=dataclasses.asdict(blocks), threshold=dataclasses.asdict(rule),
                      noise=noise.get((pr.name, case_id, dtype) + (() if mode == "fwd" else (mode,))),
                      confidence=confidence, pr_policy=pr_policy, expected=expected,
                      host_threshold=dataclasses.asdict(host) if host else None, mode=mode)
        # Both sides' own time limits, the sampling budgets, and the warm-up and checks of two providers.
        limit = pr.timeout_s + base_spec.timeout_s + blocks.budget_s + blocks.host_budget_s + warmup_s
        label = f"{pr.name} {dtype} {case_id}" + ("" if mode == "fwd" else f" {mode}")
        tasks.append(Task("harness.gate.abcase:run_ab_case", kwargs, label, limit))
    return tasks


def record(d: dict, spec, ceilings, judge_plausible: bool = False) -> CaseComparison:
    """A task's dict as a record, with each side's % of roofline from ``spec``'s model (the base's, unless the
    pull request's policy was accepted); with ``judge_plausible`` (cold GPU timing), a PR time that cannot be
    physical, beyond its median's 95% interval, makes the case WRONG."""
    from harness.bench.modes import mode_env, mode_spec
    from harness.bench.roofline import implausible, roofline
    from harness.timing.stats import summarize

    d = {k: v for k, v in d.items() if k not in ("method", "host")}
    case = next(c for c in spec.cases["bench"] if c.id == d["case_id"])
    mode = d.get("mode", "fwd")
    env = mode_env(spec, case, d["dtype"], mode)
    spec = mode_spec(spec, mode)  # a bwd or full row's % of roofline is its own pass's
    pct = {}
    for side in ("base", "pr"):
        median = d[f"{side}_median_us"]
        samples = [v for b in d[f"{side}_blocks_us"] for v in b]
        ci = None
        if len(samples) >= 4:
            st = summarize(samples)
            ci = (st.median_ci_lo, st.median_ci_hi)
        roof = roofline(spec, env, median, ceilings, d["dtype"], ci) if median is not None else {}
        pct[side] = roof.get("pct_roofline")
        why = implausible(median, roof, ceilings) if judge_plausible and median is not None else ""
        if side == "pr" and why and d["verdict"] not in ("WRONG", "ERROR"):
            d = {**d, "verdict": "WRONG", "reason": f"PR {d['pr_provider']}: {why}"[:500]}
    return CaseComparison(**{**d, "threshold": Threshold(**d["threshold"]) if d["threshold"] else None,
                             "base_blocks_us": tuple(tuple(b) for b in d["base_blocks_us"]),
                             "pr_blocks_us": tuple(tuple(b) for b in d["pr_blocks_us"]),
                             "base_pct_roofline": pct["base"], "pr_pct_roofline": pct["pr"]})


def host_record(d: dict) -> CaseComparison | None:
    """The host-time row of a task's dict (its ``host`` entry), or None where host time was not judged (the case
    failed first, or was not timed): the same case, ``metric="host"``, its own threshold, no roofline."""
    h = d.get("host")
    if not h:
        return None
    fields = {**h, "threshold": Threshold(**h["threshold"]),
              "base_blocks_us": tuple(tuple(b) for b in h["base_blocks_us"]),
              "pr_blocks_us": tuple(tuple(b) for b in h["pr_blocks_us"])}
    fields.pop("method", None)
    return CaseComparison(kernel=d["kernel"], dtype=d["dtype"], case_id=d["case_id"], shape=d["shape"],
                          headline=d["headline"], base_provider=d["base_provider"], pr_provider=d["pr_provider"],
                          noise=None, base_pct_roofline=None, pr_pct_roofline=None, dropped=0,
                          gpu_index=d["gpu_index"], gpu_uuid=d["gpu_uuid"], metric="host",
                          **{"mode": d.get("mode", "fwd"), **fields})


def failed(task, verdict: str, reason: str) -> dict:
    """The record of a case whose task never returned (crash, hang): the PR's fault unless shown otherwise."""
    k = task.kwargs
    return dict(kernel=Path(k["pr_spec_path"]).stem, dtype=k["dtype"], case_id=k["case_id"], shape={},
                headline=False, verdict=verdict, reason=reason[:500], base_provider="", pr_provider=k["provider"] or "",
                base_median_us=None, pr_median_us=None, ratio=None, ratio_lo=None, ratio_hi=None, effect=None,
                threshold=k["threshold"], noise=k["noise"], base_spread=None, pr_spread=None, blocks=0, stop="",
                dropped=0, gpu_index=None, gpu_uuid=None, wall_s=0.0, base_blocks_us=[], pr_blocks_us=[])


def run_tasks(tasks, pool=None, progress=None):
    """(index, dict) per task: in this process in order, or as the pool's workers finish them."""
    from harness.bench.dispatch import gpu_identity
    from harness.gate.abcase import run_ab_case

    if pool is None:
        for i, t in enumerate(tasks):
            try:
                yield i, run_ab_case(**t.kwargs)
            except Exception as exc:  # what the task itself did not catch (a spec that no longer loads, say)
                yield i, failed(t, "ERROR", f"{type(exc).__name__}: {str(exc).strip()[:300]}")
        return
    for i, outcome in pool.map_unordered(tasks):
        if outcome.status == "ok":
            d = dict(outcome.value)
            d["gpu_index"] = gpu_identity(outcome.device)[0]  # the parent's numbering of the worker's GPU
            yield i, d
        else:  # a crash or hang while both sides ran: which one is unknown, so it is the PR's to explain
            print(f"{tasks[i].label}: {outcome.error}", file=sys.stderr, flush=True)
            yield i, failed(tasks[i], "ERROR", f"{outcome.summary} (in an isolated worker)")


def comparison(plan: ABPlan, records, base: BaseTree, environment: dict, kernels, *, default: Threshold,
               confidence: float, settings: dict, notes=(), candidate: BaseTree | None = None) -> Comparison:
    """The records with both sides' provenance; spec hashes only of ``kernels`` (the ones asked for).
    ``candidate``: the pull request's tree (``--candidate``), else the PR side is the working tree."""
    if candidate is None:
        pr = side_from_environment("PR", "working tree", environment, spec_sha256={
            Path(k).name: v for k, v in environment.get("spec_sha256", {}).items()})
    else:
        pr = side_from_environment(
            "PR", f"{candidate.ref} ({candidate.sha[:12]}), git archive of its kernels and specs loaded as "
                  f"{candidate.package}", {**environment, "git_commit": candidate.sha, "git_dirty": False},
            spec_sha256={k: v for k, v in candidate.spec_sha256.items() if Path(k).stem in set(kernels)})
    base_env = {**environment, "git_commit": base.sha, "git_dirty": False}
    source = f"{base.ref} ({base.sha[:12]}), git archive of its kernels and specs loaded as {base.package}"
    b = side_from_environment("base", source, base_env, spec_sha256={
        k: v for k, v in base.spec_sha256.items() if Path(k).stem in set(kernels)})
    return Comparison(IN_PROCESS, base.aa, b, pr, tuple(records), plan.new_kernels, plan.removed_kernels,
                      plan.unmatched, default, confidence, settings, (), tuple(notes))

