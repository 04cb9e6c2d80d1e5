"""``compare BASE.json PR.json``: two stored results files compared, case by case, with the same verdict rule.

Two stored runs share no moment, so the in-process pairing is gone: each side's samples are cut into
consecutive blocks, resampled independently, and the threshold is the cross-run one (separate processes
drift more than interleaved blocks; harness/gate/calibration.py). Files from different devices, drivers or
spec files are refused unless forced, and a forced comparison says what it overrode.
"""

from __future__ import annotations

from pathlib import Path

from harness.gate.model import STORED, CaseComparison, Comparison, Side, Threshold
from harness.gate.verdict import CONFIDENCE, case_seed, decide, split_blocks, spread

STORED_BLOCKS = 10


class Refused(ValueError):
    """The two files should not be compared; the message is one line."""


def _clocks(env: dict) -> str | None:
    n = env.get("nvml")
    if not isinstance(n, dict) or n.get("nvml") != "ok":
        return None
    return (f"SM {n.get('sm_clock_mhz')}/{n.get('sm_clock_max_mhz')} MHz, memory {n.get('mem_clock_mhz')}/"
            f"{n.get('mem_clock_max_mhz')} MHz, {n.get('temperature_c')} C, {n.get('power_draw_w')} W")


def side_from_environment(label: str, source: str, env: dict, *, spec_sha256: dict | None = None) -> Side:
    def text(key):
        v = env.get(key)
        return None if v is None else str(v)

    hashes = spec_sha256 if spec_sha256 is not None else {
        Path(k).name: v for k, v in (env.get("spec_sha256") or {}).items()}
    dirty = env.get("git_dirty")
    return Side(label, source, text("git_commit"), dirty if isinstance(dirty, bool) else None, text("device"),
                text("driver"), text("torch"), text("triton"), text("cuda_runtime"), _clocks(env), text("date"),
                dict(hashes))


def refusals(base: Side, pr: Side) -> list[str]:
    """Why these two runs are not comparable: device, driver, or a spec file both name but that differs."""
    out = []
    for what, a, b in (("devices", base.device, pr.device), ("drivers", base.driver, pr.driver)):
        if a != b:
            out.append(f"different {what} (base {a}, PR {b})")
    changed = sorted(k for k in set(base.spec_sha256) & set(pr.spec_sha256) if base.spec_sha256[k] != pr.spec_sha256[k])
    if changed:
        out.append(f"different spec files ({', '.join(changed)})")
    return out


def _candidate(cases, provider: str | None):
    found = [c for c in cases if (c.provider == provider if provider else c.role == "candidate")]
    return found[0] if found else None


def _groups(results) -> dict:
    """Each run's cases by (kernel, case, dtype, mode): a case's fwd, bwd and full rows are compared apart."""
    out: dict = {}
    for c in results.cases:
        out.setdefault((c.kernel, c.case_id, c.dtype, c.mode), []).append(c)
    return out


def _join(bg: dict, pg: dict) -> list[tuple[tuple, str]]:
    """The outer join of the two runs' (kernel, case, dtype, mode) keys, in key order: each key with "both",
    "left_only" (base) or "right_only" (PR)."""
    import pandas as pd

    cols = ["kernel", "case_id", "dtype", "mode"]
    base, pr = pd.DataFrame(list(bg), columns=cols), pd.DataFrame(list(pg), columns=cols)
    joined = base.merge(pr, how="outer", on=cols, indicator=True).sort_values(cols)
    return [((k, c, d, m), str(side)) for k, c, d, m, side in joined.itertuples(index=False, name=None)]


def _row_key(key: tuple) -> tuple:
    """CaseComparison.key of a (kernel, case, dtype, mode): a fwd row keeps the three-part key (noise files and
    seeds of runs before modes)."""
    return key[:3] if key[3] == "fwd" else key


