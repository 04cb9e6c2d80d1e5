"""A case's achieved rates against the measured ceilings: % of roofline, bound, verdict.

The verdict allows for noise on both sides. "model-error" (the case beat the model: the spec's bytes or
flops are wrong, or the kernel streams faster than every probe that set the ceiling) needs the case to be
above 100% even at its most favourable reading: its median at the slow end of its 95% interval, and the
ceiling at the fast end of its own interval. A case above 100% only within that noise is at the ceiling,
and passes.
"""

from __future__ import annotations

import math

from harness.spec.model import Spec
from harness.timing.ceilings import memory_ceiling


def _field(ceilings, name: str, default=None):
    """A ceilings record (the dataclass) or its JSON dict (a stored results file): the same fields."""
    if ceilings is None:
        return default
    value = ceilings.get(name) if isinstance(ceilings, dict) else getattr(ceilings, name, None)
    return default if value is None else value


def _upper(values: dict, spread: dict) -> dict:
    """Each measured value at the fast end of its interval (itself where it has no interval)."""
    out = dict(values or {})
    for k, ci in (spread or {}).items():
        if k in out and isinstance(ci, (list, tuple)) and len(ci) == 2 and ci[1] and math.isfinite(ci[1]):
            out[k] = max(out[k], ci[1])
    return out


def _floor_s(spec: Spec, env: dict, nbytes: float, flops: float, bandwidth: dict, copy_gbps, peak_tflops):
    """(seconds the roofline allows, GB/s ceiling used, t_mem, t_flop), or None without a memory ceiling."""
    gbps = memory_ceiling(bandwidth, spec.roofline.read_fraction(env), copy_gbps)
    if not gbps:
        return None
    t_mem = nbytes / (gbps * 1e9)
    t_flop = flops / (peak_tflops * 1e12) if peak_tflops else 0.0
    return max(t_mem, t_flop), gbps, t_mem, t_flop


# Beyond this much faster than the measured roof, at the most favourable reading of both intervals, a time is
# not a model's error but not physical: work skipped, replayed or left running on another stream. Measured
# false alarms at 0.5: none in the committed H200 run (reports/h200/results.json: 235 timed cases, the highest
# 108.4% of its roof); the worst honest reading seen here was a GEMM at 107-116% of a ceiling measured at one
# shape (reports/h200/experiments/ceilings/). Cold timing only: a warm (--warm) case may live in L2.
IMPLAUSIBLE_MARGIN = 0.5


def verdict(pct: float, pct_at_best: float | None, target: float) -> str:
    """``pct``: % of roofline at the medians; ``pct_at_best``: at the case's slow CI end and the ceiling's
    fast CI end (None: no intervals, judge on the medians)."""
    lowest = pct if pct_at_best is None else min(pct, pct_at_best)
    if lowest > 100.0 * (1.0 + IMPLAUSIBLE_MARGIN):
        return "implausible"
    if lowest > 100.0:
        return "model-error"
    return "pass" if pct >= 100.0 * target or pct > 100.0 else "below-target"


def roofline(spec: Spec, env: dict, median_us: float, ceilings, dtype: str,
             median_ci_us: tuple | list | None = None) -> dict:
    """Achieved rates, % of the measured roofline and the verdict against the spec's target.

    ``median_ci_us``: the 95% interval of the case's median; the ceilings' own intervals are read from
    ``ceilings`` (``bandwidth_ci_gbps``, ``matmul_ci_tflops``)."""
    none = dict(bytes=None, flops=None, gbps=None, tflops=None, pct_roofline=None, bound=None, ceiling_gbps=None,
                target=None, verdict="n/a", compute=None)
    if spec.roofline is None or not median_us or median_us != median_us:
        return none
    nbytes, flops = float(spec.roofline.bytes(env)), float(spec.roofline.flops(env))
    seconds = median_us * 1e-6
    compute = spec.roofline.compute_dtype(dtype)  # the rate the ceilings measured for this kernel's arithmetic
    out = dict(none, bytes=nbytes, flops=flops, gbps=nbytes / seconds / 1e9, tflops=flops / seconds / 1e12,
               target=spec.roofline.target, compute=compute)
    if ceilings is None:
        return out
    peak = _positive(_field(ceilings, "matmul_tflops", {}).get(compute))
    bandwidth, copy = _field(ceilings, "bandwidth_gbps", {}), _field(ceilings, "copy_gbps")
    at_median = _floor_s(spec, env, nbytes, flops, bandwidth, copy, peak)
    if at_median is None:
        return out  # no measured ceiling: rates only, no % of roofline
    floor, gbps, t_mem, t_flop = at_median
    pct = 100.0 * floor / seconds
    pct_at_best = None
    slow = max((v for v in (median_ci_us or ()) if v and math.isfinite(v)), default=None)
    band_hi = _upper(bandwidth, _field(ceilings, "bandwidth_ci_gbps", {}))
    copy_hi = band_hi.get("copy", copy) if copy is not None else None
    peak_hi = _positive(_upper(_field(ceilings, "matmul_tflops", {}), _field(ceilings, "matmul_ci_tflops", {}))
                      .get(compute))
    best = _floor_s(spec, env, nbytes, flops, band_hi, copy_hi, peak_hi)
    if best is not None:
        pct_at_best = 100.0 * best[0] / (max(slow or median_us, median_us) * 1e-6)
    out.update(pct_roofline=pct, bound="memory" if t_mem >= t_flop else "compute", ceiling_gbps=gbps,
               verdict=verdict(pct, pct_at_best, spec.roofline.target))
    return out


def implausible(median_us: float, roof: dict, ceilings) -> str:
    """Why a time cannot be physical ('' when it can): at or below zero once the empty event pair's cost is
    taken off, or faster than the measured roof beyond both intervals and :data:`IMPLAUSIBLE_MARGIN`."""
    if median_us <= 0.0:
        return f"implausible: a median of {median_us:.3f} us is below the cost of an empty event pair"
    if roof.get("verdict") != "implausible":
        return ""
    if roof.get("bound") == "compute" and roof.get("tflops") is not None:
        peak = _positive(_field(ceilings, "matmul_tflops", {}).get(roof.get("compute")))
        return (f"implausible: {roof['flops']:.3g} FLOP in {median_us:.2f} us is {roof['tflops'] / peak:.1f}x the "
                f"measured {peak:.0f} TFLOP/s") if peak else "implausible"
    return (f"implausible: {_size(roof['bytes'])} in {median_us:.2f} us is {roof['gbps'] / roof['ceiling_gbps']:.1f}x "
            f"the measured {roof['ceiling_gbps'] / 1e3:.2f} TB/s")


def _size(nbytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def _positive(value):
    return value if isinstance(value, (int, float)) and math.isfinite(value) and value > 0 else None
