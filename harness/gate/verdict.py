"""The verdict, as pure logic on samples: no GPU, no files, so every rule here is tested on synthetic data.

The statistic is the ratio of medians, PR / base, over all kept samples. Its interval is a percentile
bootstrap over *blocks*: an interleaved run resamples block pairs (base block i with PR block i, timed
moments apart, so slow drift of the machine cancels in each pair); two stored runs, which share no moment,
resample each side's blocks independently. Samples inside a block are never resampled on their own: they
are correlated in time, and resampling them as if they were not would make the interval too narrow.

The rule, with e the case's minimum effect (``Threshold.effect``) and [lo, hi] the interval:
SLOWER when lo > 1 + e; FASTER when hi < 1 / (1 + e); SAME when 1 / (1 + e) <= lo and hi <= 1 + e;
otherwise INCONCLUSIVE. The band is symmetric in log space (a 3 % slowdown and its inverse speedup are the
same size). INCONCLUSIVE never fails the gate and never counts as SAME.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.gate.model import Threshold
from harness.results.verdicts import FAILING, OUTCOMES

# Fewer block pairs than this give no interval, so no verdict but INCONCLUSIVE: a percentile bootstrap over
# a handful of blocks is far too narrow (with 3 it can only pick among 10 distinct resamples' medians).
MIN_BLOCKS = 6
CONFIDENCE = 0.95
N_BOOT = 2000
_NAN = float("nan")


@dataclass(frozen=True)
class Decision:
    verdict: str
    ratio: float          # PR median / base median
    lo: float             # NaN when there are too few blocks
    hi: float
    effect: float
    base_median_us: float
    pr_median_us: float
    blocks: int


def _padded(blocks: Sequence[Sequence[float]]) -> np.ndarray:
    """Blocks as rows of one array, short blocks (samples dropped as throttled) padded with NaN."""
    width = max((len(b) for b in blocks), default=0)
    out = np.full((len(blocks), max(width, 1)), np.nan)
    for i, b in enumerate(blocks):
        out[i, :len(b)] = b
    return out


def pooled_median(blocks: Sequence[Sequence[float]]) -> float:
    values = [v for b in blocks for v in b]
    return float(np.median(values)) if values else _NAN


def ratio_interval(base_blocks: Sequence[Sequence[float]], pr_blocks: Sequence[Sequence[float]], *,
                   paired: bool, confidence: float = CONFIDENCE, n_boot: int = N_BOOT,
                   seed: int = 0) -> tuple[float, float, float]:
    """(ratio, lo, hi) of median(PR) / median(base); lo and hi NaN below MIN_BLOCKS blocks a side.

    ``paired``: block i of each side was timed together, so both are drawn with the same indices.
    """
    if paired and len(base_blocks) != len(pr_blocks):
        raise ValueError(f"paired blocks need equal counts, got {len(base_blocks)} and {len(pr_blocks)}")
    mb, mp = pooled_median(base_blocks), pooled_median(pr_blocks)
    ratio = mp / mb if mb > 0 else _NAN
    if min(len(base_blocks), len(pr_blocks)) < MIN_BLOCKS or not math.isfinite(ratio):
        return ratio, _NAN, _NAN
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    b, p = _padded(base_blocks), _padded(pr_blocks)
    rng = np.random.default_rng(seed)
    ib = rng.integers(0, len(b), size=(n_boot, len(b)))
    ip = ib if paired else rng.integers(0, len(p), size=(n_boot, len(p)))
    with np.errstate(all="ignore"):
        boot = np.nanmedian(p[ip].reshape(n_boot, -1), axis=1) / np.nanmedian(b[ib].reshape(n_boot, -1), axis=1)
    boot = boot[np.isfinite(boot)]
    if boot.size == 0:
        return ratio, _NAN, _NAN
    tail = 100.0 * (1.0 - confidence) / 2.0
    lo, hi = np.percentile(boot, [tail, 100.0 - tail])
    return ratio, float(lo), float(hi)


def classify(lo: float, hi: float, effect: float) -> str:
    """The rule of the module docstring."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or effect < 0:
        return "INCONCLUSIVE"
    up = 1.0 + effect
    down = 1.0 / up
    if lo > up:
        return "SLOWER"
    if hi < down:
        return "FASTER"
    if lo >= down and hi <= up:
        return "SAME"
    return "INCONCLUSIVE"


def case_seed(key: Sequence[str]) -> int:
    """A fixed bootstrap seed per case: the same samples always give the same interval."""
    return zlib.crc32("|".join(key).encode())


def nonempty_pairs(base_blocks, pr_blocks, paired: bool) -> tuple[list, list]:
    """Drop empty blocks (every sample throttled); in a paired run the partner block goes too."""
    if paired:
        pairs = [(b, p) for b, p in zip(base_blocks, pr_blocks, strict=True) if len(b) and len(p)]
        return [list(b) for b, _ in pairs], [list(p) for _, p in pairs]
    return [list(b) for b in base_blocks if len(b)], [list(p) for p in pr_blocks if len(p)]


def decide(base_blocks, pr_blocks, threshold: Threshold, *, paired: bool, noise: float | None = None,
           confidence: float = CONFIDENCE, seed: int = 0) -> Decision:
    base_blocks, pr_blocks = nonempty_pairs(base_blocks, pr_blocks, paired)
    ratio, lo, hi = ratio_interval(base_blocks, pr_blocks, paired=paired, confidence=confidence, seed=seed)
    mb, mp = pooled_median(base_blocks), pooled_median(pr_blocks)
    effect = threshold.effect(mb if math.isfinite(mb) else None, noise)
    return Decision(classify(lo, hi, effect), ratio, lo, hi, effect, mb, mp,
                    min(len(base_blocks), len(pr_blocks)))


def spread(samples: Sequence[float]) -> float | None:
    """Half the interquartile range over the median: a robust relative noise of one side's samples."""
    if len(samples) < 4:
        return None
    p25, p50, p75 = np.percentile(np.asarray(samples, dtype=float), [25, 50, 75])
    return float((p75 - p25) / (2 * p50)) if p50 > 0 else None


def split_blocks(samples: Sequence[float], n_blocks: int, min_per_block: int = 4) -> list[list[float]]:
    """A stored run's samples, in the order taken, as consecutive blocks (as many as ``n_blocks``)."""
    values = list(samples)
    n = max(1, min(n_blocks, len(values) // min_per_block))
    edges = [round(i * len(values) / n) for i in range(n + 1)]
    return [values[edges[i]:edges[i + 1]] for i in range(n) if edges[i + 1] > edges[i]]


def counts(verdicts: Sequence[str]) -> Counter:
    unknown = set(verdicts) - set(OUTCOMES)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}")
    return Counter(verdicts)


def exit_code(verdicts: Sequence[str]) -> int:
    """0 when nothing regressed (INCONCLUSIVE included); 1 when a case is SLOWER or the PR's is wrong."""
    return 1 if any(v in FAILING for v in counts(verdicts)) else 0