def compare_case(key, base, pr, rule: Threshold, noise: float | None, confidence: float) -> CaseComparison:
    """One case of two stored runs, ``key`` (kernel, case, dtype, mode); ``base`` and ``pr`` are CaseResults
    (either may be None)."""
    kernel, case_id, dtype, mode = key
    ref = pr or base
    fields = dict(kernel=kernel, dtype=dtype, case_id=case_id, mode=mode, shape=dict(ref.shape) if ref else {},
                  headline=ref.headline if ref else False,
                  base_provider=base.provider if base else "", pr_provider=pr.provider if pr else "",
                  base_median_us=None, pr_median_us=None, ratio=None, ratio_lo=None, ratio_hi=None, effect=None,
                  threshold=rule, noise=noise, base_spread=None, pr_spread=None,
                  base_pct_roofline=base.pct_roofline if base else None,
                  pr_pct_roofline=pr.pct_roofline if pr else None, blocks=0, stop="", dropped=0,
                  gpu_index=pr.gpu_index if pr else None, gpu_uuid=pr.gpu_uuid if pr else None, wall_s=0.0,
                  base_peak_mem_bytes=base.peak_mem_bytes if base else None,
                  pr_peak_mem_bytes=pr.peak_mem_bytes if pr else None)
    if pr is None or base is None:
        missing = "PR" if pr is None else "base"
        return CaseComparison(**fields, verdict="NOT-COMPARED", reason=f"no such provider in the {missing} run")
    if pr.status in ("wrong", "error"):
        return CaseComparison(**fields, verdict=pr.status.upper(), reason=f"PR {pr.provider}: {pr.reason}")
    if pr.status != "ok" or base.status != "ok":
        side, c = ("PR", pr) if pr.status != "ok" else ("base", base)
        return CaseComparison(**fields, verdict="NOT-COMPARED", reason=f"{side} {c.provider} {c.status}: {c.reason}")
    b, p = split_blocks(base.samples_us, STORED_BLOCKS), split_blocks(pr.samples_us, STORED_BLOCKS)
    d = decide(b, p, rule, paired=False, noise=noise, confidence=confidence, seed=case_seed(_row_key(key)))
    finite = (lambda x: x if x == x else None)  # noqa: E731
    fields.update(base_median_us=d.base_median_us, pr_median_us=d.pr_median_us, ratio=d.ratio,
                  ratio_lo=finite(d.lo), ratio_hi=finite(d.hi), effect=d.effect, base_spread=spread(base.samples_us),
                  pr_spread=spread(pr.samples_us), blocks=d.blocks, stop="stored",
                  dropped=len(base.dropped_us) + len(pr.dropped_us))
    return CaseComparison(**fields, verdict=d.verdict,
                          reason="" if d.verdict != "INCONCLUSIVE" else "stored samples cannot be extended",
                          base_blocks_us=tuple(map(tuple, b)), pr_blocks_us=tuple(map(tuple, p)))


def compare_results(base_results, pr_results, *, base_source: str, pr_source: str, threshold: Threshold,
                    force: bool = False, noise: dict | None = None, provider: str | None = None,
                    spec_rules: dict | None = None, confidence: float = CONFIDENCE) -> Comparison:
    """Raises :class:`Refused` (one line) for runs that are not comparable, unless ``force``."""
    base = side_from_environment("base", base_source, base_results.environment)
    pr = side_from_environment("PR", pr_source, pr_results.environment)
    reasons = refusals(base, pr)
    if reasons and not force:
        raise Refused(f"compare: {base_source} and {pr_source}: {'; '.join(reasons)}; pass --force to compare "
                      "anyway")
    bg, pg = _groups(base_results), _groups(pr_results)
    b_kernels, p_kernels = {k[0] for k in bg}, {k[0] for k in pg}
    common = b_kernels & p_kernels
    cases, unmatched = [], []
    for key, side in _join(bg, pg):
        if key[0] not in common:
            continue
        if side != "both":
            mode = "" if key[3] == "fwd" else f" {key[3]}"
            where = "PR" if side == "right_only" else "base"
            unmatched.append(f"{key[0]} {key[2]} {key[1]}{mode}: only in the {where}")
            continue
        rule = (spec_rules or {}).get(key[0], threshold)
        cases.append(compare_case(key, _candidate(bg[key], provider), _candidate(pg[key], provider), rule,
                                  (noise or {}).get(_row_key(key)), confidence))
    aa = bool(base.commit) and base.commit == pr.commit and base.dirty is False and pr.dirty is False
    return Comparison(STORED, aa, base, pr, tuple(cases), tuple(sorted(p_kernels - b_kernels)),
                      tuple(sorted(b_kernels - p_kernels)), tuple(unmatched), threshold, confidence,
                      {"blocks per side": f"up to {STORED_BLOCKS} consecutive blocks of each run's samples",
                       "resampling": "each side's blocks independently (two runs share no moment)"},
                      tuple(reasons) if force else ())
