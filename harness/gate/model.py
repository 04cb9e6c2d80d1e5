"""The merge gate's records: a threshold, one case's comparison, each side's provenance, the whole comparison.

Frozen dataclasses; compare.json is their field dicts and compare.md's columns are read from their fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.results.verdicts import FAILING

IN_PROCESS, STORED = "in-process interleaved", "stored runs"
# What a comparison row judges: the kernel's device time (every row before issue 29), or the launcher's host
# time per call with the GPU kept busy (harness/timing/launch.py), a row of its own with its own threshold.
METRICS = ("device", "host")


@dataclass(frozen=True)
class Threshold:
    """The minimum effect: a change counts only beyond ``max(relative, floor_us / base median)``."""

    relative: float     # 0.03: a 3 % change
    floor_us: float     # a change of fewer microseconds never counts (short kernels jitter by a fixed amount)
    source: str         # where the two numbers came from: policy default, calibration file, spec, option

    def effect(self, base_median_us: float | None, noise: float | None = None) -> float:
        """The relative effect in force for a case with this base median (and its A/A spread, if known)."""
        parts = [self.relative]
        if base_median_us is not None and base_median_us > 0:
            parts.append(self.floor_us / base_median_us)
        if noise is not None and noise > 0:
            parts.append(noise)
        return max(parts)


@dataclass(frozen=True)
class CaseComparison:
    """One (kernel, case, dtype): the PR's candidate against the base's, and the verdict."""

    kernel: str
    dtype: str
    case_id: str
    shape: dict
    headline: bool
    verdict: str                  # one of OUTCOMES
    reason: str                   # why WRONG / ERROR / NOT-COMPARED, or how sampling ended; "" when decided
    base_provider: str
    pr_provider: str
    base_median_us: float | None
    pr_median_us: float | None
    ratio: float | None           # PR median / base median: above 1 the PR is slower
    ratio_lo: float | None        # its confidence interval (bootstrap over block pairs)
    ratio_hi: float | None
    effect: float | None          # e in force: SLOWER above 1 + e, FASTER below 1 / (1 + e)
    threshold: Threshold | None   # the rule e came from (a spec may override the default)
    noise: float | None           # this case's A/A spread, from a noise file, when one was given
    base_spread: float | None     # half the interquartile range over the median, per side
    pr_spread: float | None
    base_pct_roofline: float | None
    pr_pct_roofline: float | None
    blocks: int                   # block pairs behind the interval
    stop: str                     # decided | budget | max-blocks | stored | "" (not timed)
    dropped: int                  # samples dropped as throttled, both sides
    gpu_index: int | None
    gpu_uuid: str | None
    wall_s: float
    base_blocks_us: tuple[tuple[float, ...], ...] = ()   # every kept sample, block by block
    pr_blocks_us: tuple[tuple[float, ...], ...] = ()
    metric: str = "device"        # one of METRICS: device time per sample, or host time per call
    # The pass timed (harness.bench.modes.MODES): a case's fwd, bwd and full are rows of their own, each
    # judged on its own samples, by the stored compare and by the interleaved gate (bench --against) alike.
    mode: str = "fwd"
    base_peak_mem_bytes: int | None = None   # peak device memory of one call, per side; None on a CPU
    pr_peak_mem_bytes: int | None = None

    @property
    def key(self) -> tuple:
        """(kernel, case, dtype), with the mode after them for a bwd or full row."""
        return (self.kernel, self.case_id, self.dtype) + (() if self.mode == "fwd" else (self.mode,))

    @property
    def failing(self) -> bool:
        return self.verdict in FAILING


@dataclass(frozen=True)
class Side:
    """Where one side's numbers came from."""

    label: str                    # "base" | "PR"
    source: str                   # a git ref and how it was loaded, or a results file
    commit: str | None
    dirty: bool | None
    device: str | None
    driver: str | None
    torch: str | None
    triton: str | None
    cuda: str | None
    clocks: str | None            # SM and memory clocks (NVML) when the run started
    date: str | None
    spec_sha256: dict = field(default_factory=dict)   # spec file name -> SHA-256


@dataclass(frozen=True)
class PolicyChange:
    """One policy-carrying field of a kernel's spec that the pull request changes (harness/gate/policy.py)."""

    kernel: str
    field: str                    # its TOML key: gate.min_effect, tolerance.bf16, waive.poison, kernel.reference
    base: str                     # the value at the base, as text ("(unset)" when the base has none)
    pr: str                       # the pull request's


@dataclass(frozen=True)
class PolicyReview:
    """The pull request's policy changes, and whether they judged this run."""

    changes: tuple[PolicyChange, ...]
    applied: bool                 # True only with a maintainer's acceptance for the candidate's exact commit
    new_kernels: tuple[str, ...]  # no base version: their own policy is theirs
    note: str                     # what the acceptance (if one was given) did, in one line


@dataclass(frozen=True)
class Finding:
    """One line of a pull request's kernel module that the static scan lists (harness/gate/scan.py)."""

    path: str                     # relative to the tree: kernels/rmsnorm.py
    line: int
    category: str                 # monkeypatch | interpreter | stream | thread | timer | native | dynamic | ...
    what: str                     # the statement, resolved through the module's imports
    in_base: bool                 # the base's same module has the same finding: not new in this pull request


@dataclass(frozen=True)
class Comparison:
    kind: str                     # IN_PROCESS or STORED: which drift the threshold must cover
    aa: bool                      # both sides the same code (an A/A run: every case should be SAME)
    base: Side
    pr: Side
    cases: tuple[CaseComparison, ...]
    new_kernels: tuple[str, ...]
    removed_kernels: tuple[str, ...]
    unmatched: tuple[str, ...]    # cases on one side only, or not comparable, each with why
    threshold: Threshold          # the default rule (a case's own is in its record)
    confidence: float             # of the ratio intervals
    settings: dict                # blocks, samples per block, budget, timing method
    forced: tuple[str, ...] = ()  # refusals overridden with --force
    notes: tuple[str, ...] = ()
    policy: PolicyReview | None = None     # bench --against: the pull request's policy changes
    scan: tuple[Finding, ...] = ()         # bench --against: the static scan of its kernel modules
