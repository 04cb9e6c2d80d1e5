"""results -> report.md (+ PNGs): the Markdown a reviewer pastes into a pull request.

All numbers come from the results; this module only arranges and formats them. Cells are built
here as escaped strings, the template (templates/report.md.j2) only lays them out.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import jinja2

from harness import __version__
from harness.report.ceilings import ceilings_section, ceilings_when
from harness.report.cells import DASH, NBSP, PROVIDER_LABEL, cell, code, interval, mem, num, pct, speedup, verdict
from harness.report.cells import table as _table
from harness.report.gaps import run_specs, spec_gaps
from harness.report.launch import host_cell, launch_line, wall_cell
from harness.report.launch import how_measured as launch_how_measured
from harness.report.matrix import static_matrix
from harness.report.plots import Plots, render_plots, shape_label
from harness.report.profile import insert_profile
from harness.report.shapes import shapes_table
from harness.report.targets import targets_section
from harness.results.io import atomic_write_text
from harness.results.load import load_results
from harness.results.model import CaseResult, Results

TEMPLATES = Path(__file__).parent / "templates"
BASELINE_ORDER = ("reference", "torch.compile")
FULL_STATS = ("min", "p25", "median", "p75", "max", "mean", "std")
# A panel's mode in its title: what its times are of (harness.bench.modes)
MODE_TITLE = {"fwd": "fwd", "bwd": "bwd (backward alone)", "full": "full (forward + backward)"}


# ----------------------------------------------------------------------------- formatting

# ----------------------------------------------------------------------------- sections

def _median(c: CaseResult):
    return c.stats["median"] if c.stats else None


def _groups(cases) -> dict[tuple, list[CaseResult]]:
    """Providers compared with each other: one (kernel, case, dtype, mode)."""
    groups: dict[tuple, list[CaseResult]] = {}
    for c in cases:
        groups.setdefault((c.kernel, c.case_id, c.dtype, c.mode), []).append(c)
    return groups


def _fastest(group: list[CaseResult]) -> CaseResult | None:
    ok = [c for c in group if c.status == "ok" and _median(c) is not None]
    return min(ok, key=_median) if ok else None


def _provider_order(providers) -> list[str]:
    def key(p):
        return (BASELINE_ORDER.index(p) if p in BASELINE_ORDER else len(BASELINE_ORDER), p)
    return sorted(set(providers), key=key)


def _has_modes(cases) -> bool:
    """Whether any case timed a backward: only then do tables carry a mode column (a forward-only report keeps
    its columns)."""
    return any(c.mode != "fwd" for c in cases)


def _summary(results: Results) -> dict:
    headline = _groups(c for c in results.cases if c.headline)
    modes = _has_modes(results.cases)
    # a peak-memory column only where one was measured (a CPU has none): "How measured" says why it is absent
    peaks = any(c.peak_mem_bytes is not None for c in results.cases)
    others = _provider_order(p for g in headline.values() for c in g if c.role == "candidate"
                             for p in c.speedups)
    others += [p for p in _provider_order(c.provider for g in headline.values() for c in g
                                          if c.role != "candidate") if p not in others]
    # A provider that could not run anywhere (a CUDA backend on a CPU, a peer not installed) gets no column of
    # dashes: "What was timed" names it with its reason.
    ran = {c.provider for g in headline.values() for c in g if c.status != "skipped"}
    others = [p for p in others if p in ran]
    rows = []
    for (kernel, _, dtype, mode), group in headline.items():
        fastest = _fastest(group)
        status = {c.provider: c.status for c in group}
        for c in (c for c in group if c.role == "candidate"):
            row = [cell(kernel), cell(shape_label(c.shape)), dtype, *([mode] if modes else []), code(c.provider),
                   num(_median(c)) if c.status == "ok" else DASH, pct(c.pct_roofline),
                   *([mem(c.peak_mem_bytes)] if peaks else [])]
            row += [speedup(c, p, status) for p in others]
            row.append(code(fastest.provider) if fastest else DASH)
            row.append(verdict(c))
            rows.append(row)
    header = (["kernel", "headline shape", "dtype", *(["mode"] if modes else []), "candidate", "median µs",
               "% roofline", *(["peak mem"] if peaks else [])]
              + [f"vs {PROVIDER_LABEL.get(p, p)}" for p in others] + ["fastest", "verdict"])
    missing = [k for k in dict.fromkeys(c.kernel for c in results.cases)
               if not any(key[0] == k for key in headline)]
    first = 4 + modes
    return {"table": _table(header, rows, right=tuple(range(first, first + 2 + peaks + len(others)))),
            "others": others,
            "no_headline": missing}


def _interpreted(results: Results) -> list[str]:
    """Backends that ran on a CPU: only through the Triton interpreter, which checks and never times."""
    return list(dict.fromkeys(r.backend for r in results.arch_matrix
                              if r.arch == "cpu" and r.status in ("ran", "fallback") and r.backend != "reference"))


def _what_was_timed(results: Results) -> list[str]:
    """Which providers the numbers belong to, with which timer; which ran only under the interpreter, and
    which did not run: a CPU report must not read as a measurement of the Triton kernel."""
    cases = results.cases
    ok = [c for c in cases if c.status == "ok"]
    roles: dict[str, set] = {}
    for c in cases:
        roles.setdefault(c.provider, set()).add(c.role)
    timed = sorted(_provider_order({c.provider for c in ok}), key=lambda p: "candidate" not in roles[p])
    methods = list(dict.fromkeys(c.method for c in ok))
    interpreted = _interpreted(results)
    host = bool(methods) and all("host" in m for m in methods)

    def who(p: str) -> str:
        label = code(p)
        notes = []
        if p == "reference":
            notes.append("eager torch")
        if "candidate" in roles.get(p, ()):
            notes.append("the candidate" + (": no backend can be timed on this device" if p == "reference"
                                            else ""))
        return label + (f" ({'; '.join(notes)})" if notes else "")

    parts = []
    if timed:
        how = f", with {', '.join(code(m) for m in methods)}" if methods else ""
        what = "host (CPU) times, not GPU times" if host else ""
        parts.append(f"**What was timed:** {', '.join(who(p) for p in timed)}{how}"
                     + (f": {what}." if what else "."))
    else:
        parts.append("**What was timed:** nothing; no provider produced a timed, correct result.")
    if interpreted:
        parts.append(f"**Checked, not timed:** {', '.join(code(b) for b in interpreted)} "
                     f"ran only under the Triton interpreter, a correctness tool: the generated tests "
                     f"(`nox -s test`) check it against the reference; it is not timed, so no number in this "
                     f"report is a Triton kernel's.")
    skipped = {}
    for c in cases:
        if c.status == "skipped" and c.provider not in timed and c.provider not in interpreted:
            skipped.setdefault(c.provider, c.reason)
    if skipped:
        parts.append("**Not run here:** " + ", ".join(f"{code(p)} ({cell(r)})" for p, r in skipped.items()) + ".")
    failed = [p for p in _provider_order({c.provider for c in cases if c.status in ("wrong", "error")})]
    if failed:
        parts.append("**Failed:** " + ", ".join(
            f"{code(p)} ({'/'.join(sorted(roles.get(p, ())))})" for p in failed)
            + "; see below. A failing baseline or peer is a finding; only a failing candidate fails the run.")
    return parts


def _arch_matrix(results: Results) -> dict | None:
    if not results.arch_matrix:
        return None
    archs = list(dict.fromkeys(r.arch for r in results.arch_matrix))
    cells: dict[tuple, list[str]] = {}
    for r in results.arch_matrix:
        who = f"{code(r.backend)} " if r.backend else ""
        interp = " under the Triton interpreter: checked by the tests, not timed" \
            if r.arch == "cpu" and r.backend != "reference" else ""
        text = {"ran": f"ran ({code(r.backend)}){interp}",
                "fallback": f"fell back to {code(r.backend)} because {cell(r.reason)}{';' if interp else ''}{interp}",
                "skipped": f"{who}skipped: {cell(r.reason)}",
                "unavailable": f"{who}unavailable: {cell(r.reason)}"}[r.status]
        cells.setdefault((r.kernel, r.arch), []).append(text)
    kernels = list(dict.fromkeys(r.kernel for r in results.arch_matrix))
    rows = [[cell(k)] + ["<br>".join(cells.get((k, a), [DASH])) for a in archs] for k in kernels]
    return _table(["kernel"] + [code(a) for a in archs], rows)


def _not_measured(cases) -> list[dict]:
    """Failures first (a candidate's, then baselines' and peers'), then skips: the order a reviewer needs."""
    rank = {"wrong": 0, "error": 0, "skipped": 1}
    bad = sorted((c for c in cases if c.status != "ok"),
                 key=lambda c: (rank.get(c.status, 0), c.role != "candidate"))
    return [{"status": c.status, "provider": c.provider, "dtype": c.dtype, "mode": c.mode, "kernel": c.kernel,
             "role": c.role, "shape": shape_label(c.shape), "reason": cell(c.reason)} for c in bad]


def _kernel_section(kernel: str, cases: list[CaseResult], plots: Plots) -> dict:
    panels, modes = [], _has_modes(cases)
    for (_, case_id, dtype, mode), group in _groups(cases).items():
        fastest = _fastest(group)
        rows = []
        for c in sorted((c for c in group if c.status == "ok"), key=lambda c: _median(c) or 0):
            s = c.stats
            name = f"**{code(c.provider)}**" if c is fastest and len(group) > 1 else code(c.provider)
            median = interval(s["median"], s["median_ci_lo"], s["median_ci_hi"], sig=4)
            rows.append([name, num(s["n"]), median,
                         f"{num(s['p5'])}{NBSP}to{NBSP}{num(s['p95'])}", num(s["iqr"]),
                         pct(None if s["cv"] is None else 100 * s["cv"], 2),
                         f"{s['outliers_low']} / {s['outliers_high']}", num(c.warm_median_us),
                         host_cell(c), wall_cell(c), mem(c.peak_mem_bytes), num(c.gbps), num(c.ceiling_gbps),
                         num(c.tflops), pct(c.pct_roofline), verdict(c),
                         cell(c.stop_reason)])
        table = _table(["provider", "n", "median µs [95% CI]", "p5 to p95 µs", "IQR µs", "CV",
                        "outliers lo / hi", "warm median µs", "host µs / call", "sync wall µs", "peak mem", "GB/s",
                        "ceiling GB/s", "TFLOP/s", "% roofline", "verdict", "stopped because"], rows,
                       right=tuple(range(1, 15)))
        title = f"{shape_label(group[0].shape)} · {dtype}" + (f" · {MODE_TITLE[mode]}" if modes else "")
        panels.append({"title": title, "case_id": case_id,
                       "headline": any(c.headline for c in group), "table": table if rows else None,
                       "not_measured": _not_measured(group)})
    main = [p for p in panels if p["headline"]] or panels
    full = []
    for c in cases:
        if c.status != "ok":
            continue
        s = c.stats
        full.append([cell(shape_label(c.shape)), c.dtype, c.mode, code(c.provider), code(c.backend), c.role,
                     *(num(s[k]) for k in FULL_STATS),
                     str(len(c.dropped_us)), num(c.bytes), num(c.flops), c.bound or DASH, mem(c.peak_mem_bytes),
                     cell(c.method), str(c.seed)])
    full_table = _table(["shape", "dtype", "mode", "provider", "backend", "role", *FULL_STATS, "throttled dropped",
                         "bytes", "flops", "bound", "peak mem", "method", "seed"], full,
                        right=(*range(6, 16), 17))
    return {"name": kernel, "panels": main, "more_panels": [p for p in panels if p not in main],
            "plot": plots.dist.get(kernel), "roofline": plots.kernel_roofline.get(kernel), "full": full_table,
            "shapes": shapes_table(cases), "launch": launch_line(cases),
            "n_ok": len(full)}


def _how_measured(results: Results) -> str:
    env = results.environment
    ok = [c for c in results.cases if c.status == "ok"]
    parts = []
    methods = Counter(c.method for c in ok)
    if methods:
        listed = ", ".join(f"{code(m)} ({n} case{'s' * (n != 1)})" for m, n in methods.most_common())
        parts.append(f"Timed with {listed}.")
    parts.append(f"L2 flush before each sample: {cell(env['flush'])}." if env.get("flush")
                 else "The L2 flush was not recorded.")
    if env.get("stopping_rule"):
        parts.append(f"Stopping rule: {cell(env['stopping_rule'])}.")
    reasons = Counter(c.stop_reason for c in ok)
    if reasons:
        parts.append("Sampling stopped on " + ", ".join(f"{cell(r)} ({n})" for r, n in reasons.most_common())
                     + ".")
    counts = sorted(c.stats["n"] for c in ok)
    if counts:
        mid = counts[len(counts) // 2]
        parts.append(f"Samples per case: {counts[0]:,} to {counts[-1]:,} (median {mid:,}).")
    dropped = sum(len(c.dropped_us) for c in results.cases)
    rule = f" ({cell(env['throttle'])})" if env.get("throttle") else ""
    parts.append(f"{dropped:,} throttled sample{'s' * (dropped != 1)} dropped{rule}.")
    warm = sum(1 for c in ok if c.warm_us)
    if warm:
        parts.append(f"Warm medians ({warm} cases) are back-to-back launches without a flush.")
    if launch := launch_how_measured(ok):
        parts.append(launch)
    if any(c.peak_mem_bytes is not None for c in ok):
        parts.append("Peak mem: one more call after timing, the peak of allocated device memory above what was "
                     "allocated before it (for bwd, on top of the forward's saved graph).")
    elif ok:
        parts.append("Peak mem: not measured here (a CPU has no device-memory counter; a dash, never an estimate).")
    seeds = sorted({c.seed for c in results.cases})
    if seeds:
        parts.append(f"Input seed{'s' * (len(seeds) != 1)}: {', '.join(map(str, seeds))}.")
    return " ".join(parts)


# Which code a commit is of: the repository under test (where the command ran) or the harness that measured it.
PROVENANCE_NOTES = {"git_commit": "the repository under test", "git_dirty": "the repository under test",
                    "repository": "the repository under test", "harness_version": "the harness",
                    "harness_commit": "the harness's own checkout"}


def _flat_env(prefix: str, value, rows: list) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flat_env(f"{prefix}.{k}" if prefix else str(k), v, rows)
    else:
        text = ", ".join(map(str, value)) if isinstance(value, list) else value
        note = PROVENANCE_NOTES.get(prefix)
        rows.append([code(prefix) + (f" ({note})" if note else ""), cell(text)])


def _provenance(results: Results, results_name: str) -> dict:
    rows: list = []
    _flat_env("", results.environment, rows)
    shown = ("copy_gbps", "bandwidth_gbps", "matmul_tflops", "datasheet")
    extra = {k: v for k, v in results.ceilings.items() if k not in shown}
    if extra:
        _flat_env("ceilings", extra, rows)
    status = Counter(c.status for c in results.cases)
    rows += [[code("results"), f"{code(results_name)}, schema {results.schema_version}"],
             [code("cases"), ", ".join(f"{n} {s}" for s, n in status.most_common()) or "none"],
             [code("report"), f"kernel-harness {__version__}"]]
    return _table(["key", "value"], rows)


def build_context(results: Results, plots: Plots, results_name: str) -> dict:
    env = results.environment
    date = str(env.get("date") or env.get("timestamp") or "")
    kernels = list(dict.fromkeys(c.kernel for c in results.cases))
    specs = list(run_specs(results))  # read once: the gaps and the targets quote the same files
    gaps = spec_gaps(results, specs)
    return {
        "device": cell(env.get("device") or "unknown device"),
        "arch": code(env["arch"]) if env.get("arch") else "",
        "date": cell(date[:10]) if date else "date not recorded",
        "complete": results.complete,
        "note": cell(env["note"]) if isinstance(env.get("note"), str) else "",
        "how_measured": _how_measured(results),
        "what_timed": _what_was_timed(results),
        "ceilings_when": ceilings_when(results),
        "summary": _summary(results),
        "targets": targets_section(results, specs),
        "ceilings": ceilings_section(results),
        "arch_matrix": _arch_matrix(results),
        "waivers": _table(["kernel", "what", "reason"],
                          [[cell(w.kernel), cell(w.what), cell(w.reason)] for w in results.waivers]),
        "not_measured": _not_measured(results.cases),
        "kernels": [{**_kernel_section(k, [c for c in results.cases if c.kernel == k], plots), "gap": gaps.get(k)}
                    for k in kernels],
        "plots": plots,
        "provenance": _provenance(results, results_name),
        "results_name": results_name,
        "n_cases": len(results.cases),
    }


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=False,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                              undefined=jinja2.StrictUndefined)


def render_report(results: Results | str | os.PathLike, out_dir: str | os.PathLike, *,
                  results_name: str = "results.json", profile: str | os.PathLike | None = None) -> Path:
    """Write out_dir/report.md and its PNGs (roofline.png, dist_<kernel>.png); return report.md's path.
    ``profile``: a profile.json whose section the report includes (default: out_dir/profile.json, if any)."""
    if not isinstance(results, Results):
        results = load_results(results)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots = render_plots(results, out)
    static = static_matrix(out, results.arch_matrix, cell, code)  # matrix.json beside the report, if any
    text = _environment().get_template("report.md.j2").render(**build_context(results, plots, results_name),
                                                               static_matrix=static)
    text = insert_profile(text, out / "profile.json" if profile is None else profile)
    text = re.sub(r"\n{3,}", "\n\n", text)  # the template may be generous with blank lines
    path = out / "report.md"
    atomic_write_text(path, text)
    return path
