"""The report's compiled-for-every-target table: `matrix --out <report folder>/matrix.json` (static, any
machine: NVIDIA sm_80/90/100 and AMD gfx942/gfx950 columns) joined with what the results say ran on the
device that produced them (dynamic: an AMD column only when a ROCm runner made the results).

render.py calls `static_matrix` with its own cell escapers (this module imports nothing of render.py, which
imports it). A missing matrix.json gives no table; a malformed one a one-line note instead of the table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

MATRIX_FILE = "matrix.json"
_KEYS = {"kernel", "backend", "arch", "status", "configs", "summary", "problems", "reason"}
_RUN = {"ran": "ran", "fallback": "fell back to", "skipped": "skipped", "unavailable": "unavailable"}


def load_entries(path: Path) -> tuple[list[str], list[dict]]:
    """(targets, entries) of a matrix.json; ValueError with one line for anything else."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != 1 or not isinstance(doc.get("entries"), list):
        raise ValueError(f"{path}: not a matrix.json of schema 1 (write it with `python -m harness matrix --out`)")
    for i, e in enumerate(doc["entries"]):
        if not isinstance(e, dict) or set(e) != _KEYS:
            raise ValueError(f"{path}: entries[{i}]: expected the keys {', '.join(sorted(_KEYS))}")
    return [str(a) for a in doc.get("archs", [])], doc["entries"]


def static_matrix(folder, arch_rows, cell: Callable[[str], str], code: Callable[[str], str]) -> dict | None:
    """The table dict (header, rows, align) for the template, or None when `folder` has no matrix.json.

    Columns: kernel, then one per target of the matrix and one per architecture the results ran on; a cell
    says per backend whether it compiled (with its worst resource figures), failed, was waived (with the
    reason) or does not apply, then what ran there when the results come from such a device."""
    path = Path(folder) / MATRIX_FILE
    if not path.exists():
        return None
    try:
        archs, entries = load_entries(path)
    except ValueError as e:
        return {"header": ["matrix.json"], "rows": [[cell(str(e))]], "align": ["l"]}
    archs = list(dict.fromkeys(archs + [e["arch"] for e in entries] + [r.arch for r in arch_rows
                                                                        if r.arch != "cpu"]))
    kernels = list(dict.fromkeys([e["kernel"] for e in entries] + [r.kernel for r in arch_rows]))
    cells: dict[tuple[str, str], list[str]] = {}
    for e in entries:
        head, text = {"ok": ("compiled:", e["summary"]),
                      "failed": ("**failed**:", "; ".join(e["problems"])),
                      "waived": (f"waived ({cell(e['reason'])}):", "; ".join(e["problems"])),
                      }.get(e["status"], (f"{cell(e['status'])}:", e["reason"]))
        configs = f" ({e['configs']} configs)" if e["configs"] else ""
        cells.setdefault((e["kernel"], e["arch"]), []).append(f"{code(e['backend'])}{configs} {head} {cell(text)}")
    for r in arch_rows:
        if r.arch != "cpu" and r.status in ("ran", "fallback"):
            cells.setdefault((r.kernel, r.arch), []).append(f"run here: {_RUN[r.status]} {code(r.backend)}")
    rows = [[cell(k)] + ["<br>".join(cells.get((k, a), ["—"])) for a in archs] for k in kernels]
    return {"header": ["kernel"] + [code(a) for a in archs], "rows": rows, "align": ["l"] * (len(archs) + 1)}
