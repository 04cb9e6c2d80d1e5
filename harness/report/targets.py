"""The specs' ``[[targets]]`` judged on a run's own figures, for report.md's Targets section.

For each target and each case of the run it names (its ``where`` entries, mode and dtype), the other provider's
median over the provider's: median device time, or host time per call. A case is met at or above the target's
speedup; "not measured" when either side has no usable figure in the run (skipped, failed, wrong, absent), with the
reason. Under the table, each target that is not met everywhere it was measured quotes its spec's ``gap``, the
reason as measured, or says the spec gives none.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.report.cells import DASH, cell, code, num, table
from harness.report.gaps import run_specs
from harness.results.model import CaseResult, Results
from harness.spec.model import Target
from harness.spec.targets import names

MET, NOT_MET, NOT_MEASURED = "met", "not met", "not measured"


@dataclass(frozen=True)
class TargetRow:
    kernel: str
    index: int                 # the target's place in its spec's [[targets]]
    target: str                # Target.label()
    case_id: str
    dtype: str
    status: str                # MET, NOT_MET or NOT_MEASURED
    ratio: float | None        # the other's figure over the provider's
    provider_us: float | None
    against_us: float | None
    reason: str = ""           # why not measured


@dataclass(frozen=True)
class TargetNote:
    kernel: str
    index: int
    target: str
    why: str                   # the target's reason
    gap: str | None            # the spec's reason it is not met, when one is not
    source: str                # the spec file, as the results name it
    edited: bool               # changed since the run
    status: str                # MET (every measured case), NOT_MET (any), NOT_MEASURED (none measured)


def faster(ratio: float) -> str:
    """The other's time over the provider's, as a reader says it: ``1.52x faster`` or ``2.45x slower``."""
    return f"{num(ratio, 3)}x faster" if ratio >= 1 else f"{num(1 / ratio, 3)}x slower"


def _figure(c: CaseResult, metric: str) -> float | None:
    return c.host_median_us if metric == "host" else (c.stats or {}).get("median")


def _side(found: CaseResult | None, name: str, metric: str) -> tuple[float | None, str]:
    if found is None:
        return None, f"no {name} in this run"
    if found.status != "ok":
        return None, f"{name} {found.status}: {found.reason}"[:160]
    value = _figure(found, metric)
    if not value:
        return None, f"{name} has no {'host time' if metric == 'host' else 'median'}"
    return value, ""


def _rows(t: Target, index: int, kernel: str, cases: list[CaseResult]) -> list[TargetRow]:
    label = t.label()
    named = [c for c in cases if c.kernel == kernel and names(t, c.shape, c.dtype, c.mode)]
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    for c in named:
        groups.setdefault((c.case_id, c.dtype), []).append(c)
    if not groups:
        return [TargetRow(kernel, index, label, DASH, t.dtype or DASH, NOT_MEASURED, None, None, None,
                          "no case of this run is one the target names")]
    rows = []
    for (case_id, dtype), group in groups.items():
        subject = next((c for c in group if (c.provider == t.provider if t.provider else c.role == "candidate")),
                       None)
        other = next((c for c in group if c.provider == t.against), None)
        mine, why = _side(subject, t.provider or "candidate", t.metric)
        theirs, why_other = _side(other, t.against, t.metric)
        if mine is None or theirs is None:
            rows.append(TargetRow(kernel, index, label, case_id, dtype, NOT_MEASURED, None, mine, theirs,
                                  why or why_other))
            continue
        ratio = theirs / mine
        rows.append(TargetRow(kernel, index, label, case_id, dtype, MET if ratio >= t.speedup else NOT_MET, ratio,
                              mine, theirs))
    return rows


def judge_targets(results: Results, specs=None) -> tuple[list[TargetRow], list[TargetNote]]:
    """Every target of every spec the run was measured with, judged on its cases; a note per target. ``specs``:
    :func:`harness.report.gaps.run_specs` of the results, where the caller has read them already."""
    rows, notes = [], []
    kernels = {c.kernel for c in results.cases}
    for name, spec, edited in run_specs(results) if specs is None else specs:
        if spec.name not in kernels:
            continue
        for i, t in enumerate(spec.targets):
            mine = _rows(t, i, spec.name, list(results.cases))
            rows += mine
            measured = [r.status for r in mine if r.status != NOT_MEASURED]
            status = NOT_MEASURED if not measured else NOT_MET if NOT_MET in measured else MET
            notes.append(TargetNote(spec.name, i, t.label(), t.reason, t.gap, name, edited, status))
    return rows, notes


def targets_section(results: Results, specs=None) -> dict | None:
    """The Targets section's table and notes (None when no spec of the run declares a target)."""
    rows, notes = judge_targets(results, specs)
    absent = _absent(rows)
    rows = [r for r in rows if (r.kernel, r.index) not in absent]
    if not notes:
        return None
    shown = {MET: "met", NOT_MET: "**not met**", NOT_MEASURED: "not measured"}
    body = [[cell(r.kernel), r.target.replace("|", "\\|"), code(r.case_id) if r.case_id != DASH else DASH,
             cell(r.dtype), faster(r.ratio) if r.ratio is not None else cell(r.reason),
             num(r.provider_us), num(r.against_us), shown[r.status]] for r in rows]
    lines = []
    if absent:
        lines.append("Naming no case of this run: " + "; ".join(f"{n.kernel}, {n.target}" for n in notes
                                                                 if (n.kernel, n.index) in absent) + ".")
    for n in notes:
        if (n.kernel, n.index) in absent:
            continue
        head = f"**{n.kernel}**, {n.target}: {n.status}. Why this target: {n.why}."
        if n.status == NOT_MET:
            where = f"`{n.source}`, `[[targets]] gap`{', edited since this run' if n.edited else ''}"
            head += f" Why not ({where}): {n.gap}" if n.gap else " The spec gives no `gap` for it."
        lines.append(head)
    return {"table": table(["kernel", "target", "case", "dtype", "measured", "provider µs", "other µs", "verdict"],
                           body, right=(4, 5, 6)) if body else None, "notes": lines}


def _absent(rows: list[TargetRow]) -> set[tuple[str, int]]:
    """(kernel, index) of the targets that name no case of the run (a run of other shapes, or a CPU's tier)."""
    return {(r.kernel, r.index) for r in rows if r.case_id == DASH}


def target_lines(results: Results, specs=None) -> list[str]:
    """One line per target for a terminal: its verdict and the figure that decides it (the lowest ratio measured).
    A target is a goal the report tracks, not a check: it never fails a run."""
    rows, notes = judge_targets(results, specs)
    absent = _absent(rows)
    lines = []
    for n in notes:
        if (n.kernel, n.index) in absent:
            continue
        mine = [r for r in rows if (r.kernel, r.index) == (n.kernel, n.index) and r.ratio is not None]
        worst = min(mine, key=lambda r: r.ratio, default=None)
        figure = f" ({faster(worst.ratio)} at {worst.case_id} {worst.dtype})" if worst else ""
        lines.append(f"target {n.status}: {n.kernel} {n.target.replace('`', '')}{figure}")
    return lines
