"""Distribution statistics of timing samples: order statistics, bootstrap intervals, speedups, and
the convergence rule that decides when a measurement has enough samples.

Nothing is ever dropped: outliers (beyond 1.5 IQR from the quartiles) are counted, not removed.
Undefined statistics (the spread of one sample, anything of none) are NaN, never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pandas costs every worker process an import; only stats_frame needs it
    import pandas as pd

_NAN = float("nan")
# Bootstrap resamples are drawn in blocks of about this many indices, so memory stays bounded
# (a few tens of MB) however many samples a measurement kept.
_BLOCK_ELEMENTS = 4_000_000


@dataclass(frozen=True)
class Stats:
    n: int
    min: float
    p5: float
    p25: float
    median: float
    p75: float
    p95: float
    max: float
    mean: float
    std: float            # sample standard deviation (ddof=1)
    cv: float             # std / mean, a fraction
    iqr: float
    median_ci_lo: float   # bootstrap percentile interval of the median
    median_ci_hi: float
    outliers_low: int     # below p25 - 1.5 iqr (counted, never dropped)
    outliers_high: int    # above p75 + 1.5 iqr

    def as_json(self) -> dict:
        """Field dict with NaN as None, so the result is standard JSON."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class Ratio:
    ratio: float   # median(baseline) / median(candidate): > 1 means the candidate is faster
    lo: float
    hi: float


def _array(samples: Sequence[float]) -> np.ndarray:
    return np.asarray(samples, dtype=np.float64).ravel()


def _bootstrap_medians(x: np.ndarray, rng: np.random.Generator, n_boot: int) -> np.ndarray:
    n = x.size
    out = np.empty(n_boot)
    per_block = max(1, _BLOCK_ELEMENTS // n)
    for start in range(0, n_boot, per_block):
        k = min(per_block, n_boot - start)
        out[start:start + k] = np.median(x[rng.integers(0, n, size=(k, n))], axis=1)
    return out


def _interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    tail = 100.0 * (1.0 - confidence) / 2.0
    lo, hi = np.percentile(values, [tail, 100.0 - tail])
    return float(lo), float(hi)


def summarize(samples: Sequence[float], *, seed: int = 0, n_boot: int = 2000,
              confidence: float = 0.95) -> Stats:
    """Order statistics, mean/std/cv, and a bootstrap interval of the median."""
    x = _array(samples)
    n = int(x.size)
    if n == 0:
        return Stats(0, *([_NAN] * 13), 0, 0)
    p5, p25, median, p75, p95 = (float(v) for v in np.percentile(x, [5, 25, 50, 75, 95]))
    iqr = p75 - p25
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else _NAN
    cv = std / mean if n > 1 and mean != 0 else _NAN
    if n > 1:
        lo, hi = _interval(_bootstrap_medians(x, np.random.default_rng(seed), n_boot), confidence)
    else:
        lo = hi = _NAN
    return Stats(
        n=n, min=float(x.min()), p5=p5, p25=p25, median=median, p75=p75, p95=p95, max=float(x.max()),
        mean=mean, std=std, cv=cv, iqr=iqr, median_ci_lo=lo, median_ci_hi=hi,
        outliers_low=int((x < p25 - 1.5 * iqr).sum()), outliers_high=int((x > p75 + 1.5 * iqr).sum()),
    )


def speedup(baseline: Sequence[float], candidate: Sequence[float], *, seed: int = 0, n_boot: int = 2000,
            confidence: float = 0.95) -> Ratio:
    """median(baseline) / median(candidate), with a bootstrap interval of that ratio of medians.

    The two sample sets are resampled independently (they come from separate measurements).
    """
    b, c = _array(baseline), _array(candidate)
    if b.size == 0 or c.size == 0:
        return Ratio(_NAN, _NAN, _NAN)
    mc = float(np.median(c))
    ratio = float(np.median(b)) / mc if mc != 0 else _NAN
    if b.size < 2 or c.size < 2 or math.isnan(ratio):
        return Ratio(ratio, _NAN, _NAN)
    rng = np.random.default_rng(seed)
    boot_b = _bootstrap_medians(b, rng, n_boot)
    boot_c = _bootstrap_medians(c, rng, n_boot)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = boot_b / boot_c
    lo, hi = _interval(ratios[np.isfinite(ratios)], confidence) if np.isfinite(ratios).any() else (_NAN, _NAN)
    return Ratio(ratio, lo, hi)


def stats_frame(samples_by_label: dict[str, Sequence[float]], *, seed: int = 0) -> pd.DataFrame:
    """One row per label (the index, named "label"), one column per :class:`Stats` field."""
    import pandas as pd

    columns = [f.name for f in fields(Stats)]
    rows = [asdict(summarize(v, seed=seed)) for v in samples_by_label.values()]
    return pd.DataFrame(rows, columns=columns, index=pd.Index(list(samples_by_label), name="label"))


NOISE_EVERY, NOISE_WINDOW, NOISE_TOL = 16, 8, 0.05


class StoppingRule:
    """nvbench-style convergence on a stream of samples (microseconds); pure, so testable without timing.

    ``config`` is anything with min_samples, max_rsd, min_time_s, max_samples and timeout_s (the
    engine's TimingConfig). Verdicts, in order of precedence once min_samples are in:
    ``rsd``: relative std <= max_rsd and at least min_time_s of sample time accumulated;
    ``noise-stable``: the relative std, recorded every ``every`` samples, moved by at most ``tol``
    (relative to the latest record) over the last ``window`` records, so more samples would not
    sharpen it (short kernels never reach a 0.5% rsd: nvbench issue #61);
    then ``max-samples`` and ``timeout`` (wall clock), which apply even below min_samples.
    """

    def __init__(self, config, *, every: int = NOISE_EVERY, window: int = NOISE_WINDOW,
                 tol: float = NOISE_TOL):
        self.cfg, self.every, self.window, self.tol = config, every, window, tol
        self.n, self.total_s, self._mean, self._m2 = 0, 0.0, 0.0, 0.0
        self.noise: list[float] = []

    def add(self, sample_us: float) -> None:
        self.n += 1
        self.total_s += sample_us * 1e-6
        delta = sample_us - self._mean  # Welford: O(1) per sample, no cancellation
        self._mean += delta / self.n
        self._m2 += delta * (sample_us - self._mean)
        if self.n % self.every == 0:
            self.noise.append(self.rsd)

    @property
    def rsd(self) -> float:
        if self.n < 2 or self._mean <= 0:
            return math.inf
        return math.sqrt(max(self._m2, 0.0) / (self.n - 1)) / self._mean

    def noise_stable(self) -> bool:
        if len(self.noise) < self.window:
            return False
        last = self.noise[-self.window:]
        spread, ref = max(last) - min(last), last[-1]
        return spread == 0.0 or (math.isfinite(ref) and ref > 0 and spread / ref <= self.tol)

    def verdict(self, wall_s: float) -> str | None:
        """Why to stop now, or None to go on."""
        if self.n >= self.cfg.min_samples:
            if self.total_s >= self.cfg.min_time_s and self.rsd <= self.cfg.max_rsd:
                return "rsd"
            if self.noise_stable():
                return "noise-stable"
        if self.n >= self.cfg.max_samples:
            return "max-samples"
        if wall_s >= self.cfg.timeout_s:
            return "timeout"
        return None
