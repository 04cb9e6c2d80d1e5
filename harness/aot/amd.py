"""AMD targets of the static matrix: the resources of a kernel Triton compiled for gfx942 (MI300) or gfx950
(MI350), read from the amdgcn text, and the limits they are checked against.

Triton's HIP backend compiles on a machine without a GPU (or ROCm) into amdgcn assembly and an hsaco. The
assembly carries the code object's metadata (``.vgpr_count``, ``.sgpr_count``, ``.vgpr_spill_count``,
``.sgpr_spill_count``, ``.group_segment_fixed_size`` = static LDS, ``.private_segment_fixed_size`` = scratch
per lane) and LLVM's comment block with the occupancy (waves per SIMD) the registers allow. Triton requests
its shared memory as dynamic LDS at launch (``metadata.shared``), which the code object's static LDS size and
LLVM's occupancy do not include, so both are added here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.spec.archs import normalize_arch

WAVEFRONT = 64  # CDNA (gfx9) runs wave64; Triton's HIP backend compiles gfx942/gfx950 for it


@dataclass(frozen=True)
class AmdResources:
    vgprs: int              # per lane, architectural VGPRs (.vgpr_count)
    agprs: int              # accumulation VGPRs (.agpr_count); CDNA's unified register file holds both
    sgprs: int
    vgpr_spills: int        # registers spilled (counts, not bytes)
    sgpr_spills: int
    lds_bytes: int          # static LDS (.group_segment_fixed_size) + Triton's dynamic request: what meets the limit
    scratch_bytes: int      # private segment per lane: spills and stack arrays live there
    occupancy: int | None   # waves per SIMD: LLVM's register-bound figure, capped by how many workgroups fit the LDS
    occupancy_registers: int | None = None  # LLVM's figure alone


@dataclass(frozen=True)
class AmdLimits:
    lds_bytes: int           # per workgroup; also the CU's whole LDS, which the occupancy bound divides
    simds_per_cu: int = 4


# LDS per CU (and the most one workgroup may allocate), from the ROCm GPU specifications table, "LDS (KiB)":
# MI300X/MI325X (gfx942) 64 KiB, MI350X/MI355X (gfx950) 160 KiB.
#   https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html
# LLVM agrees: gfx950 has FeatureAddressableLocalMemorySize163840 and allocates LDS in 320-dword blocks
# (AMDGPUUsage, COMPUTE_PGM_RSRC2 LDS_SIZE granularity: "GFX950 roundup(lds-size / (320 * 4))").
#   https://llvm.org/docs/AMDGPUUsage.html
AMD_LIMITS = {
    "gfx942": AmdLimits(64 * 1024),
    "gfx950": AmdLimits(160 * 1024),
}

_META_KEY = re.compile(r"^(?:  - |    )\.(\w+):\s+(\S+)\s*$")  # a kernel's own keys, not its args' (deeper)
_KERNEL_START = re.compile(r"^  - \.")
_OCCUPANCY = re.compile(r"^; Occupancy: (\d+)")


def kernel_metadata(amdgcn: str) -> dict[str, dict[str, str]]:
    """The ``amdhsa.kernels`` metadata of an amdgcn listing: {kernel name: {key: value}} (keys without the dot)."""
    out: dict[str, dict[str, str]] = {}
    entries: list[dict[str, str]] = []
    inside = False
    for line in amdgcn.splitlines():
        if line.startswith("amdhsa.kernels:"):
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            break  # amdhsa.target, amdhsa.version: the kernel list ended
        if not inside:
            continue
        if _KERNEL_START.match(line):
            entries.append({})
        if entries and (m := _META_KEY.match(line)):
            entries[-1][m.group(1)] = m.group(2)
    for e in entries:
        out[e.get("name", "")] = e
    return out


def register_occupancy(amdgcn: str, kernel: str) -> int | None:
    """LLVM's "; Occupancy: N" for `kernel` (the comment block after its .amdhsa_kernel directive)."""
    lines = amdgcn.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == f".amdhsa_kernel {kernel}"), None)
    if start is None:
        return None
    for ln in lines[start:]:
        if m := _OCCUPANCY.match(ln):
            return int(m.group(1))
    return None


def lds_occupancy(lds_bytes: int, num_warps: int, arch: str) -> int | None:
    """Waves per SIMD the LDS allows: workgroups that fit the CU's LDS x waves each, spread over its SIMDs."""
    lim = AMD_LIMITS.get(normalize_arch(arch)[0])
    if lim is None or lds_bytes <= 0 or num_warps <= 0:
        return None
    return (lim.lds_bytes // lds_bytes) * num_warps // lim.simds_per_cu


def parse_resources(amdgcn: str, kernel: str, dynamic_lds: int, num_warps: int, arch: str
                    ) -> tuple[AmdResources | None, str]:
    """The resources of `kernel` in an amdgcn listing, or (None, why not)."""
    meta = kernel_metadata(amdgcn)
    entry = meta.get(kernel) or (next(iter(meta.values())) if len(meta) == 1 else None)
    if entry is None:
        return None, f"amdgcn metadata: no kernel {kernel!r} (found {', '.join(meta) or 'none'})"
    try:
        num = {k: int(entry[k]) for k in ("vgpr_count", "sgpr_count", "vgpr_spill_count", "sgpr_spill_count",
                                          "group_segment_fixed_size", "private_segment_fixed_size")}
    except (KeyError, ValueError) as e:
        return None, f"amdgcn metadata of {kernel}: {type(e).__name__}: {e}"
    lds = num["group_segment_fixed_size"] + dynamic_lds
    reg_occ = register_occupancy(amdgcn, entry.get("name", kernel))
    lds_occ = lds_occupancy(lds, num_warps, arch)
    bounds = [x for x in (reg_occ, lds_occ) if x is not None]
    return AmdResources(vgprs=num["vgpr_count"], agprs=int(entry.get("agpr_count", 0)), sgprs=num["sgpr_count"],
                        vgpr_spills=num["vgpr_spill_count"], sgpr_spills=num["sgpr_spill_count"], lds_bytes=lds,
                        scratch_bytes=num["private_segment_fixed_size"],
                        occupancy=min(bounds) if bounds else None, occupancy_registers=reg_occ), ""


def resource_problems(r: AmdResources, arch: str, allow_spills: bool) -> list[str]:
    """What in `r` breaks `arch`'s limits: spills, scratch (where spills and stack arrays go: slow memory),
    LDS beyond the workgroup limit (the launch would fail), no occupancy at all."""
    arch = normalize_arch(arch)[0]
    out = []
    if not allow_spills and (r.vgpr_spills or r.sgpr_spills):
        out.append(f"spills {r.vgpr_spills} VGPRs / {r.sgpr_spills} SGPRs")
    if not allow_spills and r.scratch_bytes:
        out.append(f"scratch {r.scratch_bytes} B per lane")
    lim = AMD_LIMITS.get(arch)
    if lim is None:
        return out + [f"no limits known for {arch}"]
    if r.lds_bytes > lim.lds_bytes:
        out.append(f"LDS {r.lds_bytes} B > {arch} limit {lim.lds_bytes} B")
    elif r.occupancy == 0:
        out.append("occupancy 0: not one wave fits a SIMD")
    return out
