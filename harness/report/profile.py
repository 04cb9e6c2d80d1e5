"""profile.json -> the report's "Profile (Nsight Compute)" section: per kernel, the metrics of each launch,
the diagnosis and the rule behind each finding. Rendered from the file alone: no GPU, no ncu.

The cells are built here, escaped; templates/profile.md.j2 only lays them out.
"""

from __future__ import annotations

import os
from pathlib import Path

import jinja2

from harness.results.model import ResultsError
from harness.results.profile import Launch, ProfileFile, ProfileRecord, load_profile

TEMPLATES = Path(__file__).parent / "templates"
TITLE = "## Profile (Nsight Compute)"
BEFORE = "\n## Environment"  # the section goes ahead of the provenance, which stays last
DASH = "—"
TOP_STALLS = 3
NAME_CHARS = 40  # Triton's kernel names run long; the column keeps the start, the full name is in profile.json


def _num(x, digits: int = 3) -> str:
    if x is None:
        return DASH
    if abs(x) >= 1000 or float(x).is_integer():
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _pct(x) -> str:
    return DASH if x is None else f"{x:.1f}%"


def _bytes(x) -> str:
    if x is None:
        return DASH
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(x) >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x:,.0f} B"


def _esc(text) -> str:
    """One Markdown table cell or inline text: no line breaks, no table or emphasis syntax."""
    text = " ".join(str(text).split())
    for a, b in (("\\", "\\\\"), ("|", "\\|"), ("<", "&lt;"), ("*", "\\*"), ("_", "\\_")):
        text = text.replace(a, b)
    return text or DASH


def _occupancy(la: Launch) -> str:
    text = _pct(la.theoretical_occupancy_pct)
    return f"{text} (limit: {_esc(la.occupancy_limiter)})" if la.occupancy_limiter else text


def _stalls(la: Launch) -> str:
    return ", ".join(f"{_esc(s.reason)} {s.share_pct:.0f}%" for s in la.stalls[:TOP_STALLS]) or DASH


# One row per metric: (label, cell of one launch). The order is the order a reader asks the questions in.
ROWS = (
    ("duration, µs", lambda la: _num(la.duration_us, 4)),
    ("DRAM throughput, % of peak", lambda la: _pct(la.dram_pct)),
    ("SM throughput, % of peak", lambda la: _pct(la.sm_pct)),
    ("busiest memory unit, % of peak", lambda la: _pct(la.memory_pct)),
    ("achieved occupancy", lambda la: _pct(la.achieved_occupancy_pct)),
    ("theoretical occupancy", _occupancy),
    ("registers per thread", lambda la: _num(la.registers_per_thread)),
    ("shared memory per block", lambda la: _bytes(la.shared_mem_per_block)),
    ("block size × grid", lambda la: f"{_num(la.block_size)} × {_num(la.grid_size)}"),
    ("waves per SM", lambda la: _num(la.waves_per_sm)),
    ("L1 hit rate", lambda la: _pct(la.l1_hit_pct)),
    ("L2 hit rate", lambda la: _pct(la.l2_hit_pct)),
    ("DRAM read / written", lambda la: f"{_bytes(la.dram_read_bytes)} / {_bytes(la.dram_write_bytes)}"),
    ("Tensor pipes, % of peak", lambda la: _pct(la.tensor_pct)),
    (f"top {TOP_STALLS} stalls (share)", _stalls),
)


def _short(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "…"


def _summary(p: ProfileRecord) -> list[str]:
    n = len(p.launches)
    lines = [f"One call: {n} launch{'es' * (n != 1)}, {_num(p.duration_us, 4)} µs in all."]
    if p.dram_bytes is not None or p.model_bytes is not None:
        ratio = f" ({p.bytes_ratio:.2f}x the model)" if p.bytes_ratio is not None else ""
        lines.append(f"DRAM moved {_bytes(p.dram_bytes)}; the spec's roofline model says {_bytes(p.model_bytes)}"
                     f"{ratio}.")
    if p.pct_roofline is not None:
        target = f", target {p.target * 100:.0f}%" if p.target is not None else ""
        lines.append(f"The bench roofline allows {_num(p.roofline_floor_us, 4)} µs ({_esc(p.bound)}-bound): "
                     f"{_pct(p.pct_roofline)} of the roofline{target}.")
    else:
        lines.append("No measured ceilings were available: no roofline position.")
    return lines


def _findings(p: ProfileRecord) -> list[dict]:
    many = len(p.launches) > 1
    out = [{"rule": f.rule, "where": "", "evidence": _esc(f.evidence), "advice": _esc(f.advice)} for f in p.findings]
    for la in p.launches:
        for f in la.findings:
            out.append({"rule": f.rule, "where": f" ({_esc(_short(la.name))})" if many else "",
                        "evidence": _esc(f.evidence), "advice": _esc(f.advice)})
    return out


def _kernel(p: ProfileRecord) -> dict:
    shape = ", ".join(f"{k}={v}" for k, v in p.shape.items())
    head = {"title": f"{_esc(p.kernel)} · `{_esc(p.provider)}` · {_esc(p.dtype)} · {_esc(shape)}",
            "status": p.status, "reason": _esc(p.reason), "command": p.command.replace("`", "'")}
    if p.status != "ok":
        return head
    header = ["metric"] + [f"`{_short(la.name)}`".replace("|", "\\|") for la in p.launches]
    rows = [[label] + [cell(la) for la in p.launches] for label, cell in ROWS]
    return {**head, "summary": _summary(p), "header": header, "rows": rows, "findings": _findings(p)}


def profile_context(doc: ProfileFile) -> dict:
    env = doc.environment
    return {"title": TITLE, "device": _esc(env.get("device", "unknown device")),
            "ncu": _esc(env.get("ncu_version", "unknown")), "kernels": [_kernel(p) for p in doc.profiles]}


def profile_markdown(doc: ProfileFile) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=False, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    return env.get_template("profile.md.j2").render(**profile_context(doc))


def profile_section(path: str | os.PathLike) -> str:
    """The section for the profile.json at ``path``; "" when there is none; one line when it is unreadable."""
    path = Path(path)
    if not path.exists():
        return ""
    try:
        return profile_markdown(load_profile(path))
    except ResultsError as exc:
        return f"{TITLE}\n\nNot rendered: {_esc(exc)}\n"


def insert_profile(report: str, path: str | os.PathLike | None) -> str:
    """``report`` with the profile section of ``path`` ahead of its Environment section (or at its end)."""
    section = profile_section(path) if path is not None else ""
    if not section:
        return report
    at = report.find(BEFORE)
    if at < 0:
        return report.rstrip("\n") + "\n\n" + section
    return report[:at].rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n" + report[at:]
