"""One case of ``bench --against``: both sides' providers checked, then timed interleaved on this device.

Runs in a worker process (one per GPU, so a crash or hang fails this case only; with ``--candidate`` always)
or in the caller's. Only plain data crosses: spec paths, names, numbers in; a dict of
:class:`CaseComparison` fields out (the parent adds the roofline and decides nothing else here). The PR's
provider is checked against the base's reference with the base's tolerances and waivers
(harness.gate.policy.effective, unless the pull request's policy was accepted), exactly as a normal benchmark
checks it (harness.bench.run.verify: the generated tests' checks at the bench case): a wrong candidate fails
the gate whatever its speed, and is never timed. The tripwire (harness.gate.integrity) runs before the
kernels are imported, after each side's import and checks, and after the timing.
"""

from __future__ import annotations

import sys

from harness.gate.interleave import BlockConfig, make_timer, measure_ab, measure_host_ab
from harness.gate.model import Threshold
from harness.gate.verdict import case_seed, decide, spread


class _SideError(Exception):
    def __init__(self, side: str, exc: Exception):
        super().__init__(f"{side}: {type(exc).__name__}: {_first_line(exc)}")
        self.side = side


class _SideWrong(_SideError):
    """A side's timed calls gave wrong outputs (harness.correctness.checks.TimedCheck)."""


class _SideCheck:
    """One side's re-check of its timed calls, its failure tagged with the side (a no-op without a check)."""

    def __init__(self, check, side: str):
        self.check, self.side = check, side

    def before(self) -> None:
        self._tagged("before")  # a probe of new input values is checked here, before the next sample

    def verify(self) -> None:
        self._tagged("verify")

    def _tagged(self, step: str) -> None:
        from harness.correctness.registry import CheckFailure

        if self.check is None:
            return
        try:
            getattr(self.check, step)()
        except CheckFailure as exc:
            raise _SideWrong(self.side, exc) from exc


def _tripwire(expected: dict | None, when: str, side: str) -> str:
    """'' while the harness's timing and checking code is what the deciding process fingerprinted; else the
    case's reason, and this worker retires (its state is the kernels' now)."""
    from harness.gate.integrity import changed
    from harness.workers.child import retire

    lines = changed(expected) if expected else []
    if not lines:
        return ""
    retire()
    return (f"{side}: the harness's timing or checking code changed {when}: " + "; ".join(lines[:3])
            + (f"; and {len(lines) - 3} more" if len(lines) > 3 else ""))[:500]


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def _load(path: str):
    from harness.spec.load import load_cached

    return load_cached(path)


def _provider(spec, device, name: str | None):
    from harness.target.providers import providers_for
    from harness.target.resolve import resolve

    provs = providers_for(spec, device, resolve(spec, device))
    found = [p for p in provs if (p.name == name if name else p.role == "candidate")]
    if not found:
        raise LookupError(f"no provider {name or 'candidate'} (has {', '.join(p.name for p in provs)})")
    return found[0]


def _tagged(fn, kwargs: dict, side: str):
    def call():
        try:
            return fn(**kwargs)
        except Exception as exc:  # which side broke, for the case's one line
            raise _SideError(side, exc) from exc
    return call


def _same_arguments(pr_spec, base_spec, pr_case, base_case, dtype: str) -> bool:
    """The two sides are called with the same names, shapes, dtypes and params: they can share tensors."""
    from harness.correctness.args import full_env, shape_of, tensor_dtype

    try:
        envs = full_env(pr_spec, pr_case, dtype), full_env(base_spec, base_case, dtype)
        sides = [({t.name: (shape_of(t, env), tensor_dtype(t, dtype), t.output, t.inplace) for t in spec.tensors},
                  {n: p(env) for n, p in spec.params.items()})
                 for spec, env in zip((pr_spec, base_spec), envs, strict=True)]
    except Exception:  # a base spec this code cannot read the same way: give it its own tensors
        return False
    return sides[0] == sides[1]


