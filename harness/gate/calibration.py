"""Where a case's minimum effect comes from, in order: an option, the spec's ``[gate]``, the calibration file,
the policy default; an A/A noise file can only raise it.

``calibration.json`` (next to this module) is written by ``bench/gate_quality.py`` from A/A runs on a GPU:
``{"in_process": {"min_effect", "floor_us"}, "cross_run": {...}, "provenance": {...}}``. Without it the
relative part is the policy default and there is no absolute floor, and the report says so. Stored runs
(two processes) drift more than one interleaved process, so they take the ``cross_run`` entry; without one
they fall back to the in-process numbers and the report warns that false alarms are likely.

Host time per call (harness/timing/launch.py) has its own rule, :func:`host_threshold`: the file's
``host_in_process`` entry when an A/A run has calibrated it (``derive`` over host-time trials), else
``HOST_MIN_EFFECT`` and ``HOST_FLOOR_US``, named as an uncalibrated default in the report.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from harness.gate.model import IN_PROCESS, CaseComparison, Threshold

# Policy, not a measurement: the smallest change worth blocking a merge for (issue 11). A calibration may
# raise it when A/A runs drift further; it never lowers it.
POLICY_MIN_EFFECT = 0.03
DECODE_US = 10.0   # "decode-sized": a median below this is dominated by fixed costs, so the floor matters
CALIBRATION_FILE = Path(__file__).with_name("calibration.json")
# Host time per call is Python and the driver on a shared CPU: scheduler and interpreter jitter, not the GPU's.
# Until an A/A run calibrates it, a change must pass 10 % and 2 us: below what the gate is for (a launcher with
# 50 us of added Python, or a .item() that waits for the GPU, at host times of 15 to 70 us per call on the H200,
# issue 29) and above a host clock's per-call jitter over the tens of calls each host sample averages.
HOST_MIN_EFFECT, HOST_FLOOR_US = 0.10, 2.0
HOST_KEY = "host_in_process"


class CalibrationError(ValueError):
    """A calibration or noise file that cannot be used; the message is one line naming the file and key."""


def _read(path: Path, what: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"{path}: cannot read the {what}: {exc.__class__.__name__}: {exc}") from None
    except ValueError as exc:
        raise CalibrationError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CalibrationError(f"{path}: expected a JSON object")
    return doc


def _fraction(value, where: str, *, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value < hi:
        raise CalibrationError(f"{where}: expected a number in [{lo:g}, {hi:g}), got {value!r}")
    return float(value)


def _entry(doc: dict, key: str, path: Path) -> tuple[float, float] | None:
    entry = doc.get(key)
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise CalibrationError(f"{path}: {key}: expected an object")
    return (_fraction(entry.get("min_effect"), f"{path}: {key}.min_effect", lo=0.0, hi=1.0),
            _fraction(entry.get("floor_us"), f"{path}: {key}.floor_us", lo=0.0, hi=math.inf))


def default_threshold(kind: str, path: Path | None = None, policy: float | None = None) -> Threshold:
    """The rule for every case whose spec sets none: calibrated when the file has it, else the policy.
    ``policy``: the project's own minimum effect (``[tool.kernel-harness.gate] min-effect``) in place of
    POLICY_MIN_EFFECT."""
    path = CALIBRATION_FILE if path is None else Path(path)
    doc = _read(path, "gate calibration") if path.exists() else {}
    where = doc.get("provenance", {}).get("summary", str(path)) if isinstance(doc.get("provenance"), dict) \
        else str(path)
    floor, named = (POLICY_MIN_EFFECT, "policy default") if policy is None else (policy, "the project's policy")
    in_process = _entry(doc, "in_process", path)
    if kind == IN_PROCESS:
        if in_process:
            return Threshold(max(floor, in_process[0]), in_process[1], f"calibrated in-process A/A ({where})")
        return Threshold(floor, 0.0, f"{named}, not calibrated (run bench/gate_quality.py)")
    cross = _entry(doc, "cross_run", path)
    if cross:
        return Threshold(max(floor, cross[0]), cross[1], f"calibrated cross-run A/A ({where})")
    base = default_threshold(IN_PROCESS, path, policy)
    return Threshold(base.relative, base.floor_us,
                     f"{base.source}; no cross-run calibration, so separate runs' drift may read as a change")


def host_threshold(path: Path | None = None) -> Threshold:
    """The rule for host time per call in an interleaved run: calibrated when the file has ``host_in_process``,
    else the documented default (never lower than it: a calibration may only raise the bar)."""
    path = CALIBRATION_FILE if path is None else Path(path)
    doc = _read(path, "gate calibration") if path.exists() else {}
    entry = _entry(doc, HOST_KEY, path)
    if entry:
        where = doc.get("provenance", {}).get("summary", str(path)) if isinstance(doc.get("provenance"), dict) \
            else str(path)
        return Threshold(max(HOST_MIN_EFFECT, entry[0]), max(HOST_FLOOR_US, entry[1]),
                         f"calibrated host-time A/A ({where})")
    return Threshold(HOST_MIN_EFFECT, HOST_FLOOR_US,
                     f"host-time default {100 * HOST_MIN_EFFECT:g}% / {HOST_FLOOR_US:g} us, not calibrated "
                     f"(no {HOST_KEY} in the calibration file)")


def for_spec(threshold: Threshold, spec) -> Threshold:
    """The spec's ``[gate]`` rule (``spec.gate``: min_effect, floor_us, reason) over the default."""
    rule = getattr(spec, "gate", None)
    if rule is None:
        return threshold
    relative = threshold.relative if rule.min_effect is None else rule.min_effect
    floor = threshold.floor_us if rule.floor_us is None else rule.floor_us
    return Threshold(relative, floor, f"spec {spec.name}: {rule.reason}")


