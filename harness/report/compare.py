"""A comparison -> compare.md (a pull-request comment), compare.json (for machines), compare_forest.png.

The comparison arrives as the gate's frozen records (harness/gate/model.py), read here by attribute and
field name only, so the report layer needs nothing from the gate. compare.md must fit one GitHub comment
(65,536 characters) at any number of kernels: the summary and the regressions come first and are never
dropped; the per-kernel tables are folded, then shortened to what is not SAME, then to one line a kernel,
until it fits; compare.json always holds everything.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import jinja2

from harness import __version__
from harness.report.cells import DASH, NBSP, cell, code, mem, num, pct
from harness.report.render import TEMPLATES
from harness.results.io import atomic_write_text, finite_json
from harness.results.model import to_json
from harness.results.verdicts import FAILING

COMMENT_LIMIT = 65_536   # GitHub's limit on one comment's body
VERDICT_ORDER = ("SLOWER", "WRONG", "ERROR", "INCONCLUSIVE", "FASTER", "NOT-COMPARED", "SAME")
VERDICT_TEXT = {"SLOWER": "**SLOWER**", "WRONG": "**WRONG**", "ERROR": "**ERROR**", "FASTER": "faster",
                "SAME": "same", "INCONCLUSIVE": "inconclusive", "NOT-COMPARED": "not compared"}
MODE_ORDER = ("fwd", "bwd", "full")
PROVENANCE = ("source", "commit", "dirty", "device", "driver", "torch", "triton", "cuda", "clocks", "date")


def change(c) -> str:
    """``+4.1% [+3.2, +5.0]``: the PR's change against the base, with its interval."""
    if c.ratio is None or not math.isfinite(c.ratio):
        return DASH
    mid = f"{100 * (c.ratio - 1):+.1f}%"
    if c.ratio_lo is None or c.ratio_hi is None:
        return mid
    return f"{mid}{NBSP}[{100 * (c.ratio_lo - 1):+.1f},{NBSP}{100 * (c.ratio_hi - 1):+.1f}]"


def _noise(c) -> str:
    if c.base_spread is None and c.pr_spread is None:
        return DASH
    return f"±{pct(None if c.base_spread is None else 100 * c.base_spread, 2)}{NBSP}/{NBSP}" \
           f"±{pct(None if c.pr_spread is None else 100 * c.pr_spread, 2)}"


def _roofline(c) -> str:
    if c.base_pct_roofline is None and c.pr_pct_roofline is None:
        return DASH
    return f"{pct(c.base_pct_roofline)}{NBSP}→{NBSP}{pct(c.pr_pct_roofline)}"


def _peak(c) -> str:
    """Peak device memory of one call, base → PR (a dash per side where none was measured: a CPU)."""
    a, b = getattr(c, "base_peak_mem_bytes", None), getattr(c, "pr_peak_mem_bytes", None)
    return DASH if a is None and b is None else f"{mem(a)}{NBSP}→{NBSP}{mem(b)}"


def _shape(c) -> str:
    return cell(" ".join(f"{k}={v}" for k, v in c.shape.items()) if c.shape else c.case_id)


def _verdict(c) -> str:
    text = VERDICT_TEXT.get(c.verdict, cell(c.verdict))
    return f"{text}: {cell(c.reason)}" if c.reason and c.verdict in ("WRONG", "ERROR", "NOT-COMPARED") else text


def _effect(c) -> str:
    return DASH if c.effect is None else f"±{num(100 * c.effect, 2)}%"


def _provider(c) -> str:
    if c.base_provider == c.pr_provider or not c.base_provider:
        return code(c.pr_provider) if c.pr_provider else DASH
    return f"{code(c.base_provider)}{NBSP}→{NBSP}{code(c.pr_provider)}"


def _metric(c) -> str:
    """What the row times: the kernel on the device, or the launcher's host time per call (its own row)."""
    return "host µs/call" if getattr(c, "metric", "device") == "host" else "device"


# Column header -> cell, each read from a CaseComparison field (the field names are the JSON keys).
COLUMNS = {
    "shape": _shape,
    "dtype": lambda c: c.dtype,
    "mode": lambda c: getattr(c, "mode", "fwd"),
    "timed": _metric,
    "provider": _provider,
    "base µs": lambda c: num(c.base_median_us),
    "PR µs": lambda c: num(c.pr_median_us),
    "change [95% CI]": change,
    "verdict": _verdict,
    "min. effect": _effect,
    "noise base / PR": _noise,
    "% roofline base → PR": _roofline,
    "peak mem base → PR": _peak,
}
RIGHT = (5, 6, 7, 9, 10, 11, 12)


