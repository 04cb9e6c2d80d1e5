"""What changed between Triton releases, kernel by kernel: the matrices one release each compiled, compared.

A release's matrix is the document ``matrix --out`` writes (harness.aot.workflow.write_entries): its entries,
each compiled launch config's row (registers, spills, shared memory or LDS, occupancy, code size, status) and
the versions that compiled it. ``diff`` orders the releases oldest first and sets each against the one before
it, config by config (a config is its kernel, target and label), and flags what a user who moves between them
would feel:

- ``compile``: a config that compiles under one release and not under the other, in either direction (a
  kernel using an API a release added fails under the older one; one using an API a release removed, under
  the newer one);
- ``spill``: spilled registers that the older release did not spill (a new spill, or more);
- ``occupancy``: fewer warps per SM (NVIDIA) or waves per SIMD (AMD) than under the older release;
- ``problem``: any other new problem of the matrix's checks (shared memory or LDS over the target's limit).

Register, shared-memory and code-size changes are shown, not flagged: they matter through what they cost.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from harness.steps import BadInput

KINDS = ("compile", "spill", "occupancy", "problem")
_ROW_KEYS = {"kernel", "arch", "config", "registers", "shared_bytes", "status", "occupancy", "code_bytes"}


@dataclass(frozen=True)
class ReleaseRun:
    """One release's matrix document, loaded."""
    label: str                         # "triton 3.6.0": the version that compiled it, as the child imported it
    versions: dict[str, str]           # {"triton": ..., "torch": ...}
    archs: tuple[str, ...]
    entries: tuple[dict, ...]          # harness.aot.summary.MatrixEntry, as JSON
    rows: tuple[dict, ...]             # harness.aot.triton.TableRow, as JSON


@dataclass(frozen=True)
class Cell:
    """One kernel (spec) on one target under one release: its worst figures over the configs compiled."""
    state: str                  # "compiled", "waived", "not applicable", "skipped", "absent" (no Triton config)
    configs: int = 0
    failed: int = 0             # configs that did not compile
    registers: int | None = None     # the most (VGPRs on AMD)
    spills: int | None = None        # NVIDIA: bytes stored + loaded; AMD: VGPRs + SGPRs spilled
    shared: int | None = None        # the most shared memory / LDS, bytes
    occupancy: int | None = None     # the least: warps per SM (NVIDIA), waves per SIMD (AMD)
    code_bytes: int | None = None    # machine code, summed over the configs


@dataclass(frozen=True)
class KernelDiff:
    kernel: str
    arch: str
    cells: tuple[Cell, ...]          # one per release, oldest first
    unmatched: tuple[str, ...] = ()  # "3 configs only under triton 3.9.0": labels that changed between releases


@dataclass(frozen=True)
class Finding:
    kernel: str
    arch: str
    config: str                 # "<kernel function> [<config label>]"
    kind: str                   # one of KINDS
    older: str                  # release labels
    newer: str
    message: str                # one line naming both releases


@dataclass(frozen=True)
class ReleaseDiff:
    releases: tuple[str, ...]
    archs: tuple[str, ...]
    kernels: tuple[KernelDiff, ...]
    findings: tuple[Finding, ...]


def version_key(version: str) -> tuple:
    """Sortable form of "3.6.0" / "3.5.1+git..." / "2.13.0+cpu": the numeric release, then the rest."""
    head = re.match(r"\d+(\.\d+)*", version)
    nums = tuple(int(x) for x in head.group(0).split(".")) if head else ()
    return nums, version


