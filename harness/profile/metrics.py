"""The one table of what is read from Nsight Compute: each ncu metric, the Launch field it fills, its kind.

The ncu command requests these sections and these metrics by name, and the parser reads exactly these
columns of ``ncu --import X --csv --page raw``: adding a metric is one row here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The sections whose numbers the report shows; ncu knows which metrics each needs on each chip, so they work
# even where one of the explicit names below does not exist (then the run is retried with sections only).
SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis",
            "ComputeWorkloadAnalysis")


@dataclass(frozen=True)
class Metric:
    field: str                 # the Launch field (or a helper key the parser combines, prefixed "_")
    names: tuple[str, ...]     # ncu metric names, first present wins (older ncu versions name some differently)
    kind: str                  # "time" (-> µs), "bytes" (-> bytes), "pct", "count"
    what: str


METRICS = (
    Metric("duration_us", ("gpu__time_duration.sum",), "time", "kernel duration"),
    Metric("dram_pct", ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                        "dram__throughput.avg.pct_of_peak_sustained_elapsed"), "pct", "DRAM throughput, % of peak"),
    Metric("sm_pct", ("sm__throughput.avg.pct_of_peak_sustained_elapsed",), "pct", "SM throughput, % of peak"),
    Metric("memory_pct", ("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",), "pct",
           "busiest memory unit, % of peak"),
    Metric("achieved_occupancy_pct", ("sm__warps_active.avg.pct_of_peak_sustained_active",), "pct",
           "achieved occupancy"),
    Metric("theoretical_occupancy_pct", ("sm__maximum_warps_per_active_cycle_pct",), "pct", "theoretical occupancy"),
    Metric("registers_per_thread", ("launch__registers_per_thread",), "count", "registers per thread"),
    Metric("_smem_static", ("launch__shared_mem_per_block_static",), "bytes", "static shared memory per block"),
    Metric("_smem_dynamic", ("launch__shared_mem_per_block_dynamic",), "bytes", "dynamic shared memory per block"),
    Metric("block_size", ("launch__block_size",), "count", "threads per block"),
    Metric("grid_size", ("launch__grid_size",), "count", "blocks"),
    Metric("waves_per_sm", ("launch__waves_per_multiprocessor",), "count", "waves per SM"),
    Metric("l1_hit_pct", ("l1tex__t_sector_hit_rate.pct",), "pct", "L1 hit rate"),
    Metric("l2_hit_pct", ("lts__t_sector_hit_rate.pct",), "pct", "L2 hit rate"),
    Metric("dram_read_bytes", ("dram__bytes_read.sum",), "bytes", "DRAM bytes read"),
    Metric("dram_write_bytes", ("dram__bytes_write.sum",), "bytes", "DRAM bytes written"),
    # Blocks per SM each resource allows: the smallest names the occupancy limiter.
    Metric("_limit_registers", ("launch__occupancy_limit_registers",), "count", "block limit: registers"),
    Metric("_limit_shared memory", ("launch__occupancy_limit_shared_mem",), "count", "block limit: shared memory"),
    Metric("_limit_warps", ("launch__occupancy_limit_warps",), "count", "block limit: warps"),
    Metric("_limit_blocks", ("launch__occupancy_limit_blocks",), "count", "block limit: blocks per SM"),
)

# Families matched by pattern (the sections collect them): the stall reasons and Tensor Core pipes differ
# between chips and ncu versions. Stalls: warps stalled per issued instruction, by reason (WarpStateStats);
# the other two families are fallbacks for older ncu versions.
STALL_PATTERNS = (
    re.compile(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio"),
    re.compile(r"smsp__average_warp_latency_issue_stalled_(\w+?)\.ratio"),
    re.compile(r"smsp__pcsamp_warps_issue_stalled_(\w+)"),
)
# "selected" is the warp being issued, not a stall; ncu lists it beside the stall reasons.
NOT_STALLS = frozenset({"selected"})
# Every Tensor Core pipe ncu reports (sm__pipe_tensor_cycles_active, ..._op_hmma_..., ..._type_hmma_hgmma_...):
# the busiest one is the Tensor Core use.
TENSOR_PATTERN = re.compile(r"sm__pipe_tensor\w*_cycles_active\.avg\.pct_of_peak_sustained_(active|elapsed)")


def metric_names() -> tuple[str, ...]:
    """What ``--metrics`` asks for besides the sections: the table's first-choice names, each one present in
    the sections' raw page on the H200 (tests/data/ncu_h200/ncu_add_raw.csv), so the request cannot fail there;
    on another chip a missing name makes the runner retry with the sections alone."""
    return tuple(m.names[0] for m in METRICS)
