#!/usr/bin/env python3
"""How good is the merge gate's verdict on this GPU? A/A false alarms, planted slowdowns, calibration, wall time.

One process (plus one child for the cross-process A/A), the gate's own code: harness.gate.interleave times
base and PR in ABBA blocks, harness.gate.verdict judges. Every kernel in specs/ at its bench shapes, bf16:
1. A/A: the same kernel source loaded twice (a copy under its own module root, as ``bench --against`` loads
   a base) against itself, --aa-reps passes over every case with the gate's adaptive sampling at the
   thresholds in force (harness/gate/calibration.json, else the policy default). Rates of SLOWER and FASTER.
   Wall time of a pass = what a full gate run over these cases costs in timing (first pass: with warm-up).
2. Calibration from the A/A spread (harness.gate.calibration.derive): relative effect and absolute floor,
   written to OUT/calibration.json (copy it to harness/gate/calibration.json to ship it).
3. Planted slowdowns, honest ones: both sides get a trailing torch.cuda._sleep kernel (so both pay its
   launch), the PR's spins longer by X% of the base side's measured median (cycles from the spin's measured
   clock); the realized slowdown (median of the reps' ratios) is reported next to the nominal one. 10% and 5%
   on large shapes of >= 2 kernels, 10% at decode shapes (median < 10 us), at the derived thresholds.
4. Cross-process A/A: this process and a child each take one stored-bench-like measurement of every case
   (harness.timing.engine.measure); the stored-runs comparison of the two gives the cross-run drift and
   threshold, and shows how in-process thresholds fare on stored runs.
Writes OUT/gate_quality.json (every trial), OUT/gate_quality.md, OUT/calibration.json, OUT/aa_pass/ (the
first A/A pass as a gate comparison: compare.md, compare.json, forest plot). Usage on a GPU:
    python3 bench/gate_quality.py --out DIR            (about 3-5 minutes on an H200; --time-limit bounds it)
    TRITON_INTERPRET=1 python3 bench/gate_quality.py --smoke --out DIR    (CPU: ci shapes, eager torch)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from gate_cases import Case, aa_passes, calibration_doc, closing_lines, parsed, rates, start  # noqa: E402  (bench/, this script's folder)
from gate_cases import options as gate_options  # noqa: E402

T0 = time.monotonic()


def options(argv=None):
    p = gate_options(__doc__.splitlines()[0], (330.0, 150.0), (20, 2))
    p.add_argument("--min-aa-reps", type=int, default=10)
    p.add_argument("--child", help=argparse.SUPPRESS)   # internal: the cross-process run writes its samples here
    a = parsed(p, argv)
    a.min_aa_reps = min(a.min_aa_reps, a.aa_reps) if not a.smoke else min(2, a.aa_reps)
    return a


def left() -> float:
    return ARGS.time_limit - (time.monotonic() - T0)


# ----------------------------------------------------------------------------- setup

def config():
    from harness.gate.interleave import BlockConfig

    if ARGS.smoke:
        return BlockConfig(blocks=6, samples=4, more_blocks=2, max_blocks=12, budget_s=0.3)
    return BlockConfig()   # the gate's defaults: what the lead's numbers describe


def judge_for(rule, noise=None):
    from harness.gate.verdict import decide

    def judge(b, p):
        return decide(b, p, rule, paired=True, noise=noise)
    return judge


def trial(case: Case, fa, fb, rule, cfg, timer) -> dict:
    from harness.gate.interleave import measure_ab

    run = measure_ab(fa, fb, DEVICE.torch_device, cfg, judge_for(rule), timer=timer)
    d = run.decision
    return {"kernel": case.kernel, "case_id": case.case_id, "verdict": d.verdict, "ratio": d.ratio,
            "lo": d.lo if d.lo == d.lo else None, "hi": d.hi if d.hi == d.hi else None, "effect": d.effect,
            "base_median_us": d.base_median_us, "pr_median_us": d.pr_median_us, "blocks": d.blocks,
            "stop": run.stop, "wall_s": run.wall_s, "dropped": run.dropped,
            "base_blocks_us": _rounded(run.base_blocks), "pr_blocks_us": _rounded(run.pr_blocks)}


def _rounded(blocks) -> list:
    """Samples to 0.1 ns: the JSON of hundreds of trials stays a few MB."""
    return [[round(v, 4) for v in b] for b in blocks]


# ----------------------------------------------------------------------------- phases

def phase_aa(cases, rule_in_force, cfg, out: dict) -> None:
    from harness.gate.calibration import for_spec
    from harness.gate.interleave import make_timer

    out["aa"] = {"threshold": asdict(rule_in_force), "trials": [], "pass_wall_s": []}
    # past the minimum of passes, time is left for the rest
    aa_passes(cases, ARGS.aa_reps,
              lambda rep: time.monotonic() - T0 <= (0.45 if rep >= ARGS.min_aa_reps else 0.6) * ARGS.time_limit,
              lambda case: trial(case, case.fa, case.fb, for_spec(rule_in_force, case.spec), cfg, case.timer),
              lambda case: make_timer(case.fa, case.fb, DEVICE.torch_device, cfg), out, "A/A")


def rejudge(trials, rule_of) -> dict:
    """Rates at another threshold, on the same samples (in-sample: a sanity check, not a validation)."""
    from harness.gate.verdict import decide

    return rates([{"verdict": decide(t["base_blocks_us"], t["pr_blocks_us"], rule_of(t), paired=True).verdict}
                  for t in trials])


def sleeper(us: float):
    """A trailing spin of ``us`` microseconds: torch.cuda._sleep on a GPU, a busy loop on the CPU."""
    if DEVICE.is_gpu:
        import torch

        cycles = max(0, int(round(us * CYCLES_PER_US)))
        return lambda: torch.cuda._sleep(cycles)
    def spin():
        end = time.perf_counter() + us * 1e-6
        while time.perf_counter() < end:
            pass
    return spin


def spin_clock() -> float:
    """Cycles per microsecond of torch.cuda._sleep at working clocks, measured as the engine measures it."""
    from harness.timing.sampler import sleep_cycles_per_us

    return sleep_cycles_per_us(repeats=5)


def phase_planted(cases, rule_of, cfg, out: dict) -> None:
    from harness.gate.interleave import make_timer, measure_ab

    global CYCLES_PER_US
    CYCLES_PER_US = spin_clock() if DEVICE.is_gpu else 0.0
    measured = [c for c in cases if c.medians]
    # Large: each kernel's headline shape (its first bench shape without one), >= 30 us, three kernels.
    firsts = {}
    for c in sorted(measured, key=lambda c: (c.kernel, not c.headline)):
        firsts.setdefault(c.kernel, c)
    large = [c for c in firsts.values() if statistics.median(c.medians) >= 30.0 or ARGS.smoke][:3]
    decode = [c for c in measured if statistics.median(c.medians) < 10.0 and c not in large][:3]
    plan = [(c, x, "large") for c in large for x in (0.10, 0.05)] + [(c, 0.10, "decode") for c in decode]
    out["planted"] = []
    for case, x, kind in plan:
        if time.monotonic() - T0 > 0.8 * ARGS.time_limit:
            out["errors"].append(f"planted {case.label} +{x:.0%}: skipped, out of time")
            continue
        try:
            rule = rule_of(case)
            zero = sleeper(0.0)

            def base(fa=case.fa, zero=zero):
                fa()
                zero()
            zero_b = sleeper(0.0)

            def pr0(fb=case.fb, z=zero_b):
                fb()
                z()
            first = measure_ab(base, pr0, DEVICE.torch_device, cfg, judge_for(rule))   # the composite's median
            delta = x * first.decision.base_median_us
            extra = sleeper(delta)

            def pr(fb=case.fb, extra=extra):
                fb()
                extra()
            timer = make_timer(base, pr, DEVICE.torch_device, cfg)
            reps = []
            for _ in range(ARGS.planted_reps):
                if time.monotonic() - T0 > 0.85 * ARGS.time_limit:
                    break
                reps.append(trial(case, base, pr, rule, cfg, timer))
            realized = statistics.median(t["ratio"] for t in reps) - 1 if reps else None
            row = {"kernel": case.kernel, "case_id": case.case_id, "kind": kind, "nominal": x,
                   "base_median_us": first.decision.base_median_us, "added_us": delta, "realized": realized,
                   "reps": len(reps), **{k: v for k, v in rates(reps).items()},
                   "ratios": [t["ratio"] for t in reps], "effects": [t["effect"] for t in reps]}
            out["planted"].append(row)
            print(f"planted {case.label} +{x:.0%} ({kind}): realized {realized}, {rates(reps)}", flush=True)
        except Exception as exc:
            out["errors"].append(f"planted {case.label} +{x:.0%}: {type(exc).__name__}: {str(exc)[:300]}")


def stored_samples(cases, n: int) -> dict:
    """One stored-bench-like measurement per case: the timing engine, a fixed number of cold samples."""
    from harness.timing.engine import TimingConfig, measure

    cfg = TimingConfig(min_samples=n, max_samples=n, min_time_s=0.0, timeout_s=20.0, cold=True)
    got = {}
    for case in cases:
        try:
            got[case.label] = list(measure(case.fb, device=DEVICE.torch_device, config=cfg).samples_us)
        except Exception as exc:
            got[case.label] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return got


def phase_cross(cases, rule_in_force, out: dict) -> None:
    from harness.gate.calibration import derive
    from harness.gate.verdict import decide, split_blocks

    n = 40 if ARGS.smoke else 120
    out["cross"] = {"samples_per_run": n}
    if left() < 45.0:
        out["cross"]["skipped"] = f"{left():.0f} s left, too little for a second process"
        return
    mine = stored_samples(cases, n)
    child_file = Path(ARGS.out) / "child_samples.json"
    cmd = [sys.executable, __file__, "--out", ARGS.out, "--child", str(child_file), "--provider", ARGS.provider,
           "--specs-dir", ARGS.specs_dir] + (["--smoke"] if ARGS.smoke else [])
    start = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10.0, left() - 15.0))
    except subprocess.TimeoutExpired:
        out["cross"]["skipped"] = "the second process ran out of time"
        return
    out["cross"]["child_wall_s"] = time.monotonic() - start
    if done.returncode != 0 or not child_file.exists():
        out["cross"]["skipped"] = f"the second process failed: {done.stderr[-500:]}"
        return
    theirs = json.loads(child_file.read_text())
    child_file.unlink()
    out["cross"]["samples"] = {"this_process": mine, "second_process": theirs}
    rows = []
    for case in cases:
        a, b = mine.get(case.label), theirs.get(case.label)
        if not isinstance(a, list) or not isinstance(b, list) or not a or not b:
            continue
        d = decide(split_blocks(a, 10), split_blocks(b, 10), rule_in_force, paired=False)
        rows.append({"kernel": case.kernel, "case_id": case.case_id, "ratio": d.ratio, "lo": d.lo, "hi": d.hi,
                     "base_median_us": d.base_median_us, "verdict_at_in_process_threshold": d.verdict})
    out["cross"]["rows"] = rows
    out["cross"]["derived"] = derive([(r["base_median_us"], r["ratio"]) for r in rows])
    out["cross"]["false_alarms_at_in_process_threshold"] = sum(
        r["verdict_at_in_process_threshold"] in ("SLOWER", "FASTER") for r in rows)


# ----------------------------------------------------------------------------- outputs

def aa_comparison(cases, out: dict):
    """The first A/A pass as a gate comparison (compare.md, compare.json, forest plot) in OUT/aa_pass."""
    from harness.gate.compare import side_from_environment
    from harness.gate.model import IN_PROCESS, CaseComparison, Comparison, Threshold
    from harness.gate.verdict import spread
    from harness.report.compare import write_comparison

    first = [t for t in out["aa"]["trials"] if t["rep"] == 0]
    rule = Threshold(**out["aa"]["threshold"])
    records = []
    for t in first:
        case = next(c for c in cases if c.kernel == t["kernel"] and c.case_id == t["case_id"])
        base = [v for b in t["base_blocks_us"] for v in b]
        pr = [v for b in t["pr_blocks_us"] for v in b]
        records.append(CaseComparison(
            kernel=t["kernel"], dtype="bf16", case_id=t["case_id"], shape=case.shape, headline=False,
            verdict=t["verdict"], reason="", base_provider=ARGS.provider, pr_provider=ARGS.provider,
            base_median_us=t["base_median_us"], pr_median_us=t["pr_median_us"], ratio=t["ratio"], ratio_lo=t["lo"],
            ratio_hi=t["hi"], effect=t["effect"], threshold=rule, noise=None, base_spread=spread(base),
            pr_spread=spread(pr), base_pct_roofline=None, pr_pct_roofline=None, blocks=t["blocks"], stop=t["stop"],
            dropped=t["dropped"], gpu_index=None, gpu_uuid=None, wall_s=t["wall_s"],
            base_blocks_us=tuple(map(tuple, t["base_blocks_us"])), pr_blocks_us=tuple(map(tuple, t["pr_blocks_us"]))))
    side = side_from_environment("base", "working-tree copy (kh_aa_copy)", out["environment"], spec_sha256={})
    cmp = Comparison(IN_PROCESS, True, side, replace(side, label="PR", source="working tree"), tuple(records),
                     (), (), (), rule, 0.95, {k: v for k, v in asdict(config()).items()})
    write_comparison(cmp, Path(ARGS.out) / "aa_pass", 0)


def summary_md(out: dict) -> str:
    aa, lines = out.get("aa", {}), []
    r = aa.get("rates", {})
    lines += [f"# Gate quality on {out['environment'].get('device')} ({'smoke' if ARGS.smoke else 'full'})", "",
              f"A/A: {r.get('n')} case verdicts over {len(aa.get('pass_wall_s', []))} passes at "
              f"{aa.get('threshold')}: SLOWER {r.get('slower_rate')}, FASTER {r.get('faster_rate')}, SAME "
              f"{r.get('SAME')}, INCONCLUSIVE {r.get('INCONCLUSIVE')} (targets: SLOWER <= 1%, no FASTER beyond).",
              f"Same samples re-judged at the derived thresholds (in-sample): {out.get('aa_rejudged')}.", ""]
    walls = aa.get("pass_wall_s", [])
    if walls:
        lines += [f"Wall time of a full gate pass over {out.get('n_cases')} cases (timing only): first "
                  f"{walls[0]:.1f} s (with warm-up and compilation), later median {statistics.median(walls):.1f} s"
                  f"; setup (imports, copies, inputs) {out.get('setup_s', 0):.1f} s. Target < 300 s.", ""]
    lines += ["| planted | kind | case | base µs | realized | SLOWER | SAME | FASTER | INCONCLUSIVE | reps |",
              "|---:|:---|:---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in out.get("planted", []):
        realized = "n/a" if p["realized"] is None else f"{100 * p['realized']:+.1f}%"
        lines.append(f"| {100 * p['nominal']:.0f}% | {p['kind']} | {p['kernel']} {p['case_id']} | "
                     f"{p['base_median_us']:.2f} | {realized} | {p['SLOWER']} | {p['SAME']} | {p['FASTER']} | "
                     f"{p['INCONCLUSIVE']} | {p['reps']} |")
    cross = {k: v for k, v in out.get("cross", {}).items() if k not in ("rows", "samples")}
    lines += ["", "Targets: 10% large >= 95% SLOWER; 5% large >= 80%; 10% decode never SAME or FASTER.", "",
              f"Calibration (calibration.json): {json.dumps(out.get('calibration'))}", "",
              f"Cross-process A/A: {json.dumps(cross)}", ""]
    for r in out.get("cross", {}).get("rows", []):
        lines.append(f"- {r['kernel']} {r['case_id']}: second / first process {r['ratio']:.4f} "
                     f"({r['verdict_at_in_process_threshold']} at the in-process threshold)")
    lines.append("")
    lines += closing_lines(out, time.monotonic() - T0)
    return "\n".join(lines) + "\n"


def main() -> int:
    global DEVICE
    DEVICE, out_dir, cases, out = start(ARGS, T0, asdict(config()))
    from harness.gate.calibration import default_threshold, derive, for_spec
    from harness.gate.model import IN_PROCESS, Threshold
    from harness.gate.verdict import MIN_BLOCKS

    if ARGS.child:  # the second process of the cross-process A/A: samples only
        Path(ARGS.child).write_text(json.dumps(stored_samples(cases, 40 if ARGS.smoke else 120)))
        return 0
    try:
        in_force = default_threshold(IN_PROCESS)
        phase_aa(cases, in_force, config(), out)
        # Trials cut short by the budget (below MIN_BLOCKS) have no interval: their point is not a measurement.
        calib = derive([(t["base_median_us"], t["ratio"]) for t in out["aa"]["trials"] if t["blocks"] >= MIN_BLOCKS])
        derived = Threshold(calib["min_effect"], calib["floor_us"], "derived from this run's A/A")
        out["aa_rejudged"] = rejudge(out["aa"]["trials"], lambda t: derived)
        out["calibration"] = {"in_process": calib}
        phase_planted(cases, lambda c: for_spec(derived, c.spec), config(), out)
        phase_cross(cases, in_force, out)
        if "derived" in out.get("cross", {}):
            out["calibration"]["cross_run"] = out["cross"]["derived"]
        aa_comparison(cases, out)
    except Exception:
        out["errors"].append(traceback.format_exc()[-2000:])
    finally:
        doc = calibration_doc(out.get("calibration", {}), out["environment"],
                              out.get("aa", {}).get("rates", {}).get("n"), "A/A verdicts (bench/gate_quality.py)")
        (out_dir / "calibration.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out_dir / "gate_quality.json").write_text(json.dumps(out, separators=(",", ":"), default=str) + "\n")
        (out_dir / "gate_quality.md").write_text(summary_md(out))
        print(summary_md(out))
    return 0 if not out["errors"] else 1


ARGS = options()
DEVICE = None
CYCLES_PER_US = 0.0
if __name__ == "__main__":
    sys.exit(main())
