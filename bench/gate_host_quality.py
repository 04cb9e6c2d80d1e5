#!/usr/bin/env python3
"""How good is the gate's verdict on host time per call? A/A false alarms, planted launcher slowdowns, calibration.

The gate's own code: harness.gate.interleave.measure_host_ab takes each side's host time per call in ABBA block
pairs (on a GPU with a spin keeping it busy, so no sample waits on the queue) and harness.gate.verdict.decide
judges, as ``bench --against`` does after the device blocks. Every spec's bench cases in bf16 (--smoke: the ci
cases on a CPU), the provider's launcher loaded twice (bench/gate_cases.py):
1. A/A: --aa-reps passes over every case at the host rule in force (harness.gate.calibration.host_threshold).
   Rates of SLOWER and FASTER: the false alarms a pull request that leaves its launcher alone would get.
2. Calibration: harness.gate.calibration.derive over the A/A trials' (base median, ratio), as the device time's;
   written to OUT/calibration.json as its ``host_in_process`` entry. To ship it, merge that entry into
   harness/gate/calibration.json (the gate takes it, never below the default of 10% and 2 us).
3. Planted launcher slowdowns, at the rule the calibration gives: the PR side busy-waits on the host after each
   call, for a share of the base's host time per call (10% and 25%) or a fixed 5 and 20 us (the Python, or the
   .item(), a pull request could add). Both sides call the wait (zero on the base side), so both pay its call.
Writes OUT/host_quality.json (every trial), OUT/host_quality.md and OUT/calibration.json. Usage on a GPU:
    python3 bench/gate_host_quality.py --out DIR        (about 2 minutes on an H100; --time-limit bounds it)
    TRITON_INTERPRET=1 python3 bench/gate_host_quality.py --smoke --out DIR     (CPU: ci shapes, eager torch)
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from gate_cases import aa_passes, calibration_doc, closing_lines, parsed, rates, start  # noqa: E402  (bench/, this script's folder)
from gate_cases import options as gate_options  # noqa: E402

T0 = time.monotonic()
SHARES = (0.10, 0.25)      # planted: a share of the base's host time per call
ADDED_US = (5.0, 20.0)     # planted: fixed microseconds per call


def options(argv=None):
    p = gate_options(__doc__.splitlines()[0], (240.0, 90.0), (10, 2))
    p.add_argument("--planted-cases", type=int, default=4, help="cases the slowdowns are planted in")
    return parsed(p, argv)


def elapsed() -> float:
    return time.monotonic() - T0


def host_wait(us: float):
    """A busy wait of ``us`` microseconds on the host clock: launcher work, nothing queued on the device."""
    def wait():
        end = time.perf_counter_ns() + int(us * 1e3)
        while time.perf_counter_ns() < end:
            pass
    return wait


def followed(fn, wait):
    def call():
        fn()
        wait()
    return call


def host_trial(case, base, pr, rule, cfg, timer, device) -> dict:
    from harness.gate.interleave import measure_host_ab
    from harness.gate.verdict import decide

    run = measure_host_ab(base, pr, device, cfg, lambda b, p: decide(b, p, rule, paired=True), timer)
    d = run.decision
    return {"kernel": case.kernel, "case_id": case.case_id, "verdict": d.verdict, "ratio": d.ratio,
            "lo": d.lo if d.lo == d.lo else None, "hi": d.hi if d.hi == d.hi else None, "effect": d.effect,
            "base_median_us": d.base_median_us, "pr_median_us": d.pr_median_us, "blocks": d.blocks,
            "stop": run.stop, "wall_s": run.wall_s, "method": run.method}


def phase_aa(cases, rule, cfg, device, out: dict) -> None:
    from harness.gate.interleave import make_timer

    out["aa"] = {"threshold": asdict(rule), "trials": [], "pass_wall_s": []}
    aa_passes(cases, ARGS.aa_reps, lambda rep: rep < 2 or elapsed() <= 0.5 * ARGS.time_limit,
              lambda case: host_trial(case, case.fa, case.fb, rule, cfg, case.timer, device),
              lambda case: make_timer(case.fa, case.fb, device, cfg), out, "host A/A")


def phase_planted(cases, rule, cfg, device, out: dict) -> None:
    """Each slowdown in the cases of the most and the least host time per call (and between), never a case A/A
    could not time."""
    from harness.gate.interleave import make_timer

    measured = sorted((c for c in cases if c.medians), key=lambda c: statistics.median(c.medians))
    step = max(1, len(measured) // max(1, ARGS.planted_cases - 1))
    chosen = []
    for c in (measured[::step][:ARGS.planted_cases - 1] + measured[-1:]) if measured else []:
        if all(c is not k for k in chosen):
            chosen.append(c)
    plan = [(c, "share", x) for c in chosen for x in SHARES] + [(c, "added", us) for c in chosen for us in ADDED_US]
    out["planted"] = []
    for case, kind, x in plan:
        if elapsed() > 0.9 * ARGS.time_limit:
            out["errors"].append(f"planted {case.label} {kind} {x:g}: skipped, out of time")
            continue
        try:
            host_us = statistics.median(case.medians)
            added = x * host_us if kind == "share" else x
            base, pr = followed(case.fa, host_wait(0.0)), followed(case.fb, host_wait(added))
            timer = make_timer(base, pr, device, cfg)
            reps = [host_trial(case, base, pr, rule, cfg, timer, device) for _ in range(ARGS.planted_reps)
                    if elapsed() < 0.95 * ARGS.time_limit]
            realized = statistics.median(t["ratio"] for t in reps) - 1 if reps else None
            out["planted"].append({"kernel": case.kernel, "case_id": case.case_id, "kind": kind, "nominal": x,
                                   "host_us": host_us, "added_us": added, "realized": realized, "reps": len(reps),
                                   **rates(reps), "ratios": [t["ratio"] for t in reps]})
            print(f"planted {case.label} +{added:.1f} us ({kind} {x:g}): realized {realized}, {rates(reps)}",
                  flush=True)
        except Exception as exc:
            out["errors"].append(f"planted {case.label} {kind} {x:g}: {type(exc).__name__}: {str(exc)[:300]}")


def summary_md(out: dict) -> str:
    aa = out.get("aa", {})
    r = aa.get("rates", {})
    medians = sorted(t["base_median_us"] for t in aa.get("trials", []) if t["base_median_us"])
    span = f"{medians[0]:.1f}-{medians[-1]:.1f} us" if medians else "n/a"
    lines = [f"# Gate quality, host time per call, on {out['environment'].get('device')} "
             f"({'smoke' if ARGS.smoke else 'full'})", "",
             f"A/A: {r.get('n')} verdicts over {len(aa.get('pass_wall_s', []))} passes of {out.get('n_cases')} "
             f"cases (host time per call {span}) at {aa.get('threshold')}: SLOWER {r.get('SLOWER')}, FASTER "
             f"{r.get('FASTER')}, SAME {r.get('SAME')}, INCONCLUSIVE {r.get('INCONCLUSIVE')}.", "",
             f"Calibration (calibration.json, `host_in_process`): {json.dumps(out.get('calibration'))}", "",
             f"Planted, judged at {out.get('planted_threshold')}:", "",
             "| added | case | host µs/call | realized | SLOWER | SAME | FASTER | INCONCLUSIVE | reps |",
             "|:---|:---|---:|---:|---:|---:|---:|---:|---:|"]
    for p in out.get("planted", []):
        what = f"{100 * p['nominal']:.0f}% ({p['added_us']:.1f} us)" if p["kind"] == "share" else \
            f"{p['added_us']:.0f} us"
        realized = "n/a" if p["realized"] is None else f"{100 * p['realized']:+.1f}%"
        lines.append(f"| {what} | {p['kernel']} {p['case_id']} | {p['host_us']:.1f} | {realized} | {p['SLOWER']} | "
                     f"{p['SAME']} | {p['FASTER']} | {p['INCONCLUSIVE']} | {p['reps']} |")
    lines += [""] + closing_lines(out, elapsed())
    return "\n".join(lines) + "\n"


def main() -> int:
    from harness.gate.interleave import BlockConfig

    cfg = BlockConfig()   # the gate's own host settings: host_blocks, host_samples, host_budget_s
    device, out_dir, cases, out = start(ARGS, T0, asdict(cfg))
    from harness.gate.calibration import HOST_KEY, derive, host_threshold
    from harness.gate.model import Threshold
    from harness.gate.verdict import MIN_BLOCKS

    try:
        phase_aa(cases, host_threshold(), cfg, device.torch_device, out)
        calib = derive([(t["base_median_us"], t["ratio"]) for t in out["aa"]["trials"] if t["blocks"] >= MIN_BLOCKS])
        out["calibration"] = {HOST_KEY: calib}
        # what the gate would use with this entry shipped: never below the default
        shipped = host_threshold(_write_calibration(out_dir, out, calib, HOST_KEY))
        rule = Threshold(shipped.relative, shipped.floor_us, "derived from this run's host A/A")
        out["planted_threshold"] = asdict(rule)
        phase_planted(cases, rule, cfg, device.torch_device, out)
    except Exception:
        out["errors"].append(traceback.format_exc()[-2000:])
    finally:
        (out_dir / "host_quality.json").write_text(json.dumps(out, separators=(",", ":"), default=str) + "\n")
        (out_dir / "host_quality.md").write_text(summary_md(out))
        print(summary_md(out))
    return 0 if not out["errors"] else 1


def _write_calibration(out_dir: Path, out: dict, calib: dict, key: str) -> Path:
    doc = calibration_doc({key: calib}, out["environment"], calib["trials"],
                          "host-time A/A verdicts (bench/gate_host_quality.py)")
    path = out_dir / "calibration.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


ARGS = options()
if __name__ == "__main__":
    sys.exit(main())