def _table(cases, with_kernel: bool) -> dict:
    header = (["kernel"] if with_kernel else []) + list(COLUMNS)
    rows = [([cell(c.kernel)] if with_kernel else []) + [f(c) for f in COLUMNS.values()] for c in cases]
    shift = 1 if with_kernel else 0
    return {"header": header, "rows": rows,
            "align": ["r" if i - shift in RIGHT else "l" for i in range(len(header))]}


def _order(c) -> tuple:
    return (VERDICT_ORDER.index(c.verdict) if c.verdict in VERDICT_ORDER else 99, c.kernel, c.dtype, c.case_id,
            MODE_ORDER.index(getattr(c, "mode", "fwd")), getattr(c, "metric", "device"))


def summary_line(cases) -> str:
    n = Counter(c.verdict for c in cases)
    parts = [f"{n[v]} {v.lower()}" for v in ("SLOWER", "FASTER", "SAME", "INCONCLUSIVE")]
    parts += [f"{n[v]} {v.lower().replace('-', ' ')}" for v in ("WRONG", "ERROR", "NOT-COMPARED") if n[v]]
    return ", ".join(parts)


def _kernels(cases, level: int) -> list[dict]:
    """Per kernel: level 0 every case, 1 every case but SAME, 2 a count line only."""
    out = []
    for kernel in dict.fromkeys(c.kernel for c in sorted(cases, key=lambda c: c.kernel)):
        mine = sorted((c for c in cases if c.kernel == kernel), key=_order)
        n = Counter(c.verdict for c in mine)
        shown = mine if level == 0 else [c for c in mine if c.verdict != "SAME"] if level == 1 else []
        out.append({"name": cell(kernel), "counts": ", ".join(f"{k} {v.lower()}" for v, k in sorted(
            n.items(), key=lambda kv: VERDICT_ORDER.index(kv[0]) if kv[0] in VERDICT_ORDER else 99)),
            "table": _table(shown, False) if shown else None, "hidden": len(mine) - len(shown),
            "open": any(c.verdict in FAILING for c in mine)})
    return out


MAX_SCAN_ROWS = 60   # the static scan's new findings shown in compare.md; compare.json has them all


def _policy(cmp) -> dict | None:
    """The pull request's changes of policy-carrying spec fields, and whether they judged this run."""
    p = getattr(cmp, "policy", None)
    if p is None or not (p.changes or p.new_kernels or p.note):
        return None
    rows = [[cell(c.kernel), code(c.field), cell(c.base), cell(c.pr)] for c in p.changes]
    return {"applied": p.applied, "note": cell(p.note), "new": [cell(k) for k in p.new_kernels],
            "table": {"header": ["kernel", "field", "base", "PR"], "rows": rows, "align": ["l"] * 4} if rows else None}


def _scan(cmp) -> dict | None:
    found = tuple(getattr(cmp, "scan", ()) or ())
    if not found:
        return None
    new = [f for f in found if not f.in_base]
    rows = [[code(f"{f.path}:{f.line}"), cell(f.category), code(f.what)] for f in new[:MAX_SCAN_ROWS]]
    return {"new": len(new), "old": len(found) - len(new), "hidden": max(0, len(new) - MAX_SCAN_ROWS),
            "table": {"header": ["where", "what", "statement"], "rows": rows, "align": ["l"] * 3} if rows else None}


def _provenance(cmp) -> dict:
    rows = []
    for name in PROVENANCE:
        a, b = getattr(cmp.base, name), getattr(cmp.pr, name)
        rows.append([code(name), cell(DASH if a is None else a), cell(DASH if b is None else b)])
    specs = sorted(set(cmp.base.spec_sha256) | set(cmp.pr.spec_sha256))
    for s in specs:
        a, b = cmp.base.spec_sha256.get(s), cmp.pr.spec_sha256.get(s)
        rows.append([code(s), code(a[:12]) if a else DASH, code(b[:12]) if b else DASH])
    return {"header": ["", "base", "PR"], "rows": rows, "align": ["l", "l", "l"]}