def run_ab_case(*, pr_spec_path: str, base_spec_path: str, roots: list, case_id: str, dtype: str, seed: int,
                provider: str | None, blocks: dict, threshold: dict, noise: float | None, confidence: float,
                pr_policy: bool = False, expected: dict | None = None, host_threshold: dict | None = None,
                mode: str = "fwd") -> dict:
    """The comparison of one bench case, as a dict of CaseComparison fields without the roofline ones.
    ``roots``: the module roots of the materialized trees (kh_base_<sha>, kh_pr_<sha>); ``pr_policy``: judge the
    PR side by its own spec's policy (accepted), else by the base's; ``expected``: the deciding process's
    harness.gate.integrity.fingerprints; ``host_threshold``: the rule for host time per call (a "host" entry
    of the result, judged after the device time; None: host time is not judged); ``mode``: the pass timed
    (harness.bench.modes), a bwd or full case timed and re-checked as ``bench --mode`` does it."""
    for root in roots:
        if root not in sys.path:
            sys.path.append(root)
    from harness.bench.backward import backward_job
    from harness.bench.dispatch import gpu_identity
    from harness.bench.modes import no_backward
    from harness.bench.plan import Job
    from harness.bench.run import timed_check, verify
    from harness.correctness.args import make_args
    from harness.correctness.checks import ReferenceCache
    from harness.gate.policy import effective
    from harness.results.io import finite_json
    from harness.target.device import detect
    from harness.timing.memory import peak_bytes
    from harness.timing.sampler import OverheadMismeasured

    pr_spec, base_spec, device = _load(pr_spec_path), _load(base_spec_path), detect()
    pr_case = next(c for c in pr_spec.cases["bench"] if c.id == case_id)
    base_case = next(c for c in base_spec.cases["bench"] if c.id == case_id)
    index, uuid = gpu_identity(device.torch_device)
    rule = Threshold(**threshold)
    out = dict(kernel=pr_spec.name, dtype=dtype, case_id=case_id, shape=pr_case.values, headline=pr_case.headline,
               verdict="NOT-COMPARED", reason="", base_provider="", pr_provider="", base_median_us=None,
               pr_median_us=None, ratio=None, ratio_lo=None, ratio_hi=None, effect=None, threshold=threshold,
               noise=noise, base_spread=None, pr_spread=None, blocks=0, stop="", dropped=0, gpu_index=index,
               gpu_uuid=uuid, wall_s=0.0, base_blocks_us=[], pr_blocks_us=[], mode=mode)
    tampered = _tripwire(expected, "before this case's kernels were imported", "PR")
    if tampered:
        return {**out, "verdict": "WRONG", "reason": tampered}
    judged = {"PR": pr_spec if pr_policy else effective(pr_spec, base_spec), "base": base_spec}
    fns, jobs, refs = {}, {}, {"PR": ReferenceCache(), "base": ReferenceCache()}
    checks = {}  # a bwd or full side's re-check, made with its timed call (harness.bench.backward)
    for side, spec, case in (("PR", pr_spec, pr_case), ("base", base_spec, base_case)):
        failing = "WRONG" if side == "PR" else "ERROR"
        try:
            prov = _provider(spec, device, provider)  # the side's own providers, judged by the policy in force
            out["pr_provider" if side == "PR" else "base_provider"] = prov.name
            if not prov.runnable:
                return {**out, "verdict": "NOT-COMPARED", "reason": f"{side} {prov.name}: {prov.reason}"}
            fn = prov.load(spec)
            tampered = _tripwire(expected, f"when its {prov.name} was imported", side)
            if tampered:
                return {**out, "verdict": failing, "reason": tampered}
            jobs[side] = Job(judged[side], case, dtype, prov, mode)
            if mode == "fwd":
                wrong = verify(jobs[side], fn, device, refs[side], seed)
            elif missing := no_backward(judged[side], prov, mode):
                return {**out, "verdict": "NOT-COMPARED", "reason": f"{side}: {missing}"}
            else:  # the timed call is the backward pass (and the forward, for full), checked before it is timed
                fn, checks[side], wrong = backward_job(jobs[side], device, refs[side], seed)
            tampered = _tripwire(expected, f"while its {prov.name} was checked", side)
            if tampered:
                return {**out, "verdict": failing, "reason": tampered}
        except Exception as exc:  # one side's failure is this case's outcome, never the run's
            verdict = "ERROR" if side == "PR" else "NOT-COMPARED"
            return {**out, "verdict": verdict, "reason": f"{side}: {type(exc).__name__}: {_first_line(exc)}"}
        if wrong:
            verdict = "WRONG" if side == "PR" else "NOT-COMPARED"
            return {**out, "verdict": verdict,
                    "reason": f"{side} {prov.name} failed the correctness check: {wrong}"[:500]}
        fns[side] = fn
    if mode == "fwd":
        # Both sides get the very same tensors when their specs declare the same arguments: on the H200, two
        # identical kernels given separately allocated inputs differed by up to 15 % at decode sizes, every time
        # (where the buffers landed, not the code). Shared buffers leave the code as the only difference.
        args = {"PR": make_args(pr_spec, pr_case, dtype, device.torch_device, seed)}
        same = _same_arguments(pr_spec, base_spec, pr_case, base_case, dtype)
        args["base"] = args["PR"] if same else make_args(base_spec, base_case, dtype, device.torch_device, seed)
        # Each side's timed calls are re-checked against its reference: outputs poisoned before every sample, a
        # block's last call compared, so a replayed result or work left on another stream is WRONG, not FASTER.
        checks = {side: timed_check(jobs[side], args[side], device, refs[side], seed) for side in ("PR", "base")}
        fns = {side: _tagged(fns[side], args[side].kwargs(), side) for side in ("PR", "base")}
        fns = {side: checks[side].wrap(fn) if checks[side] else fn for side, fn in fns.items()}
    else:  # each side's own gradient buffers: a backward's arguments are its grad spec's, made with its pass
        fns = {side: _tagged(fns[side], {}, side) for side in ("PR", "base")}

    key_seed = case_seed((pr_spec.name, case_id, dtype))

    def judge(base_blocks, pr_blocks):
        return decide(base_blocks, pr_blocks, rule, paired=True, noise=noise, confidence=confidence, seed=key_seed)

    cfg = BlockConfig(**blocks)
    host, failure = None, None
    try:
        timer = make_timer(fns["base"], fns["PR"], device.torch_device, cfg)
        run = measure_ab(fns["base"], fns["PR"], device.torch_device, cfg, judge, timer=timer,
                         outputs=(_SideCheck(checks["base"], "base"), _SideCheck(checks["PR"], "PR")))
        if host_threshold is not None and cfg.host_blocks:
            host = _host(fns, device.torch_device, cfg, Threshold(**host_threshold), timer, confidence, key_seed)
        # one more call a side, as the bench measures it: what the call needs beyond what was allocated before
        peaks = {side: peak_bytes(fns[side], device.torch_device) for side in ("base", "PR")}
    except (OverheadMismeasured, _SideError) as exc:  # answered after the tripwire: a patched clock or check
        failure = exc                                  # can make a side fail or the samples read below zero
    tampered = _tripwire(expected, "while both sides were timed", "PR")  # patched by a call: the PR's to explain
    if tampered:
        return {**out, "verdict": "WRONG", "reason": tampered}
    if failure is not None:  # a side's failure is that side's; the harness's measure failing is neither's
        side = getattr(failure, "side", None)
        verdict = "NOT-COMPARED" if side != "PR" else "WRONG" if isinstance(failure, _SideWrong) else "ERROR"
        return {**out, "verdict": verdict, "reason": f"while timing, {failure}"}
    d = run.decision
    stop = {"budget": "time budget spent", "max-blocks": "block limit reached"}.get(run.stop, "")
    base_all = [v for b in run.base_blocks for v in b]
    pr_all = [v for b in run.pr_blocks for v in b]
    reason = f"still inconclusive: {stop}" if d.verdict == "INCONCLUSIVE" else ""
    if note := run.event_overhead_recheck:  # how sampling went: the two measures disagreed
        first, again, used = (note[k] for k in ("event_overhead_first_us", "event_overhead_again_us",
                                                "event_overhead_us"))
        reason = "; ".join(filter(None, (reason, f"the empty event pair's cost read {first:.2f} us before the samples "
                                         f"and {again:.2f} us after: the smaller, {used:.2f} us, is subtracted from "
                                         "both sides")))
    return {**out, "verdict": d.verdict, "reason": reason, "base_median_us": d.base_median_us,
            "pr_median_us": d.pr_median_us, "ratio": d.ratio,
            "ratio_lo": finite_json(d.lo), "ratio_hi": finite_json(d.hi), "effect": d.effect,
            "base_spread": spread(base_all), "pr_spread": spread(pr_all), "blocks": d.blocks, "stop": run.stop,
            "dropped": run.dropped, "wall_s": run.wall_s, "method": run.method,
            "base_blocks_us": [list(b) for b in run.base_blocks], "pr_blocks_us": [list(b) for b in run.pr_blocks],
            "base_peak_mem_bytes": peaks["base"], "pr_peak_mem_bytes": peaks["PR"], **({"host": host} if host else {})}


