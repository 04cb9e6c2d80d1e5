"""Every benchmarked shape of one kernel on one line each: the candidate's time, rates, place on the roofline
and its speedup against every other provider, then where it wins and where it loses against each.

A GEMM family is judged across shapes (decode M = 1 to prefill M = 4096): an int4 weight-only kernel leads
where reading the weight is the cost and loses where the arithmetic is, and this table, in the bench's
shape order, shows where that happens along with the bound (memory or compute) the roofline gives.
"""

from __future__ import annotations

from harness.report.cells import DASH, PROVIDER_LABEL, cell, code, num, pct, speedup, table, verdict
from harness.report.plots import shape_label
from harness.results.model import CaseResult


def _wins(rows: list[tuple[CaseResult, dict]], provider: str) -> str | None:
    """``faster than p at 9 of 13 shapes; slower at M=1024 ..., M=4096 ...``: beyond the 95% interval only."""
    faster, slower, even = [], [], []
    for c, _ in rows:
        s = c.speedups.get(provider) if c.status == "ok" else None
        if not s or s.get("lo") is None or s.get("hi") is None:
            continue
        (faster if s["lo"] > 1 else slower if s["hi"] < 1 else even).append(shape_label(c.shape))
    judged = len(faster) + len(slower) + len(even)
    if not judged:
        return None
    text = f"against {code(PROVIDER_LABEL.get(provider, provider))}: faster at {len(faster)} of {judged} shapes"
    if slower:
        text += f"; slower at {', '.join(cell(s) for s in slower)}"
    if even:
        text += f"; within noise at {', '.join(cell(s) for s in even)}"
    return text


def shapes_table(cases: list[CaseResult]) -> dict | None:
    """The candidate at every shape and dtype of one kernel (None for fewer than two): a table and one line per
    other provider saying where the candidate wins and loses."""
    groups: dict[tuple, list[CaseResult]] = {}
    for c in cases:
        groups.setdefault((c.case_id, c.dtype, c.mode), []).append(c)
    rows = []
    for group in groups.values():
        for c in group:
            if c.role == "candidate":
                rows.append((c, {g.provider: g.status for g in group}))
    if len(rows) < 2:
        return None
    others = list(dict.fromkeys(p for c, status in rows for p in (*c.speedups, *status) if p != c.provider))
    modes = any(c.mode != "fwd" for c in cases)  # a mode column only where a backward was timed
    body = []
    for c, status in rows:
        ok = c.status == "ok"
        body.append([cell(shape_label(c.shape)), c.dtype, *([c.mode] if modes else []), code(c.provider),
                     num(c.stats["median"]) if ok and c.stats else DASH, num(c.tflops), num(c.gbps),
                     pct(c.pct_roofline), c.bound or DASH, *(speedup(c, p, status) for p in others), verdict(c)])
    header = ["shape", "dtype", *(["mode"] if modes else []), "candidate", "median µs", "TFLOP/s", "GB/s",
              "% roofline", "bound", *(f"vs {PROVIDER_LABEL.get(p, p)}" for p in others), "verdict"]
    lines = [line for p in others if (line := _wins(rows, p))]
    m = int(modes)
    return {"table": table(header, body, right=tuple(range(3 + m, 7 + m)) + tuple(range(8 + m, 8 + m + len(others)))),
            "wins": lines}
