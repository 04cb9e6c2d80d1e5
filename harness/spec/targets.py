"""``[[targets]]``: what a kernel promises against another provider, at named bench cases.

    [[targets]]
    provider = "cuda"                     # optional: the run's candidate when absent
    against = "torch"                     # a backend, a peer, "reference" or "torch.compile"
    speedup = 2.5                         # against's median over provider's, at least (0.8: within 1.25x)
    where = [{ M = 1, N = 4096, K = 4096 }]   # case values; each entry must match a bench case
    metric = "device"                     # or "host": host time per call
    mode = "fwd"                          # or "bwd", "full" (a spec with [backward])
    dtype = "bf16"                        # optional: every dtype measured when absent
    reason = "..."                        # why this is the target
    gap = "..."                           # optional: why it is not met, as measured

The report judges each target on the run's own figures (harness/report/targets.py).
"""

from __future__ import annotations

import math

from harness.spec.model import TARGET_METRICS, Case, Target
from harness.spec.schema import Reader, describe, did_you_mean

MODES = ("fwd", "bwd", "full")
OTHER_PROVIDERS = ("reference", "torch.compile")


def read_targets(r: Reader, raw, providers: list[str], dtypes: tuple, bench: list[Case],
                 has_backward: bool) -> tuple[Target, ...]:
    if not isinstance(raw, list):
        r.problem("targets", f"expected an array of tables ([[targets]]), got {describe(raw)}")
        return ()
    names = list(providers) + list(OTHER_PROVIDERS)
    out = []
    for i, t in enumerate(raw):
        key = f"targets[{i}]"
        if not isinstance(t, dict):
            r.problem(key, f"expected a table, got {describe(t)}")
            continue
        r.keys(t, ["provider", "against", "speedup", "where", "metric", "mode", "dtype", "reason", "gap"], key,
               required=["against", "speedup", "where", "reason"])
        provider = r.get(t, "provider", str, key, default=None)
        against = r.get(t, "against", str, key, default="")
        for name, value in (("provider", provider), ("against", against)):
            if value and value not in names:
                r.problem(f"{key}.{name}", f'no provider "{value}"{did_you_mean(value, names)} (one of '
                                           f'{", ".join(names)})')
        if provider is not None and provider == against:
            r.problem(f"{key}.against", f'is the provider itself ("{against}")')
        speedup = r.get(t, "speedup", float, key, default=None)
        if speedup is not None and not (math.isfinite(speedup) and speedup > 0):
            r.problem(f"{key}.speedup", f"must be a positive number, got {speedup}")
        metric = _choice(r, t, "metric", TARGET_METRICS, key, "device")
        mode = _choice(r, t, "mode", MODES, key, "fwd")
        if mode != "fwd" and not has_backward:
            r.problem(f"{key}.mode", f'"{mode}" needs a [backward] table')
        dtype = r.get(t, "dtype", str, key, default=None)
        if dtype is not None and dtype not in dtypes:
            r.problem(f"{key}.dtype", f'"{dtype}" is not one of kernel.dtypes{did_you_mean(dtype, dtypes)} '
                                      f'({", ".join(dtypes)})')
        where = _where(r, t.get("where"), f"{key}.where", bench)
        reason = _text(r, t, "reason", key, "why this is the target")
        gap = _text(r, t, "gap", key, "why the target is not met") if "gap" in t else None
        if where is not None and against and speedup and reason:
            out.append(Target(against, float(speedup), where, reason, provider, metric, mode, dtype, gap))
    return tuple(out)


def _choice(r: Reader, t: dict, name: str, options: tuple, key: str, default: str) -> str:
    value = r.get(t, name, str, key, default=default)
    if value is not None and value not in options:
        r.problem(f"{key}.{name}", f'unknown {name} "{value}"{did_you_mean(value, options)} (one of '
                                   f'{", ".join(options)})')
    return value


def _text(r: Reader, t: dict, name: str, key: str, what: str) -> str | None:
    value = r.get(t, name, str, key, default=None)
    if value is not None and not value.strip():
        r.problem(f"{key}.{name}", f"expected {what}, got an empty string")
        return None
    return " ".join(value.split()) if value else None


def _where(r: Reader, raw, key: str, bench: list[Case]):
    """Each entry a table of case values that matches at least one bench case."""
    entries = [raw] if isinstance(raw, dict) else raw
    if not isinstance(entries, list) or not entries:
        r.problem(key, f"expected a table of case values, or a non-empty array of them, got {describe(raw)}")
        return None
    if not bench:
        r.problem(key, "the spec has no bench cases ([[cases.bench]]) for a target to name")
        return None
    symbols = {k for c in bench for k in c.values}
    out = []
    for j, entry in enumerate(entries):
        at = f"{key}[{j}]" if isinstance(raw, list) else key
        if not isinstance(entry, dict) or not entry:
            got = "an empty table" if isinstance(entry, dict) else describe(entry)
            r.problem(at, f"expected a table of case values, got {got}")
            return None
        unknown = [k for k in entry if k not in symbols]
        if unknown:
            r.problem(f"{at}.{unknown[0]}", f'no bench case sets "{unknown[0]}"'
                                            f'{did_you_mean(unknown[0], sorted(symbols))}')
            return None
        if not any(matches(c.values, entry) for c in bench):
            shown = ", ".join(f"{k} = {v!r}" for k, v in entry.items())
            r.problem(at, f"matches no bench case ({shown})")
            return None
        out.append(tuple(entry.items()))
    return tuple(out)


def matches(values: dict, entry) -> bool:
    """Whether a case with these values is one a ``where`` entry (a dict or its items) names."""
    items = entry.items() if isinstance(entry, dict) else entry
    return all(k in values and values[k] == v and type(values[k]) is type(v) for k, v in items)


def names(t: Target, values: dict, dtype: str, mode: str) -> bool:
    """Whether ``t`` speaks of a case with these values, in this dtype and mode (whichever provider)."""
    return mode == t.mode and t.dtype in (None, dtype) and any(matches(values, w) for w in t.where)