def load_run(path: Path, package: str = "triton") -> ReleaseRun:
    """A release's matrix.json; BadInput naming the file and the key for anything malformed."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: not readable as a matrix document: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != 1:
        raise BadInput(f"{path}: schema: expected a matrix.json of schema 1 (`python -m harness matrix --out`)")
    versions = doc.get("toolchain")
    if not isinstance(versions, dict) or not isinstance(versions.get(package), str):
        raise BadInput(f"{path}: toolchain.{package}: missing (written by a harness older than the release matrix)")
    for key in ("entries", "rows", "archs"):
        if not isinstance(doc.get(key), list):
            raise BadInput(f"{path}: {key}: expected a list")
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, dict) or not _ROW_KEYS <= set(row):
            raise BadInput(f"{path}: rows[{i}]: expected the keys {', '.join(sorted(_ROW_KEYS))}")
    return ReleaseRun(f"{package} {versions[package]}", {k: str(v) for k, v in versions.items()},
                      tuple(doc["archs"]), tuple(doc["entries"]), tuple(doc["rows"]))


# ---------------------------------------------------------------------------------------------- figures


def compiled(row: dict) -> bool:
    return not str(row["status"]).startswith(("compile error", "resources not read"))


def spills(row: dict) -> int | None:
    if row.get("sgprs") is not None:  # AMD: counts of spilled registers
        return (row.get("vgpr_spills") or 0) + (row.get("sgpr_spills") or 0)
    if row.get("spill_store_bytes") is None:
        return None
    return (row.get("spill_store_bytes") or 0) + (row.get("spill_load_bytes") or 0)


def _spec(row: dict) -> str:
    return str(row["kernel"]).split(":", 1)[0]


def _most(values) -> int | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def _cell(rows: list[dict], entries: list[dict]) -> Cell:
    if not rows:
        states = [e["status"] for e in entries]
        state = next((s for s in ("waived", "not applicable", "skipped") if s in states), "absent")
        return Cell(state)
    ok = [r for r in rows if compiled(r)]
    occ = [r["occupancy"] for r in ok if r.get("occupancy") is not None]
    code = [r["code_bytes"] for r in ok if r.get("code_bytes") is not None]
    return Cell("compiled", len(rows), len(rows) - len(ok), _most(r["registers"] for r in ok),
                _most(spills(r) for r in ok), _most(r["shared_bytes"] for r in ok), min(occ) if occ else None,
                sum(code) if code else None)


# ---------------------------------------------------------------------------------------------- findings


def _compare(kernel: str, arch: str, config: str, a: dict, b: dict, old: str, new: str) -> list[Finding]:
    where = f"{kernel} {arch} {config}"
    found = lambda kind, text: Finding(kernel, arch, config, kind, old, new, f"{where}: {text}")
    if compiled(a) != compiled(b):
        good, bad, row = (old, new, b) if compiled(a) else (new, old, a)
        return [found("compile", f"compiles with {good}, fails with {bad}: "
                                 f"{str(row['status']).removeprefix('compile error: ')[:300]}")]
    if not compiled(a):
        return []
    out = []
    sa, sb = spills(a) or 0, spills(b) or 0
    unit = "registers" if a.get("sgprs") is not None else "B"
    if sb > sa:
        what = "new spill" if sa == 0 else "more spills"
        out.append(found("spill", f"{what}: {sa} {unit} with {old}, {sb} {unit} with {new}"))
    oa, ob = a.get("occupancy"), b.get("occupancy")
    if oa is not None and ob is not None and ob < oa:
        unit = "waves/SIMD" if a.get("sgprs") is not None else "warps/SM"
        out.append(found("occupancy", f"lost occupancy: {oa} {unit} with {old}, {ob} {unit} with {new} "
                                      f"(registers {a.get('registers')} -> {b.get('registers')}, shared "
                                      f"{a.get('shared_bytes')} -> {b.get('shared_bytes')} B)"))
    if a["status"] == "ok" and b["status"] != "ok" and not out:
        out.append(found("problem", f"ok with {old}, with {new}: {b['status']}"))
    return out


def ordered(runs) -> list[ReleaseRun]:
    """Oldest release first."""
    return sorted(runs, key=lambda r: version_key(r.label.split(" ", 1)[-1]))


def _configs(rows: dict, kernel: str, arch: str) -> set:
    return {k for k, r in rows.items() if k[1] == arch and _spec(r) == kernel}


def _kernel(kernel: str, arch: str, runs: list[ReleaseRun], by_config: list[dict]) -> tuple[KernelDiff, list]:
    cells = tuple(_cell([r for r in run.rows if _spec(r) == kernel and r["arch"] == arch],
                        [e for e in run.entries if e["kernel"] == kernel and e["arch"] == arch]) for run in runs)
    unmatched, findings = [], []
    for i in range(1, len(runs)):
        old, new = by_config[i - 1], by_config[i]
        mine_old, mine_new = _configs(old, kernel, arch), _configs(new, kernel, arch)
        if (only := mine_new - mine_old) and cells[i - 1].state == "compiled":
            unmatched.append(f"{len(only)} config(s) only under {runs[i].label}")
        if (only := mine_old - mine_new) and cells[i].state == "compiled":
            unmatched.append(f"{len(only)} config(s) only under {runs[i - 1].label}")
        for key in sorted(mine_old & mine_new):
            config = f"{key[0].split(':', 1)[-1]} [{key[2]}]"
            findings += _compare(kernel, arch, config, old[key], new[key], runs[i - 1].label, runs[i].label)
    return KernelDiff(kernel, arch, cells, tuple(dict.fromkeys(unmatched))), findings


def diff(runs: list[ReleaseRun]) -> ReleaseDiff:
    """Every kernel x target of the releases' matrices, and what each release changed against the one before."""
    runs = ordered(runs)
    archs = tuple(dict.fromkeys(a for r in runs for a in r.archs))
    by_config = [{(r["kernel"], r["arch"], r["config"]): r for r in run.rows} for run in runs]
    kernels = dict.fromkeys([e["kernel"] for run in runs for e in run.entries] +
                            [_spec(r) for run in runs for r in run.rows])
    table, findings = [], []
    for kernel in kernels:
        for arch in archs:
            row, found = _kernel(kernel, arch, runs, by_config)
            if any(c.state != "absent" for c in row.cells):
                table.append(row)
                findings += found
    return ReleaseDiff(tuple(r.label for r in runs), archs, tuple(table), tuple(findings))
