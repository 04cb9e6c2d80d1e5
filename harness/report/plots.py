"""Report pictures: the roofline, one distribution plot per kernel and, for a kernel benchmarked at three
shapes or more, its own roofline (every provider's shapes joined in bench order, the candidate's labelled by
what varies, so the shape where it stops leading is visible), PNG through matplotlib's Agg.

matplotlib is optional: without it :func:`render_plots` returns no pictures and says why, and the
report still renders. Figures are built with ``matplotlib.figure.Figure`` on an Agg canvas, never
through pyplot, so rendering a report does not change the caller's matplotlib backend.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from harness.results.model import CaseResult, Results

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h")
ROLE_ORDER = {"candidate": 0, "baseline": 1, "peer": 2}


@dataclass(frozen=True)
class Plots:
    """What was drawn (file names relative to the report) and what was not, with why."""

    roofline: str | None = None
    dist: dict = field(default_factory=dict)   # kernel -> file name
    kernel_roofline: dict = field(default_factory=dict)  # kernel -> file name (kernels with 3+ shapes)
    notes: tuple[str, ...] = ()


def file_stem(kernel: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", kernel)


def shape_label(shape: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in shape.items())


def _matplotlib():
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        return None, None, f"{exc.__class__.__name__}: {exc}"
    return Figure, FigureCanvasAgg, None


def render_plots(results: Results, out_dir: Path) -> Plots:
    Figure, Canvas, missing = _matplotlib()
    if missing:
        return Plots(notes=(f"Plots skipped: matplotlib is not available ({missing}); "
                            "install it with `pip install 'kernel-harness[plots]'`.",))
    providers = sorted({c.provider for c in results.cases})
    colours = _palette(Figure, len(providers))
    provider_colour = dict(zip(providers, colours, strict=True))
    notes: list[str] = []
    dist: dict = {}
    for kernel in dict.fromkeys(c.kernel for c in results.cases):
        cases = [c for c in results.cases if c.kernel == kernel and c.status == "ok" and c.samples_us]
        if not cases:
            notes.append(f"No distribution plot for {kernel}: no provider has timed samples.")
            continue
        name = f"dist_{file_stem(kernel)}.png"
        try:
            _save(_dist_figure(Figure, kernel, cases, provider_colour), Canvas, out_dir / name)
        except Exception as exc:  # a broken picture must not cost the reviewer the whole report
            notes.append(f"Distribution plot for {kernel} failed: {exc.__class__.__name__}: {exc}")
            continue
        dist[kernel] = name
    per_kernel: dict = {}
    for kernel in dict.fromkeys(c.kernel for c in results.cases):
        points = [c for c in results.cases if c.kernel == kernel and _roofline_point(c) is not None]
        if sum(c.role == "candidate" for c in points) < 3:
            continue
        name = f"roofline_{file_stem(kernel)}.png"
        try:
            _save(_kernel_roofline_figure(Figure, Canvas, results, kernel, points), Canvas, out_dir / name)
        except Exception as exc:
            notes.append(f"Roofline plot for {kernel} failed: {exc.__class__.__name__}: {exc}")
            continue
        per_kernel[kernel] = name
    roofline = None
    points = [c for c in results.cases if _roofline_point(c) is not None]
    if not points:
        notes.append("Roofline plot skipped: no measured case has both a bytes and a flops model.")
    else:
        try:
            _save(_roofline_figure(Figure, Canvas, results, points), Canvas, out_dir / "roofline.png")
            roofline = "roofline.png"
        except Exception as exc:
            notes.append(f"Roofline plot failed: {exc.__class__.__name__}: {exc}")
    return Plots(roofline=roofline, dist=dist, kernel_roofline=per_kernel, notes=tuple(notes))


def _palette(Figure, n: int) -> list:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def _save(fig, Canvas, path: Path) -> None:
    Canvas(fig)
    fig.savefig(path, dpi=110, metadata={"Software": None})


def _plain_log_axis(axis) -> None:
    """Log axis labelled 200, 500, 1,000 rather than 2x10^2: cheaper to draw and easier to read."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _dist_figure(Figure, kernel: str, cases: list[CaseResult], provider_colour: dict):
    """One panel per shape and dtype; each provider's samples as % from *its own* median.

    On one absolute axis a reference 100x slower than the candidate squashes every other box into a line
    (log axes included), and the candidate's spread is what a reviewer needs to see. The medians, in µs,
    stand under the provider names; the speedup tables compare them. The axis spans the whiskers, so a few
    far outliers cannot squash the boxes either: those beyond it are counted at the top or bottom edge.
    """
    panels: dict[tuple, list[CaseResult]] = {}
    for c in sorted(cases, key=lambda c: ROLE_ORDER.get(c.role, 3)):
        panels.setdefault((c.case_id, c.dtype, c.mode), []).append(c)
    ncols = 2 if len(panels) in (2, 4) else min(3, len(panels))  # no lone empty cell for four panels
    nrows = math.ceil(len(panels) / ncols)
    height = 3.6 * nrows + 0.7
    fig = Figure(figsize=(4.6 * ncols, height))
    # fixed margins: constrained layout measures every tick label and costs seconds per figure
    fig.subplots_adjust(left=0.8 / (4.6 * ncols), right=1 - 0.15 / ncols, top=1 - 0.7 / height,
                        bottom=0.75 / height, wspace=0.32, hspace=0.75)
    fig.suptitle(f"{kernel}: each provider's samples, % from its own median (median µs under its name)\n"
                 "box p25-p75, whiskers 1.5 IQR, dots outliers; * the candidate", fontsize=9)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, ((_case_id, dtype, _mode), group) in zip(axes.flat, panels.items(), strict=False):
        data = [[100.0 * (x / c.stats["median"] - 1.0) for x in c.samples_us] if c.stats["median"] else [0.0]
                for c in group]
        box = ax.boxplot(data, patch_artist=True, widths=0.6,
                         flierprops={"markersize": 2, "alpha": 0.5},
                         medianprops={"color": "black"})
        labels = [f"{c.provider}{' *' if c.role == 'candidate' else ''}\n{_us(c.stats['median'])} µs" for c in group]
        ax.set_xticks(range(1, len(group) + 1), labels)  # tick_labels= needs mpl 3.9
        for patch, c in zip(box["boxes"], group, strict=True):
            patch.set_facecolor(provider_colour[c.provider])
            patch.set_alpha(0.75)
        ends = [y for w in box["whiskers"] for y in w.get_ydata()]
        lo, hi = min(ends), max(ends)
        pad = max(0.12 * (hi - lo), 0.5)
        lo, hi = lo - pad, hi + pad
        ax.set_ylim(lo, hi)
        for i, d in enumerate(data):
            above, below = sum(v > hi for v in d), sum(v < lo for v in d)
            if above:
                ax.annotate(f"+{above} above", (i + 1, hi), xytext=(0, -2), textcoords="offset points",
                            ha="center", va="top", fontsize=6, color="dimgray")
            if below:
                ax.annotate(f"+{below} below", (i + 1, lo), xytext=(0, 2), textcoords="offset points",
                            ha="center", va="bottom", fontsize=6, color="dimgray")
        ax.axhline(0.0, color="gray", lw=0.6, alpha=0.6)
        ax.set_title("\n".join(textwrap.wrap(f"{shape_label(group[0].shape)}  [{dtype}]", 48)), fontsize=8)
        ax.set_ylabel("% from the provider's median", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.tick_params(axis="x", labelsize=7)
        ax.tick_params(axis="y", labelsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    return fig


def _us(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _roofline_point(case: CaseResult) -> tuple[float, float] | None:
    if case.status != "ok" or not case.flops or not case.bytes or not case.tflops:
        return None
    if case.flops <= 0 or case.bytes <= 0 or case.tflops <= 0:
        return None
    return case.flops / case.bytes, case.tflops


def _roofs(ax, results: Results, points: list[CaseResult], xs: list[float], ys: list[float]) -> tuple:
    """Log axes, the measured copy slope and the compute roofs of the dtypes ``points`` ran in; returns
    (x_lo, x_hi, roof, bandwidth in TB/s or None) for the caller's limits and labels."""
    copy_gbps = results.ceilings.get("copy_gbps")
    # Only the ceilings of dtypes the cases ran in: near-equal peaks (bf16 and fp16) would overprint.
    dtypes = {c.compute or c.dtype for c in points}
    compute = {k: v for k, v in (results.ceilings.get("matmul_tflops") or {}).items() if v and k in dtypes}
    bw = copy_gbps / 1000.0 if copy_gbps else None  # TB/s: TFLOP/s per flop/byte
    ridges = [c / bw for c in compute.values()] if bw else []
    x_lo = min(xs + ridges) / 4
    x_hi = max(xs + ridges) * 4
    roof = max(compute.values()) if compute else max(ys) * 4
    ax.set_xscale("log")
    ax.set_yscale("log")
    if bw:
        x_end = roof / bw if compute else x_hi
        ax.plot([x_lo, x_end], [bw * x_lo, bw * x_end], color="black", lw=1.6)
    for dtype, peak in sorted(compute.items(), key=lambda kv: -kv[1]):
        start = peak / bw if bw else x_lo
        ax.plot([start, x_hi], [peak, peak], color="dimgray", lw=1.2, ls="--")
        ax.annotate(f"matmul {dtype} {peak:,.4g} TFLOP/s", (x_hi / 1.2, peak * 1.05),
                    ha="right", va="bottom", fontsize=8, color="dimgray")
    ax.set_xlim(x_lo, x_hi)
    floor = min(ys + ([bw * x_lo] if bw else [])) / 2
    ax.set_ylim(floor, roof * 2)
    ax.set_xlabel("arithmetic intensity (flop / byte, bytes read + written)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    _plain_log_axis(ax.xaxis)
    _plain_log_axis(ax.yaxis)
    if bw:  # label the slope along itself, high up where the points are not
        x_text = math.sqrt(x_lo * (roof / bw if compute else x_hi)) * 2
        p0, p1 = ax.transData.transform([(x_text, bw * x_text), (x_text * 2, bw * x_text * 2)])
        angle = math.degrees(math.atan2(p1[1] - p0[1], p1[0] - p0[0]))
        ax.annotate(f"measured copy {copy_gbps:,.0f} GB/s", (x_text, bw * x_text), xytext=(0, 5),
                    textcoords="offset points", rotation=angle, rotation_mode="anchor", fontsize=8)
    return x_lo, x_hi, roof, bw


def _roofline_figure(Figure, Canvas, results: Results, points: list[CaseResult]):
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(10, 6.2))
    Canvas(fig)
    fig.subplots_adjust(left=0.08, right=0.98, top=0.93, bottom=0.09)  # fixed: transData is final at once
    ax = fig.add_subplot()
    xy = [_roofline_point(c) for c in points]
    x_lo, _x_hi, roof, bw = _roofs(ax, results, points, [p[0] for p in xy], [p[1] for p in xy])
    kernels = list(dict.fromkeys(c.kernel for c in points))
    providers = list(dict.fromkeys(c.provider for c in points))
    kcolour = dict(zip(kernels, _palette(Figure, len(kernels)), strict=True))
    pmarker = {p: MARKERS[i % len(MARKERS)] for i, p in enumerate(providers)}
    series: dict[tuple, list] = {}
    for c, p in zip(points, xy, strict=True):
        series.setdefault((c.kernel, c.provider), []).append(p)
    for (kernel, provider), pts in series.items():
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=kcolour[kernel], marker=pmarker[provider],
                   s=42, edgecolors="black", linewidths=0.4, zorder=3)
    ax.set_title("Roofline on measured ceilings (every ok case)")
    first = ax.legend(handles=[Line2D([], [], ls="", marker="o", color=kcolour[k], label=k) for k in kernels],
                      title="kernel", loc="upper left", fontsize=8)
    ax.add_artist(first)
    ax.legend(handles=[Line2D([], [], ls="", marker=pmarker[p], color="gray", label=p) for p in providers],
              title="provider", loc="lower right", fontsize=8)
    copy_gbps = results.ceilings.get("copy_gbps")
    read_gbps = (results.ceilings.get("bandwidth_gbps") or {}).get("read")
    if bw and read_gbps and read_gbps > copy_gbps:  # the roof of read-heavy kernels, above the copy slope
        rb = read_gbps / 1000.0
        ax.plot([x_lo, roof / rb], [rb * x_lo, roof], color="dimgray", lw=1.0, ls=":")
        ax.annotate(f"read only {read_gbps:,.0f} GB/s", (x_lo * 1.5, rb * x_lo * 1.5 * 1.3), fontsize=7,
                    color="dimgray")
    return fig


def varying(shapes: list[dict]) -> list[str]:
    """The shape symbols whose value differs between ``shapes``: what labels one kernel's points."""
    keys = list(dict.fromkeys(k for s in shapes for k in s))
    return [k for k in keys if len({repr(s.get(k)) for s in shapes}) > 1]


def _sweeps(cases: list[CaseResult]) -> tuple[str | None, dict[tuple, list[CaseResult]]]:
    """The symbol the shapes sweep (of those that vary, the one with the most values) and the cases grouped by
    every other varying symbol, each group in the sweep's order: the lines of a kernel's roofline."""
    keys = varying([c.shape for c in cases])
    if not keys:
        return None, {(): list(cases)}
    sweep = max(keys, key=lambda k: len({repr(c.shape.get(k)) for c in cases}))
    rest = [k for k in keys if k != sweep]
    groups: dict[tuple, list[CaseResult]] = {}
    for c in cases:
        groups.setdefault(tuple((k, c.shape.get(k)) for k in rest), []).append(c)
    order = lambda c: (not isinstance(c.shape.get(sweep), (int, float)), c.shape.get(sweep), str(c.shape.get(sweep)))
    return sweep, {g: sorted(cs, key=order) for g, cs in groups.items()}


def _kernel_roofline_figure(Figure, Canvas, results: Results, kernel: str, points: list[CaseResult]):
    """One kernel: each provider's shapes joined along the symbol they sweep (one line per setting of the other
    symbols), the candidate's points labelled, so the shape where another provider overtakes it reads off."""
    fig = Figure(figsize=(9, 5.6))
    Canvas(fig)
    fig.subplots_adjust(left=0.09, right=0.98, top=0.92, bottom=0.1)
    ax = fig.add_subplot()
    xy = {id(c): _roofline_point(c) for c in points}
    _roofs(ax, results, points, [p[0] for p in xy.values()], [p[1] for p in xy.values()])
    providers = list(dict.fromkeys(c.provider for c in sorted(points, key=lambda c: ROLE_ORDER.get(c.role, 3))))
    colours = dict(zip(providers, _palette(Figure, len(providers)), strict=True))
    dtypes = list(dict.fromkeys(c.dtype for c in points))
    for i, provider in enumerate(providers):
        mine = [c for c in points if c.provider == provider]
        candidate = mine[0].role == "candidate"
        for dtype in dtypes:
            sweep, groups = _sweeps([c for c in mine if c.dtype == dtype])
            for j, (group, cs) in enumerate(groups.items()):
                pts = [xy[id(c)] for c in cs]
                label = f"{provider}{' (candidate)' if candidate else ''}" + (f" {dtype}" if len(dtypes) > 1 else "")
                ax.plot([p[0] for p in pts], [p[1] for p in pts], color=colours[provider], lw=1.8 if candidate else 1,
                        alpha=0.8, marker=MARKERS[i % len(MARKERS)], ms=7 if candidate else 5, mec="black", mew=0.4,
                        label=label if j == 0 else None, zorder=4 if candidate else 3)
                if candidate and sweep:
                    for c, (x, y) in zip(cs, pts, strict=True):
                        ax.annotate(f"{sweep}={c.shape.get(sweep)}", (x, y), xytext=(4, -9),
                                    textcoords="offset points", fontsize=6.5)
                    if group:
                        ax.annotate(" ".join(f"{k}={v}" for k, v in group), pts[-1], xytext=(6, 3),
                                    textcoords="offset points", fontsize=6, color="dimgray")
    ax.set_title(f"{kernel}: every shape on the measured roofline, by provider (lines: one symbol swept)")
    ax.legend(loc="lower right", fontsize=8)
    return fig
