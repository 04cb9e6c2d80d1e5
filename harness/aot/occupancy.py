"""Theoretical occupancy of a compiled NVIDIA kernel: the warps per SM its registers, shared memory and block
size allow, by the rules of CUDA's occupancy calculator (``cuda_occupancy.h``).

The AMD figure (waves per SIMD) comes from LLVM and the LDS (harness.aot.amd); this is the NVIDIA one, so that
the matrix across Triton releases can see a kernel lose occupancy on either vendor's targets. It assumes the
largest shared-memory carveout, the one the driver picks when a kernel needs it, so it is an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.spec.archs import normalize_arch

WARP = 32


@dataclass(frozen=True)
class SmLimits:
    """Per SM, from the CUDA C++ Programming Guide's table of compute capabilities."""
    shared_bytes: int               # the largest carveout: 164 KiB on sm_80, 228 KiB on sm_90 and sm_100
    max_warps: int = 64
    max_blocks: int = 32
    registers: int = 65536
    sub_partitions: int = 4         # the register file is split among four schedulers; a warp lives in one
    register_unit: int = 256        # registers are allocated per warp in units of 256
    shared_unit: int = 128
    reserved_shared: int = 1024     # the driver's per-block reservation, from sm_80 on


SM_LIMITS = {
    "sm_80": SmLimits(167936),
    "sm_86": SmLimits(102400, max_warps=48, max_blocks=16),
    "sm_89": SmLimits(102400, max_warps=48, max_blocks=24),
    "sm_90": SmLimits(233472),
    "sm_100": SmLimits(233472),
}


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def warps_per_sm(registers: int, shared_bytes: int, num_warps: int, arch: str) -> int | None:
    """Active warps per SM for blocks of ``num_warps`` warps using ``registers`` per thread and ``shared_bytes``
    (static + dynamic) per block; None for an architecture without known limits or an unknown block size."""
    lim = SM_LIMITS.get(normalize_arch(arch)[0])
    if lim is None or num_warps <= 0 or registers < 0 or shared_bytes < 0:
        return None
    by_warps = min(lim.max_blocks, lim.max_warps // num_warps)
    per_warp = _round_up(max(registers, 1) * WARP, lim.register_unit)
    if per_warp * num_warps > lim.registers:
        return 0
    warps_by_registers = (lim.registers // lim.sub_partitions // per_warp) * lim.sub_partitions
    by_registers = warps_by_registers // num_warps
    by_shared = lim.shared_bytes // _round_up(shared_bytes + lim.reserved_shared, lim.shared_unit)
    return min(by_warps, by_registers, by_shared) * num_warps
