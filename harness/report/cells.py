"""Formatting of report cells: numbers, intervals, percentages, escaped text, tables and verdicts, shared by
every report section (harness.report.render, .ceilings, .shapes, .compare)."""

from __future__ import annotations

from harness.results.model import CaseResult

DASH = "\u2014"
NBSP = "\u00a0"  # keeps "3.21x [3.18, 3.25]" on one line in a narrow table column
PROVIDER_LABEL = {"reference": "eager"}  # how a provider heads a "vs" column
VERDICT_TEXT = {"pass": "pass", "below-target": "**below\u00a0target**",
                "model-error": "**model\u00a0error**", "implausible": "**implausible**", "n/a": "n/a"}


def num(x, sig: int = 4) -> str:
    """3-4 significant digits, thousands separators from 1,000 up; never scientific for times."""
    if x is None:
        return DASH
    if isinstance(x, int) or x == 0:
        return f"{x:,.0f}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    text = f"{x:#.{sig}g}"  # '#' keeps trailing zeros: 13.0x, not 13x, beside 12.7x
    return text[:-1] if text.endswith(".") else text


def interval(mid, lo, hi, sig: int = 3, unit: str = "") -> str:
    """`3.21x [3.18, 3.25]`, with digits added until rounding no longer merges distinct values."""
    if mid is None:
        return DASH
    if lo is None or hi is None:
        return f"{num(mid, sig)}{unit}"
    for digits in range(sig, 8):
        parts = [num(v, digits) for v in (lo, mid, hi)]
        if len({*parts}) == len({lo, mid, hi}):
            break
    return f"{parts[1]}{unit}{NBSP}[{parts[0]},{NBSP}{parts[2]}]"


def mem(nbytes) -> str:
    """Bytes in MiB (``12.5 MiB``); a dash where none was measured (a CPU records None)."""
    return DASH if nbytes is None else f"{num(nbytes / 2**20)}{NBSP}MiB"


def pct(x, sig: int = 3) -> str:
    return DASH if x is None else f"{num(x, sig)}%"


def cell(text) -> str:
    """Escape text for one Markdown table cell."""
    text = " ".join(str(text).split())
    for a, b in (("\\", "\\\\"), ("|", "\\|"), ("<", "&lt;"), ("*", "\\*"), ("_", "\\_")):
        text = text.replace(a, b)
    return text or DASH


def code(text) -> str:
    return f"`{' '.join(str(text).split())}`".replace("|", "\\|")


def table(header: list[str], rows: list[list[str]], right: tuple[int, ...] = ()) -> dict:
    return {"header": header, "rows": rows, "align": ["r" if i in right else "l" for i in range(len(header))]}


def verdict(c: CaseResult) -> str:
    if c.status != "ok":
        return f"**{c.status}**"
    text = VERDICT_TEXT.get(c.verdict, cell(c.verdict))
    if c.verdict == "below-target" and c.target is not None:
        text += f"{NBSP}({pct(c.target * 100, 2)})"
    return text


def speedup(c: CaseResult, provider: str, status: dict) -> str:
    """The candidate ``c`` against ``provider`` (its status by provider in ``status``): ``1.23x [1.21, 1.25]``,
    or a dash with the other's status: never a speedup against a wrong or failed run."""
    s = c.speedups.get(provider) if c.status == "ok" else None
    if provider in status and status[provider] != "ok":
        return f"{DASH} ({status[provider]})"
    return interval(s["ratio"], s["lo"], s["hi"], unit="x") if s else DASH
