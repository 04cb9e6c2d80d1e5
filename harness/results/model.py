"""The results schema as frozen dataclasses; the CSV columns and the report derive from these fields."""

from __future__ import annotations

import functools
import typing
from dataclasses import dataclass, fields, is_dataclass

from harness.spec.waivers import Waiver  # noqa: F401  (part of the results schema)

SCHEMA_VERSION = 6  # 2: CaseResult.ceiling_gbps, ceilings.bandwidth_gbps; 3: CaseResult.gpu_index, gpu_uuid;
#                    4: CaseResult.compute; 5: CaseResult.host_us, host_median_us, wall_us, wall_median_us, launch;
#                    6: CaseResult.mode, peak_mem_bytes
READABLE_VERSIONS = (2, 3, 4, 5, 6)  # older files load with the fields added since filled by their defaults


STATUSES = ("ok", "wrong", "error", "skipped")


MODES = ("fwd", "bwd", "full")  # the pass timed (harness.bench.modes)


ROLES = ("candidate", "baseline", "peer")


VERDICTS = ("pass", "below-target", "model-error", "implausible", "n/a")


BOUNDS = ("memory", "compute", "bus")  # bus: a collective, against the link between its ranks


ARCH_STATUSES = ("ran", "fallback", "skipped", "unavailable")


STATS_KEYS = ("n", "min", "p5", "p25", "median", "p75", "p95", "max", "mean", "std", "cv", "iqr",
              "median_ci_lo", "median_ci_hi", "outliers_low", "outliers_high")


_STATS_REQUIRED_NUMBERS = ("n", "min", "median", "max")


_STATS_INTS = ("n", "outliers_low", "outliers_high")


class ResultsError(ValueError):
    """A results file or record that does not match the schema; the message is one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.splitlines()))  # every line break, U+2028 and \x1e included


@dataclass(frozen=True)
class CaseResult:
    """One kernel x provider x dtype x case, measured (or not, with the reason)."""

    kernel: str
    provider: str                 # "triton", "cuda", "reference" (eager torch), "torch.compile", peers
    backend: str                  # the backend that produced it: "triton", "cuda", "reference", "peer"
    role: str                     # "candidate" | "baseline" | "peer"
    dtype: str
    case_id: str
    shape: dict                   # symbol -> value
    headline: bool
    status: str                   # "ok" | "wrong" (failed the pre-timing check) | "error" | "skipped"
    reason: str                   # why wrong/error/skipped; "" when ok
    method: str                   # timing method, e.g. "cuda-events", "cupti", "host-timer"
    stop_reason: str              # why sampling stopped
    samples_us: tuple[float, ...]
    dropped_us: tuple[float, ...]  # samples discarded as throttled
    warm_us: tuple[float, ...]     # back-to-back launches, no flush
    stats: dict | None            # STATS_KEYS over samples_us
    warm_median_us: float | None
    bytes: float | None
    flops: float | None
    gbps: float | None
    tflops: float | None
    pct_roofline: float | None    # percent of the measured roofline
    bound: str | None             # one of BOUNDS
    ceiling_gbps: float | None    # measured bandwidth at the case's read fraction (a collective: bus bandwidth)
    target: float | None          # fraction of the roofline the spec asks for
    verdict: str                  # "pass" | "below-target" | "model-error" | "n/a"
    speedups: dict                # other provider -> {"ratio", "lo", "hi"}; > 1: this one is faster
    seed: int
    # The GPU the case ran on, so a speedup never divides times taken on two cards: every provider of one
    # (kernel, case, dtype) runs on one worker. None on a CPU and in files written before schema 3.
    gpu_index: int | None = None  # the index as the benchmark's parent process numbers the visible GPUs
    gpu_uuid: str | None = None   # torch's device UUID, stable across CUDA_VISIBLE_DEVICES orderings
    # The precision whose measured matmul rate is the case's compute ceiling ("fp8" for an FP8 GEMM with bf16
    # output; the case dtype otherwise); None where no roofline was taken, and in files before schema 4.
    compute: str | None = None
    # Launch overhead beside the device time (harness/timing/launch.py): host microseconds per call with the GPU
    # kept busy, one per repeat, and the synchronous eager wall per call (the L2 flushed, call, synchronize). On a
    # CPU the host time is the call's wall time and wall_us stays empty; ``launch`` says how each was taken and
    # why one is n/a. Empty / None in files before schema 5 and for cases not timed.
    host_us: tuple[float, ...] = ()
    host_median_us: float | None = None
    wall_us: tuple[float, ...] = ()
    wall_median_us: float | None = None
    launch: dict | None = None
    # Which pass was timed (MODES): the forward, the backward alone, or both in one call. Part of the case's
    # identity: a case has a row per mode. "fwd" in files before schema 6, which timed nothing else.
    mode: str = "fwd"
    # Peak device memory of one call above what was allocated before it (harness/timing/memory.py); None on a
    # CPU (no counter that means the same), for cases not timed, and in files before schema 6.
    peak_mem_bytes: int | None = None


# CaseResult fields a schema version added: a file of an older version must not have them; it loads with
# their defaults (the dataclass's), as a record of the current schema.
CASE_FIELDS_ADDED_IN = {"gpu_index": 3, "gpu_uuid": 3, "compute": 4, "host_us": 5, "host_median_us": 5,
                        "wall_us": 5, "wall_median_us": 5, "launch": 5, "mode": 6, "peak_mem_bytes": 6}


@dataclass(frozen=True)
class Speedup:
    """The shape of each ``CaseResult.speedups`` value (kept as a plain dict there)."""

    ratio: float                  # the other provider's median / this case's median
    lo: float | None              # 95 % interval
    hi: float | None


@dataclass(frozen=True)
class ArchRow:
    """What happened for one kernel on one architecture."""

    kernel: str
    arch: str
    backend: str                  # the backend that ran (or was tried)
    status: str                   # "ran" | "fallback" | "skipped" | "unavailable"
    reason: str


@dataclass(frozen=True)
class Results:
    schema_version: int
    environment: dict
    ceilings: dict
    cases: tuple[CaseResult, ...]
    arch_matrix: tuple[ArchRow, ...]
    waivers: tuple[Waiver, ...]
    complete: bool


def _plain(value):
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def to_json(results: Results | CaseResult) -> dict:
    """A plain, JSON-ready dict (a deep copy): tuples become lists."""
    return _plain(results)


@functools.cache
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)
