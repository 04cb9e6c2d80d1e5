"""The matrix per kernel, backend and target: one `MatrixEntry` each, what `matrix --out` writes for the report.

A Triton backend's entry sums up every launch config compiled for that target (the largest register, shared
memory or LDS figure, the lowest occupancy); a CUDA C++ backend's entry on an AMD target is "not applicable";
a problem on a target the spec waives (`[waive] "matrix.gfx950" = "reason"`) makes the entry "waived" with
that reason instead of failing the matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.aot.nvcc import resource_problems
from harness.aot.triton import TableRow
from harness.spec.waivers import matrix_waiver

MATRIX_SCHEMA = 1
STATUSES = ("ok", "failed", "waived", "not applicable", "skipped")  # skipped: no nvcc on this machine


@dataclass(frozen=True)
class MatrixEntry:
    kernel: str
    backend: str
    arch: str
    status: str                  # one of STATUSES
    configs: int                 # launch configs compiled (0 for CUDA C++ and not applicable)
    summary: str                 # resources, e.g. "<=64 regs, smem <=4096 B, no spills"
    problems: tuple[str, ...] = ()
    reason: str = ""             # why waived or not applicable


def _most(values) -> int | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def resource_summary(rows: list[TableRow]) -> str:
    """The worst figures over a target's compiled configs, one short phrase."""
    if not rows:
        return "nothing compiled"
    amd = any(r.sgprs is not None for r in rows)
    regs, shared, stack = (_most(r.registers for r in rows), _most(r.shared_bytes for r in rows),
                           _most(r.stack_bytes for r in rows))
    if amd:
        occ = [r.occupancy for r in rows if r.occupancy is not None]
        spills = sum((r.vgpr_spills or 0) + (r.sgpr_spills or 0) for r in rows)
        parts = [f"<={regs} VGPRs", f"<={_most(r.sgprs for r in rows)} SGPRs", f"LDS <={shared} B",
                 f"scratch <={stack} B", f"occupancy >={min(occ)}" if occ else "occupancy unknown",
                 "no spills" if not spills else f"{spills} registers spilled"]
    else:
        spills = sum((r.spill_store_bytes or 0) + (r.spill_load_bytes or 0) for r in rows)
        parts = [f"<={regs} regs", f"smem <={shared} B", f"stack <={stack} B",
                 "no spills" if not spills else f"{spills} B spilled"]
    return ", ".join(p for p in parts if "None" not in p)


def triton_entries(kernel: str, backend: str, archs, rows: list[TableRow], waivers: dict[str, str]
                   ) -> list[MatrixEntry]:
    """One entry per target from the compiled rows of one Triton backend (rows' kernel names may carry a
    "spec:" prefix; every row given belongs to this backend)."""
    out = []
    for arch in archs:
        mine = [r for r in rows if r.arch == arch]
        problems = tuple(f"{r.kernel} [{r.config}] {arch}: {r.status}" for r in mine if r.status != "ok")
        status, reason = ("failed" if problems else "ok"), ""
        waived = matrix_waiver(waivers, arch)
        if problems and waived is not None:
            status, reason = "waived", waived
        out.append(MatrixEntry(kernel, backend, arch, status, len(mine), resource_summary(mine), problems, reason))
    return out


def not_applicable(kernel: str, backend: str, arch: str,
                   reason: str = "CUDA C++ (nvcc) backend: not applicable on AMD") -> MatrixEntry:
    return MatrixEntry(kernel, backend, arch, "not applicable", 0, "", (), reason)


def unclaimed_nvidia(rules: tuple[str, ...], archs) -> tuple[str, ...]:
    """The NVIDIA targets a backend's ``arch`` rules leave out while claiming another NVIDIA target: below its
    minimum (FP8 tensor cores from sm_89, so ``>=sm_90`` leaves sm_80 out). A backend that claims no NVIDIA
    target at all (a CPU-only one) is still compiled everywhere, as AMD targets are: the matrix shows what
    the kernel would do there."""
    from harness.spec.archs import is_amd, parse_rule

    parsed = [parse_rule(r) for r in rules]
    nvidia = [a for a in archs if not is_amd(a)]
    claimed = [a for a in nvidia if any(r.matches(a) for r in parsed)]
    return tuple(a for a in nvidia if a not in claimed) if claimed else ()


def cuda_entries(kernel: str, backend: str, archs, result, waivers: dict[str, str]) -> list[MatrixEntry]:
    """One entry per NVIDIA target from an nvcc build (harness.aot.nvcc.CudaBuildResult)."""
    if result.status.startswith("skipped"):
        return [MatrixEntry(kernel, backend, arch, "skipped", 0, "", (), result.status) for arch in archs]
    out = []
    for arch in archs:
        mine = [k for k in result.kernels if k.arch == arch]
        res = [k.resources for k in mine]
        problems = tuple(filter(None, [result.error if result.status == "error" else ""]))
        problems += tuple(p for p in result.problems if arch in p or "sm_" not in p)
        # as a Triton launch is held to them: no spills, the target's registers and shared memory
        problems += tuple(f"{k.label[:120]}: {p}" for k in mine
                          for p in resource_problems(k.resources, arch, allow_spills=False))
        problems = tuple(f"{kernel} {arch}: {p}" for p in problems)
        regs, shared = _most(r.registers for r in res), _most(r.shared_bytes for r in res)
        spills = sum(r.spill_store_bytes + r.spill_load_bytes for r in res)
        summary = (f"<={regs} regs, smem <={shared} B, {'no spills' if not spills else f'{spills} B spilled'}"
                   if res else "nothing read")
        status, reason = ("failed" if problems else "ok"), ""
        if problems and (waived := matrix_waiver(waivers, arch)) is not None:
            status, reason = "waived", waived
        out.append(MatrixEntry(kernel, backend, arch, status, 0, summary, problems, reason))
    return out
