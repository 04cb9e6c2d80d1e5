"""The forest plot of a comparison: each case's change (PR / base - 1) with its interval and its band.

Built on ``matplotlib.figure.Figure`` with the Agg canvas (never pyplot), so it changes no caller's backend;
without matplotlib there is no plot and the report says nothing of one.
"""

from __future__ import annotations

import math
from pathlib import Path

MAX_ROWS = 300   # beyond this the figure stops being readable (and nears Agg's size limit): the rest are listed
COLOURS = {"SLOWER": "#c62828", "FASTER": "#2e7d32", "SAME": "#616161", "INCONCLUSIVE": "#ef6c00"}


def _label(c) -> str:
    shape = " ".join(f"{k}={v}" for k, v in c.shape.items()) if c.shape else c.case_id
    host = " (host/call)" if getattr(c, "metric", "device") == "host" else ""  # its own row, its own band
    mode = getattr(c, "mode", "fwd")
    host += "" if mode == "fwd" else f" [{mode}]"
    return f"{c.kernel} {c.dtype} {shape}"[:70 - len(host)] + host


def forest_plot(cmp, path: Path) -> Path | None:
    """Write the plot to ``path``; None when matplotlib is missing or no case has a ratio."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
    except ImportError:
        return None
    rows = [c for c in cmp.cases if c.ratio is not None and math.isfinite(c.ratio)]
    rows.sort(key=lambda c: (c.kernel, c.dtype, c.case_id, getattr(c, "mode", "fwd")))
    left_out = max(0, len(rows) - MAX_ROWS)
    rows = rows[:MAX_ROWS]
    if not rows:
        return None
    fig = Figure(figsize=(10.0, 1.4 + 0.22 * len(rows)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    rows = rows[::-1]  # the first case at the top
    ys = list(range(len(rows)))
    colours = [COLOURS.get(c.verdict, "#000000") for c in rows]
    band = [(y, 100 * (1 / (1 + c.effect) - 1), 100 * c.effect) for y, c in zip(ys, rows, strict=True)
            if c.effect is not None]
    if band:  # one artist per kind, not per case: hundreds of cases stay quick to draw
        ax.barh([b[0] for b in band], [b[2] - b[1] for b in band], left=[b[1] for b in band], height=0.8,
                color="#90caf9", alpha=0.35, linewidth=0)
    ci = [(y, c, col) for y, c, col in zip(ys, rows, colours, strict=True)
          if c.ratio_lo is not None and c.ratio_hi is not None]
    if ci:
        ax.hlines([y for y, _, _ in ci], [100 * (c.ratio_lo - 1) for _, c, _ in ci],
                  [100 * (c.ratio_hi - 1) for _, c, _ in ci], colors=[col for _, _, col in ci], linewidth=2)
    ax.scatter([100 * (c.ratio - 1) for c in rows], ys, c=colours, s=14, zorder=3)
    ax.axvline(0.0, color="#000000", linewidth=0.8)
    shown = [v for v in COLOURS if any(c.verdict == v for c in rows)]
    if shown:
        ax.legend(handles=[Line2D([], [], color=COLOURS[v], marker="o", label=v.lower()) for v in shown],
                  fontsize=7, loc="best")
    ax.set_yticks(ys)
    ax.set_yticklabels([_label(c) for c in rows], fontsize=7)
    ax.set_ylim(-0.8, len(rows) - 0.2)
    ax.set_xlabel("PR / base - 1, % (above 0: the PR is slower); band: the case's minimum effect")
    title = f"Merge gate, {cmp.kind}: change per case with its {100 * cmp.confidence:.0f}% interval"
    if left_out:
        title += f" (first {MAX_ROWS}; {left_out} more in compare.json)"
    ax.set_title(title, fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    height = fig.get_figheight()  # fixed margins in inches: tight_layout costs seconds at hundreds of labels
    fig.subplots_adjust(left=0.42, right=0.98, bottom=0.7 / height, top=1 - 0.45 / height)
    fig.savefig(path)
    return path
