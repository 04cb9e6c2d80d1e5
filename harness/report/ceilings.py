"""The report's ceilings section: measured against datasheet figures, and when and under what load they were
measured (a ceiling taken on a busy machine is low, and every case judged against it looks better)."""

from __future__ import annotations

import datetime
import math

from harness.report.cells import DASH, cell, interval, num, pct, table
from harness.results.model import Results

# The copy row comes from copy_gbps (with its datasheet figure); these are the other measured patterns.
BANDWIDTH_LABELS = {"fill": "write only, GB/s", "add": "2 reads : 1 write, GB/s", "read": "read only, GB/s"}


def ceilings_section(results: Results) -> dict | None:
    measured = results.ceilings
    sheet = measured.get("datasheet") or {}
    rows = []

    def row(label, m, d, ci=None):
        ratio = pct(100 * m / d) if m is not None and d else DASH
        ok = isinstance(ci, (list, tuple)) and len(ci) == 2 and all(_is_num(v) for v in ci) and _is_num(m)
        rows.append([label, interval(m, ci[0], ci[1]) if ok else num(m), num(d), ratio])

    bandwidth = _dict(measured.get("bandwidth_gbps"))
    band_ci, mm_ci = _dict(measured.get("bandwidth_ci_gbps")), _dict(measured.get("matmul_ci_tflops"))
    if measured.get("copy_gbps") is not None or sheet.get("copy_gbps") is not None:
        row("copy, GB/s (read + write)", measured.get("copy_gbps"), sheet.get("copy_gbps"), band_ci.get("copy"))
    for name, label in BANDWIDTH_LABELS.items():
        if bandwidth.get(name) is not None:
            row(label, bandwidth[name], None, band_ci.get(name))
    mm, smm = measured.get("matmul_tflops") or {}, sheet.get("matmul_tflops") or {}
    for dtype in dict.fromkeys([*mm, *smm]):
        row(f"matmul {dtype}, TFLOP/s", mm.get(dtype), smm.get(dtype), mm_ci.get(dtype))
    if not rows:
        return None
    return table(["ceiling", "measured", "datasheet", "measured / datasheet"], rows, right=(1, 2, 3))


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def _date(text) -> datetime.datetime | None:
    try:
        when = datetime.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)


def _age(then: datetime.datetime, now: datetime.datetime) -> str:
    hours = (now - then).total_seconds() / 3600
    if hours < 0:
        return "after this run started"
    return (f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.0f} days") \
        + " before this run"


def _load_text(snap: dict) -> str:
    """One snapshot of ceilings.load_snapshot as words: what competed with the measurement."""
    parts = []
    if "gpu_util_pct" in snap:
        parts.append(f"GPU utilisation {cell(snap['gpu_util_pct'])}%" if _is_num(snap["gpu_util_pct"])
                     else f"GPU utilisation {cell(snap['gpu_util_pct'])}")
    others = snap.get("other_processes")
    if isinstance(others, list):
        parts.append(f"{len(others)} other process{'es' * (len(others) != 1)} on the GPU"
                     + (f" (pids {', '.join(map(str, others[:5]))})" if others else ""))
    if _is_num(snap.get("sm_clock_mhz")) and _is_num(snap.get("sm_clock_max_mhz")):
        parts.append(f"SM clock {snap['sm_clock_mhz']:,.0f} of {snap['sm_clock_max_mhz']:,.0f} MHz"
                     + (" (held by the power cap)" if _power_capped_only(snap.get("clock_event_reasons"))
                        and snap.get("gpu_util_pct") != 0 else ""))
    if _is_num(snap.get("loadavg_1m")):
        cores = f" on {snap['cpu_cores_usable']} usable cores" if _is_num(snap.get("cpu_cores_usable")) else ""
        parts.append(f"host load average {snap['loadavg_1m']:.2f} (1 min){cores}")
    return ", ".join(parts)


SW_POWER_CAP, IDLE = 0x4, 0x1  # NVML clock event reasons


def _power_capped_only(reasons) -> bool:
    """The clock was held down by the board's power limit and nothing else (no thermal or hardware slowdown): a
    dense matmul probe draws the H200 to its 700 W cap and runs at about 1.4 GHz, a property of the card that
    every kernel of that intensity shares, not another's load."""
    try:
        bits = int(reasons, 16) if isinstance(reasons, str) else int(reasons)
    except (TypeError, ValueError):
        return False
    return bool(bits & SW_POWER_CAP) and not bits & ~(SW_POWER_CAP | IDLE)


def _busy(snap: dict, *, after_own_work: bool) -> bool:
    """Someone else was using the machine. Before the probes an idle GPU sits at a low clock (not a sign of
    load) and any utilisation is another's; after them the utilisation and the load are the probes' own,
    and a clock below 75% of its maximum means the probes ran throttled."""
    util, others = snap.get("gpu_util_pct"), snap.get("other_processes")
    clock, top = snap.get("sm_clock_mhz"), snap.get("sm_clock_max_mhz")
    cores, load = snap.get("cpu_cores_usable"), snap.get("loadavg_1m")
    if isinstance(others, list) and others:
        return True
    if after_own_work:
        return (_is_num(clock) and _is_num(top) and top > 0 and clock < 0.75 * top
                and not _power_capped_only(snap.get("clock_event_reasons")))
    return ((_is_num(util) and util >= 10)
            or ("gpu_util_pct" not in snap and _is_num(load) and _is_num(cores) and cores > 0 and load > cores))


def ceilings_when(results: Results) -> dict:
    """When, how and under what load the ceilings were measured: a ceiling taken on a busy machine is low,
    and every case judged against it looks closer to the roofline than it is."""
    c, env = results.ceilings, results.environment
    measured, run = _date(c.get("measured_at")), _date(env.get("date"))
    parts = []
    if measured:
        when = f"Ceilings measured {measured.strftime('%Y-%m-%d %H:%M')} UTC"
        if c.get("cached") is True:
            when += f", read from the cache ({_age(measured, run)})" if run else ", read from the cache"
        elif c.get("cached") is False:
            when += " by this run"
        parts.append(when + ".")
    else:
        parts.append("When the ceilings were measured was not recorded.")
    conditions = _dict(c.get("conditions"))
    start, end = _load_text(_dict(conditions.get("start"))), _load_text(_dict(conditions.get("end")))
    if start:
        parts.append(f"Load when their measurement started: {start}" + (f"; when it ended: {end}." if end else "."))
    else:
        parts.append("The load during their measurement was not recorded (ceilings from an older harness).")
    if _dict(c.get("bandwidth_ci_gbps")) or _dict(c.get("matmul_ci_tflops")):
        parts.append("Brackets: 95% interval of each ceiling's median; the verdicts allow for it.")
    parts.append("`bench --refresh-ceilings` measures them again; do it on an idle machine.")
    busy = (_busy(_dict(conditions.get("start")), after_own_work=False)
            or _busy(_dict(conditions.get("end")), after_own_work=True))
    return {"text": " ".join(parts), "busy": busy}