def with_options(threshold: Threshold, min_effect: float | None, floor_us: float | None) -> Threshold:
    if min_effect is None and floor_us is None:
        return threshold
    return Threshold(threshold.relative if min_effect is None else min_effect,
                     threshold.floor_us if floor_us is None else floor_us, "command-line option")


# ----------------------------------------------------------------------------- A/A noise

def aa_spread(case: CaseComparison) -> float | None:
    """How far an A/A case's interval reached from 1: the smallest effect that run could not tell from noise."""
    if case.ratio_lo is None or case.ratio_hi is None:
        return None
    return max(case.ratio_hi - 1.0, 1.0 - case.ratio_lo, 0.0)


def noise_doc(cases, kind: str, source: str) -> dict:
    rows = [{"kernel": c.kernel, "case_id": c.case_id, "dtype": c.dtype, "spread": s, "base_median_us":
             c.base_median_us, **({} if c.mode == "fwd" else {"mode": c.mode})}
            for c in cases if c.metric == "device" and (s := aa_spread(c)) is not None]
    return {"kind": kind, "source": source, "cases": rows}


def load_noise(path) -> dict[tuple, float]:
    """(kernel, case_id, dtype) -> A/A spread from a noise.json written by an A/A run; a bwd or full row's key
    has its mode after them (CaseComparison.key)."""
    path = Path(path)
    doc = _read(path, "noise file")
    rows = doc.get("cases")
    if not isinstance(rows, list):
        raise CalibrationError(f"{path}: cases: expected a list")
    out = {}
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise CalibrationError(f"{path}: cases[{i}]: expected an object")
        for key in ("kernel", "case_id", "dtype"):
            if not isinstance(row.get(key), str):
                raise CalibrationError(f"{path}: cases[{i}].{key}: expected a string")
        mode = row.get("mode", "fwd")
        if mode not in ("fwd", "bwd", "full"):
            raise CalibrationError(f"{path}: cases[{i}].mode: expected fwd, bwd or full")
        key = (row["kernel"], row["case_id"], row["dtype"]) + (() if mode == "fwd" else (mode,))
        out[key] = _fraction(row.get("spread"), f"{path}: cases[{i}].spread", lo=0.0, hi=math.inf)
    return out


# ----------------------------------------------------------------------------- deriving a calibration

def _quantile(values: list[float], q: float) -> float:
    """The q-quantile, interpolated between order statistics (0 for no values)."""
    if not values:
        return 0.0
    v = sorted(values)
    pos = q * (len(v) - 1)
    i = int(pos)
    return v[i] if i + 1 >= len(v) else v[i] + (pos - i) * (v[i + 1] - v[i])


def derive(trials, decode_us: float = DECODE_US, quantile: float = 0.99) -> dict:
    """Minimum effect from A/A trials ``(base_median_us, ratio)``: all but the top 1 % of their deviations inside.

    relative = the 99th percentile of |ratio - 1| among cases at or above ``decode_us`` (never below the
    policy value); floor_us = the 99th percentile of |ratio - 1| x median among shorter cases, in microseconds.
    A false SLOWER then needs a whole interval beyond a point deviation that 99 % of A/A runs stay inside;
    how often that happens is what bench/gate_quality.py measures. A quantile, not the maximum, so one
    freak trial does not set the threshold (with fewer than 100 trials the two nearly coincide)."""
    trials = [(m, r) for m, r in trials if m and math.isfinite(m) and r and math.isfinite(r)]
    large = [abs(r - 1.0) for m, r in trials if m >= decode_us]
    short = [abs(r - 1.0) * m for m, r in trials if m < decode_us]
    measured = _quantile(large, quantile)
    return {"min_effect": max(POLICY_MIN_EFFECT, measured), "measured_relative": measured,
            "floor_us": _quantile(short, quantile), "max_relative": max(large, default=0.0),
            "max_floor_us": max(short, default=0.0), "quantile": quantile, "trials": len(trials),
            "large_trials": len(large), "short_trials": len(short), "decode_us": decode_us,
            "policy_min_effect": POLICY_MIN_EFFECT}
