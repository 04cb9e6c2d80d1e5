"""The Markdown page of the matrix across Triton releases (harness.aot.releases), and its JSON document.

One table row per kernel and target; each cell reads oldest release to newest (``26 → 27 → 27``), one value
where they all agree. The flagged findings come first: a table grouped by kernel, target, kind and pair of
releases, then every finding, each naming both releases.
"""

from __future__ import annotations

import dataclasses

from harness.aot.releases import KINDS, Cell, ReleaseDiff, ReleaseRun

DOC_SCHEMA = 1
_KIND_TITLE = {"compile": "compiles under one release, fails under another", "spill": "new or more spills",
               "occupancy": "lost occupancy", "problem": "a new problem of the matrix's checks"}


def _series(values: list[str]) -> str:
    return values[0] if len(set(values)) == 1 else " → ".join(values)


def _num(v: int | None) -> str:
    return "-" if v is None else str(v)


def _change(values: list[int | None]) -> str:
    """Relative change, newest against oldest, where both are known and they differ."""
    first, last = values[0], values[-1]
    if not first or last is None or first == last:
        return ""
    return f" ({(last - first) / first:+.0%})"


def _compiles(c: Cell) -> str:
    if c.state != "compiled":
        return c.state
    return f"{c.configs - c.failed}/{c.configs}" if c.failed else f"{c.configs}"


def _figure(cells, attr: str) -> str:
    return _series([_num(getattr(c, attr)) if c.state == "compiled" else "-" for c in cells])


def kernel_rows(diff: ReleaseDiff) -> list[list[str]]:
    flagged = {(f.kernel, f.arch) for f in diff.findings}
    out = []
    for k in diff.kernels:
        code = [c.code_bytes if c.state == "compiled" else None for c in k.cells]
        name = f"**{k.kernel}**" if (k.kernel, k.arch) in flagged else k.kernel
        out.append([name, k.arch, _series([_compiles(c) for c in k.cells]), _figure(k.cells, "registers"),
                    _figure(k.cells, "spills"), _figure(k.cells, "shared"), _figure(k.cells, "occupancy"),
                    _figure(k.cells, "code_bytes") + _change(code), "; ".join(k.unmatched)])
    return out


def flagged_rows(diff: ReleaseDiff) -> list[list[str]]:
    groups: dict[tuple, list] = {}
    for f in diff.findings:
        groups.setdefault((f.kernel, f.arch, f.kind, f.older, f.newer), []).append(f)
    out = []
    for (kernel, arch, kind, older, newer), found in groups.items():
        first = found[0]
        example = first.message.removeprefix(f"{kernel} {arch} ")
        out.append([kernel, arch, kind, f"{older} → {newer}", str(len(found)), example])
    return out


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda s: str(s).replace("|", "\\|")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]


def render(diff: ReleaseDiff, runs: list[ReleaseRun], command: str) -> str:
    torch = sorted({r.versions.get("torch", "?") for r in runs})
    lines = [f"# The compile matrix across Triton releases: {', '.join(diff.releases)}", "",
             f"Every launch configuration of every kernel, compiled ahead of time by each release for "
             f"{', '.join(diff.archs)} (torch {', '.join(torch)}), from `{command}`. Each cell reads oldest "
             "release to newest; one value where they agree. NVIDIA: registers per thread, spills in bytes "
             "(stored + loaded), shared memory in bytes, occupancy in warps per SM (the CUDA occupancy "
             "calculator's bound). AMD: VGPRs, spilled VGPRs + SGPRs, LDS in bytes, occupancy in waves per "
             "SIMD. Registers, shared memory and spills are the worst over a kernel's configs, occupancy the "
             "lowest, code the machine code of all its configs (bytes of executable ELF sections).", ""]
    lines += [f"## Flagged: {len(diff.findings)}", ""]
    if not diff.findings:
        lines += ["No release loses a compile, gains a spill, loses occupancy or gains a problem against the "
                  "release before it.", ""]
    else:
        lines += ["Each config compared with the release before it. One row per kernel, target, kind and pair of "
                  "releases, with one of its configs; every finding is listed below the table.", ""]
        lines += _table(["kernel", "target", "flagged", "releases", "configs", "for example"], flagged_rows(diff))
        lines.append("")
    for kind in KINDS:
        mine = [f for f in diff.findings if f.kind == kind]
        if mine:
            lines += [f"<details><summary>{_KIND_TITLE[kind]}: {len(mine)}</summary>", ""]
            lines += [f"- {f.message}" for f in mine] + ["", "</details>", ""]
    lines += ["## Per kernel and target", ""]
    lines += _table(["kernel", "target", "configs compiled", "regs", "spills", "smem / LDS (B)", "occupancy",
                     "code (B)", "configs not in every release"], kernel_rows(diff))
    lines += ["", "## The releases", ""]
    lines += _table(["release", "torch", "configs x targets compiled", "problems of its own matrix"],
                    [[r.label, r.versions.get("torch", "?"), str(len(r.rows)),
                      str(sum(e["status"] == "failed" for e in r.entries))] for r in runs])
    return "\n".join(lines).rstrip() + "\n"


def document(diff: ReleaseDiff, runs: list[ReleaseRun], command: str, sources: dict[str, str]) -> dict:
    """What the page shows, as data: the diff, and for each release its versions and where its own matrix
    document (every config's row) is, ``sources`` {release label: path relative to this document}."""
    return {"schema": DOC_SCHEMA, "command": command, "releases": list(diff.releases), "archs": list(diff.archs),
            "findings": [dataclasses.asdict(f) for f in diff.findings],
            "kernels": [dataclasses.asdict(k) for k in diff.kernels],
            "runs": [{"label": r.label, "versions": r.versions, "archs": list(r.archs), "matrix": sources.get(r.label),
                      "configs": len(r.rows), "failed_entries": sum(e["status"] == "failed" for e in r.entries)}
                     for r in runs]}