def _host(fns: dict, device, cfg: BlockConfig, rule: Threshold, timer, confidence: float, seed: int) -> dict:
    """Host time per call of both sides, interleaved and judged by its own rule (no A/A noise file covers it)."""
    from harness.results.io import finite_json

    def judge(base_blocks, pr_blocks):
        return decide(base_blocks, pr_blocks, rule, paired=True, confidence=confidence, seed=seed)

    run = measure_host_ab(fns["base"], fns["PR"], device, cfg, judge, timer)
    d = run.decision
    base_all = [v for b in run.base_blocks for v in b]
    pr_all = [v for b in run.pr_blocks for v in b]
    stop = {"budget": "time budget spent", "max-blocks": "block limit reached"}.get(run.stop, "")
    return {"verdict": d.verdict, "reason": f"still inconclusive: {stop}" if d.verdict == "INCONCLUSIVE" else "",
            "base_median_us": d.base_median_us, "pr_median_us": d.pr_median_us, "ratio": d.ratio,
            "ratio_lo": finite_json(d.lo), "ratio_hi": finite_json(d.hi), "effect": d.effect,
            "threshold": {"relative": rule.relative, "floor_us": rule.floor_us, "source": rule.source},
            "base_spread": spread(base_all), "pr_spread": spread(pr_all), "blocks": d.blocks, "stop": run.stop,
            "wall_s": run.wall_s, "method": run.method,
            "base_blocks_us": [list(b) for b in run.base_blocks], "pr_blocks_us": [list(b) for b in run.pr_blocks]}