def context(cmp, *, level: int = 0, max_failing: int | None = None, plot: str | None = None) -> dict:
    cases = list(cmp.cases)
    failing = sorted((c for c in cases if c.verdict in FAILING), key=_order)
    shown = failing if max_failing is None else failing[:max_failing]
    t = cmp.threshold
    return {
        "summary": summary_line(cases), "kind": cmp.kind, "aa": cmp.aa, "level": level,
        "base_commit": code((cmp.base.commit or "?")[:12]), "pr_commit": code((cmp.pr.commit or "?")[:12])
        + (" (with uncommitted changes)" if cmp.pr.dirty else ""),
        "device": cell(cmp.pr.device or "unknown device"),
        "failing": _table(shown, True) if shown else None, "failing_hidden": len(failing) - len(shown),
        "kernels": _kernels(cases, level), "n_cases": len(cases),
        "new": [cell(k) for k in cmp.new_kernels], "removed": [cell(k) for k in cmp.removed_kernels],
        "unmatched": [cell(u) for u in cmp.unmatched][: 50 if level else None],
        "unmatched_hidden": max(0, len(cmp.unmatched) - 50) if level else 0,
        "forced": [cell(f) for f in cmp.forced], "notes": [cell(n) for n in cmp.notes],
        "rule": {"relative": num(100 * t.relative, 2), "floor": num(t.floor_us, 3), "source": cell(t.source),
                 "confidence": num(100 * cmp.confidence, 2)},
        "overrides": sorted({cell(c.threshold.source) for c in cases
                             if c.threshold and c.threshold != t and getattr(c, "metric", "device") == "device"}),
        "host_rule": _host_rule(cases),
        "settings": [f"{cell(k)}: {cell(v)}" for k, v in cmp.settings.items()],
        "provenance": _provenance(cmp), "plot": plot, "version": __version__, "policy": _policy(cmp),
        "scan": _scan(cmp),
    }


def _host_rule(cases) -> dict | None:
    """The rule the host-time rows were judged by (one per run: no spec overrides it)."""
    rules = {c.threshold for c in cases if getattr(c, "metric", "device") == "host" and c.threshold}
    if not rules:
        return None
    r = sorted(rules, key=lambda r: r.source)[0]
    return {"relative": num(100 * r.relative, 2), "floor": num(r.floor_us, 3), "source": cell(r.source),
            "rows": sum(getattr(c, "metric", "device") == "host" for c in cases)}


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=False, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)


def render_markdown(cmp, plot: str | None = None, limit: int = COMMENT_LIMIT) -> str:
    """compare.md's text, shortened level by level until it fits ``limit`` characters."""
    template = _environment().get_template("compare.md.j2")
    failing = sum(c.verdict in FAILING for c in cmp.cases)
    attempts = [(level, None) for level in (0, 1, 2)]
    attempts += [(2, n) for n in (200, 100, 50, 20, 5, 0) if n < failing]
    text = ""
    for level, max_failing in attempts:
        text = re.sub(r"\n{3,}", "\n\n", template.render(**context(cmp, level=level, max_failing=max_failing,
                                                                      plot=plot)))
        if len(text) <= limit:
            return text
    cut = "\n\n(cut to fit one comment: compare.json has every case)\n"
    return text[: limit - len(cut)] + cut


def comparison_json(cmp, exit_code: int) -> dict:
    n = Counter(c.verdict for c in cmp.cases)
    policy = getattr(cmp, "policy", None)
    return {"format": "kernel-harness-compare/1", "summary": summary_line(cmp.cases), "counts": dict(n),
            "exit_code": exit_code,
            "policy_changes": [to_json(c) for c in policy.changes] if policy else [],
            "policy_applied": bool(policy and policy.applied),
            "scan_new_findings": sum(not f.in_base for f in getattr(cmp, "scan", ()) or ()),
            "comparison": finite_json(to_json(cmp))}


def write_comparison(cmp, out_dir, exit_code: int) -> dict[str, Path]:
    """compare.md, compare.json and (with matplotlib) compare_forest.png in ``out_dir``; returns their paths."""
    from harness.report.compare_plots import forest_plot

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    plot = forest_plot(cmp, out / "compare_forest.png")
    if plot:
        paths["plot"] = plot
    paths["json"] = out / "compare.json"
    atomic_write_text(paths["json"], json.dumps(comparison_json(cmp, exit_code), indent=1, allow_nan=False,
                                                ensure_ascii=False) + "\n")
    paths["md"] = out / "compare.md"
    atomic_write_text(paths["md"], render_markdown(cmp, plot.name if plot else None))
    return paths
