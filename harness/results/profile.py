"""The profile schema: what ``harness profile`` read from Nsight Compute for each kernel, and its diagnosis.

It lives in results/ (not in profile/) so the report can render ``profile.json`` without importing the
profiler: the records are frozen dataclasses, written atomically and loaded strictly, every problem one
:class:`~harness.results.model.ResultsError` line naming the file and the key, as for ``results.json``.

Units: times in microseconds, bytes in bytes, every ``*_pct`` a percentage (81.5 means 81.5 %).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.results.io import _dumps, atomic_write_text, finite_json
from harness.results.load import _Bad, _from_dict, read_json_file
from harness.results.model import ResultsError, to_json

PROFILE_SCHEMA_VERSION = 1
# ok: ncu measured the kernel; not-profiled: this machine cannot (no counters, no ncu library), nothing is
# wrong with the kernel; error: the profiled run or ncu itself failed.
PROFILE_STATUSES = ("ok", "not-profiled", "error")


@dataclass(frozen=True)
class Stall:
    """One warp-stall reason and its weight as ncu reports it (warps stalled per issued instruction)."""

    reason: str                   # "long_scoreboard", "wait", ...
    value: float
    share_pct: float              # of the sum over every reason ncu reported


@dataclass(frozen=True)
class Finding:
    """One diagnosis rule that fired: its name (a row of harness.profile.diagnose.RULES), why, what to do."""

    rule: str
    evidence: str
    advice: str


@dataclass(frozen=True)
class Launch:
    """One kernel launch inside the profiled call, as Nsight Compute measured it (None: not reported)."""

    name: str
    duration_us: float | None
    dram_pct: float | None                  # DRAM throughput, % of peak sustained
    sm_pct: float | None                    # SM (compute) throughput, % of peak sustained
    memory_pct: float | None                # the busiest memory unit (DRAM, L1, L2), % of peak
    achieved_occupancy_pct: float | None
    theoretical_occupancy_pct: float | None
    occupancy_limiter: str | None           # what caps the blocks per SM: registers, shared memory, ...
    registers_per_thread: int | None
    shared_mem_per_block: int | None        # static + dynamic, bytes
    block_size: int | None
    grid_size: int | None
    waves_per_sm: float | None
    l1_hit_pct: float | None
    l2_hit_pct: float | None
    dram_read_bytes: float | None
    dram_write_bytes: float | None
    tensor_pct: float | None                # busiest Tensor Core pipe, % of peak sustained active
    stalls: tuple[Stall, ...]               # ranked, largest first
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class ProfileRecord:
    """One kernel's candidate at its headline bench case: every launch of one call, summed and diagnosed."""

    kernel: str
    provider: str
    dtype: str
    case_id: str
    shape: dict
    status: str                             # PROFILE_STATUSES
    reason: str                             # why not ok ("" when ok)
    launches: tuple[Launch, ...]
    duration_us: float | None               # sum over the launches
    dram_bytes: float | None                # read + written, summed over the launches
    model_bytes: float | None               # the spec's roofline model at this case
    bytes_ratio: float | None               # dram_bytes / model_bytes
    roofline_floor_us: float | None         # the time the bench roofline allows (measured ceilings)
    pct_roofline: float | None              # roofline_floor_us / duration_us, in %
    bound: str | None                       # "memory" | "compute" by the model
    target: float | None                    # the spec's roofline target, a fraction
    findings: tuple[Finding, ...]           # case-level rules (bytes against the model)
    command: str                            # the ncu command line, for running it by hand


@dataclass(frozen=True)
class ProfileFile:
    schema_version: int
    environment: dict                       # device, ncu version, date: free-form
    profiles: tuple[ProfileRecord, ...]


def _check(doc: ProfileFile) -> None:
    if doc.schema_version != PROFILE_SCHEMA_VERSION:
        raise _Bad("schema_version", f"unsupported version {doc.schema_version} (this harness reads "
                                     f"{PROFILE_SCHEMA_VERSION})")
    for i, p in enumerate(doc.profiles):
        if p.status not in PROFILE_STATUSES:
            raise _Bad(f"profiles[{i}].status", f"expected one of {', '.join(PROFILE_STATUSES)}, got {p.status!r}")
        if p.status != "ok" and not p.reason.strip():
            raise _Bad(f"profiles[{i}].reason", f"required when status is {p.status!r}")


def profile_from_json(doc, source: str = "<profile>") -> ProfileFile:
    try:
        out = _from_dict(ProfileFile, doc, "")
        _check(out)
    except _Bad as exc:
        raise ResultsError(f"{source}: {exc}") from None
    return out


def load_profile(path: str | os.PathLike) -> ProfileFile:
    """Load and validate profile.json; any problem is one ResultsError line naming the file and key."""
    return profile_from_json(*read_json_file(path))


def write_profile(doc: ProfileFile, path: str | os.PathLike) -> Path:
    """Validate (never write what could not be read back), then write atomically."""
    path = Path(path)
    data = finite_json(to_json(doc))
    profile_from_json(data, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, _dumps(data, indent=1) + "\n")
    return path
