"""The bottleneck diagnosis: a table of rules over one launch's metrics and the case's roofline position.

Each rule is one row (name, condition, advice) so a report can cite the rule that fired; several may fire.
A rule whose metrics ncu did not report does not fire. The thresholds are the named constants below.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from harness.results.profile import Finding, Launch

# A launch costs a few µs of host, driver and ramp-up/tail on current GPUs: a kernel that short whose
# units all sit idle is dominated by launching it, and no tuning inside it can help.
TINY_US = 5.0
# Nsight Compute's own SpeedOfLight rule calls a unit above 80% of its peak well utilised...
SATURATED_PCT = 80.0
# ...and compute and memory both below 60% of peak a latency problem, not a throughput one.
LATENCY_PCT = 60.0
# Below half the SM's warp slots a streaming kernel rarely has enough loads in flight to cover DRAM latency
# (Little's law), unless each thread issues several independent loads.
LOW_OCCUPANCY_PCT = 50.0
# A stall reason holding this share of all stall weight, and the largest, is what the warps wait on.
STALL_DOMINANT_PCT = 40.0
# Tensor pipes busier than this are in use; below it a compute-bound kernel is running on the CUDA cores.
TENSOR_IDLE_PCT = 5.0
# DRAM traffic differs from a correct byte model by 32-byte sector rounding, L2 hits on data the model reads
# once, and writes still in L2 when the kernel ends: a few percent to tens of percent on a streaming kernel.
# Beyond 1.5x either way that no longer explains it: the spec's bytes, or the kernel's accesses, are wrong.
BYTES_TOLERANCE = 1.5


@dataclass(frozen=True)
class Context:
    """What a rule sees: one launch, and the case it belongs to (None where unknown)."""

    launch: Launch
    pct_roofline: float | None = None   # the whole call's duration against the bench roofline, %
    target: float | None = None         # the spec's roofline target, a fraction
    bound: str | None = None            # the model's bound: "memory" | "compute"
    bytes_ratio: float | None = None    # DRAM bytes moved / the model's bytes, whole call


@dataclass(frozen=True)
class Rule:
    name: str
    scope: str                               # "launch" (each launch) or "case" (the whole call)
    condition: str
    advice: str
    test: Callable[[Context], str | None]    # the evidence when the rule fires, else None


def _pct(x: float) -> str:
    return f"{x:.0f}%"


def _memory_side(c: Context) -> bool:
    """Memory-bound by the spec's model when it has one, else by which unit ncu found busier."""
    la = c.launch
    if c.bound is not None:
        return c.bound == "memory"
    return la.dram_pct is not None and la.sm_pct is not None and la.dram_pct >= la.sm_pct


def _launch_bound(c: Context) -> str | None:
    la = c.launch
    if None in (la.duration_us, la.dram_pct, la.sm_pct):
        return None
    if la.duration_us < TINY_US and la.dram_pct < LATENCY_PCT and la.sm_pct < LATENCY_PCT:
        return f"{la.duration_us:.2f} µs, DRAM {_pct(la.dram_pct)}, SM {_pct(la.sm_pct)} of peak"
    return None


def _at_ceiling(c: Context) -> str | None:
    la = c.launch
    if la.dram_pct is None or not _memory_side(c) or _launch_bound(c):
        return None
    at_target = c.pct_roofline is not None and c.target is not None and c.pct_roofline >= 100 * c.target
    if la.dram_pct >= SATURATED_PCT or at_target:
        roof = f", {_pct(c.pct_roofline)} of the roofline" if c.pct_roofline is not None else ""
        return f"DRAM {_pct(la.dram_pct)} of peak{roof}"
    return None


def _below_ceiling(c: Context) -> str | None:
    la = c.launch
    if la.dram_pct is None or not _memory_side(c) or _launch_bound(c) or _at_ceiling(c):
        return None
    parts = [f"DRAM {_pct(la.dram_pct)} of peak"]
    if c.pct_roofline is not None:
        parts.append(f"{_pct(c.pct_roofline)} of the roofline")
    if c.bytes_ratio is not None:
        parts.append(f"{c.bytes_ratio:.2f}x the model's bytes moved")
    if la.l1_hit_pct is not None:
        parts.append(f"L1 hit {_pct(la.l1_hit_pct)}")
    return ", ".join(parts)


def _low_occupancy(c: Context) -> str | None:
    la = c.launch
    if _at_ceiling(c):  # streaming at the ceiling already: more warps cannot move bytes faster
        return None
    achieved, theoretical = la.achieved_occupancy_pct, la.theoretical_occupancy_pct
    if achieved is None and theoretical is None:
        return None
    if not any(v is not None and v < LOW_OCCUPANCY_PCT for v in (achieved, theoretical)):
        return None
    parts = [f"achieved {_pct(achieved)}" if achieved is not None else "achieved n/a",
             f"theoretical {_pct(theoretical)}" if theoretical is not None else "theoretical n/a"]
    if theoretical is not None and theoretical < LOW_OCCUPANCY_PCT and la.occupancy_limiter:
        value, unit = {"registers": (la.registers_per_thread, "per thread"),
                       "shared memory": (la.shared_mem_per_block, "bytes per block"),
                       "warps": (la.block_size, "threads per block")}.get(la.occupancy_limiter, (None, ""))
        parts.append(f"limited by {la.occupancy_limiter}" + (f" ({value} {unit})" if value is not None else ""))
    elif la.waves_per_sm is not None:
        parts.append(f"{la.waves_per_sm:.2f} waves per SM (grid {la.grid_size})")
    return ", ".join(parts)


