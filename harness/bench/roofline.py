"""A case's achieved rates against the measured ceilings: % of roofline, bound, verdict."""

from __future__ import annotations

import math

from harness.spec.model import Spec
from harness.timing.ceilings import memory_ceiling


def roofline(spec: Spec, env: dict, median_us: float, ceilings, dtype: str) -> dict:
    """Achieved rates, % of the measured roofline and the verdict against the spec's target."""
    none = dict(bytes=None, flops=None, gbps=None, tflops=None, pct_roofline=None, bound=None, ceiling_gbps=None,
                target=None, verdict="n/a")
    if spec.roofline is None or not median_us or median_us != median_us:
        return none
    nbytes, flops = float(spec.roofline.bytes(env)), float(spec.roofline.flops(env))
    seconds = median_us * 1e-6
    out = dict(none, bytes=nbytes, flops=flops, gbps=nbytes / seconds / 1e9, tflops=flops / seconds / 1e12,
               target=spec.roofline.target)
    peak_tflops = (ceilings.matmul_tflops or {}).get(dtype) if ceilings else None
    peak_tflops = peak_tflops if peak_tflops and math.isfinite(peak_tflops) else None
    bandwidth = memory_ceiling(ceilings.bandwidth_gbps, spec.roofline.read_fraction(env),
                               ceilings.copy_gbps) if ceilings else None
    if not bandwidth:
        return out  # no measured ceiling: rates only, no % of roofline
    t_mem = nbytes / (bandwidth * 1e9)
    t_flop = flops / (peak_tflops * 1e12) if peak_tflops else 0.0
    floor = max(t_mem, t_flop)
    pct = 100.0 * floor / seconds
    verdict = "model-error" if pct > 100.0 else ("pass" if pct >= 100.0 * spec.roofline.target else "below-target")
    out.update(pct_roofline=pct, bound="memory" if t_mem >= t_flop else "compute", ceiling_gbps=bandwidth,
               verdict=verdict)
    return out