def _long_scoreboard(c: Context) -> str | None:
    stalls = c.launch.stalls
    if _at_ceiling(c):  # a saturated memory system makes every warp wait on it: expected, not a flaw
        return None
    if stalls and stalls[0].reason == "long_scoreboard" and stalls[0].share_pct >= STALL_DOMINANT_PCT:
        runner = f"; next: {stalls[1].reason} {_pct(stalls[1].share_pct)}" if len(stalls) > 1 else ""
        return f"long_scoreboard {_pct(stalls[0].share_pct)} of stall weight{runner}"
    return None


def _compute_bound(c: Context) -> str | None:
    la = c.launch
    if la.sm_pct is None or _launch_bound(c):
        return None
    by_model = c.bound == "compute" and (la.dram_pct is None or la.sm_pct > la.dram_pct)
    if not (by_model or la.sm_pct >= SATURATED_PCT):
        return None
    tensor = "Tensor pipes not reported" if la.tensor_pct is None else f"Tensor pipes {_pct(la.tensor_pct)} busy"
    idle = la.tensor_pct is None or la.tensor_pct < TENSOR_IDLE_PCT
    return f"SM {_pct(la.sm_pct)} of peak, {tensor}" + (" (idle)" if idle else "")


def _bytes_off(c: Context) -> str | None:
    r = c.bytes_ratio
    if r is None or r <= 0 or 1 / BYTES_TOLERANCE <= r <= BYTES_TOLERANCE:
        return None
    return f"DRAM moved {r:.2f}x the spec's roofline bytes (tolerance {BYTES_TOLERANCE}x either way)"


RULES = (
    Rule("launch-bound", "launch",
         f"duration < {TINY_US:g} µs and DRAM and SM both < {LATENCY_PCT:g}% of peak",
         "Launch overhead dominates: fuse it with its neighbours, give each launch more work, or capture the "
         "sequence in a CUDA graph; tuning inside the kernel cannot help.", _launch_bound),
    Rule("memory-bound-at-ceiling", "launch",
         f"memory-bound and (DRAM >= {SATURATED_PCT:g}% of peak or at the spec's roofline target)",
         "The kernel streams at the memory ceiling: only moving fewer bytes helps (fuse with the producer or "
         "consumer, a narrower dtype, no re-reads).", _at_ceiling),
    Rule("memory-bound-below-ceiling", "launch",
         f"memory-bound, DRAM < {SATURATED_PCT:g}% of peak and below the spec's roofline target",
         "Bandwidth is left on the table: check coalescing (contiguous lanes along the fastest dimension), vector "
         "width (16-byte loads: aligned, contiguous blocks), the bytes moved against the model, and enough "
         "independent loads in flight per thread.", _below_ceiling),
    Rule("low-occupancy", "launch",
         f"achieved or theoretical occupancy < {LOW_OCCUPANCY_PCT:g}%, not at the memory ceiling",
         "Too few warps to hide latency: lower the limiter ncu names (registers per thread: a smaller tile or "
         "fewer live values; shared memory: smaller tiles or fewer stages; block size), or launch more blocks "
         "when the grid is smaller than a wave.", _low_occupancy),
    Rule("long-scoreboard-stalls", "launch",
         f"largest stall reason is long_scoreboard with >= {STALL_DOMINANT_PCT:g}% of stall weight, not at the "
         "memory ceiling",
         "Warps wait on global memory: latency is not hidden. Issue more independent loads before the first "
         "use (unroll, several rows per program), raise occupancy, or prefetch.", _long_scoreboard),
    Rule("compute-bound", "launch",
         f"SM >= {SATURATED_PCT:g}% of peak, or compute-bound by the model with SM busier than DRAM",
         f"Check Tensor Core use: below {TENSOR_IDLE_PCT:g}% busy, matmul-shaped work runs on the CUDA cores "
         "(use tl.dot / mma with 16-bit inputs); with Tensor Cores busy, only fewer flops help.", _compute_bound),
    Rule("bytes-vs-model", "case",
         f"DRAM bytes moved / the spec's roofline bytes > {BYTES_TOLERANCE:g} or < 1/{BYTES_TOLERANCE:g}",
         "The model, or the kernel, is wrong: re-derive the spec's read_bytes/write_bytes, or find the kernel's "
         "extra traffic (re-reads, spills, uncoalesced sectors) or missing work.", _bytes_off),
)


def _fired(scope: str, c: Context) -> tuple[Finding, ...]:
    found = []
    for rule in RULES:
        if rule.scope == scope and (evidence := rule.test(c)) is not None:
            found.append(Finding(rule.name, evidence, rule.advice))
    return tuple(found)


def diagnose_launch(launch: Launch, **case) -> Launch:
    """``launch`` with the findings of every launch rule that fires (``case``: Context's case fields)."""
    return dataclasses.replace(launch, findings=_fired("launch", Context(launch, **case)))


def diagnose_case(bytes_ratio: float | None) -> tuple[Finding, ...]:
    """The findings of the case-level rules."""
    empty = Launch(**{**dict.fromkeys(f.name for f in dataclasses.fields(Launch)), "name": "", "stalls": (),
                      "findings": ()})
    return _fired("case", Context(empty, bytes_ratio=bytes_ratio))
