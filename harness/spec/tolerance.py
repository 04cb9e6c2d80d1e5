"""Reading one tolerance table (``[tolerance.<dtype>]``, an output's own ``tolerance``, a gradient's in
``[backward.tolerance]``): the one rule that anything looser than the dtype's default needs a reason."""

from __future__ import annotations

import math

from harness.spec import expr as ex
from harness.spec.model import DEFAULT_TOLERANCES, FLOAT_DTYPES, FP8_DTYPES, Tolerance
from harness.spec.schema import Reader, describe

# Tolerance fields that may be an expression over the case's symbols instead of a number.
SCALABLE = ("rtol", "atol", "mismatch_atol", "norm_rtol")


def read_tolerance(r: Reader, key: str, t: dict, dtype: str | None) -> Tolerance:
    """``[tolerance.<dtype>]`` or a tensor's own ``tolerance``; anything looser than the default needs a reason.

    ``dtype`` None: a case-dtype tensor's own tolerance, whose baseline is the strictest float default."""
    r.keys(t, ["rtol", "atol", "max_mismatch", "mismatch_atol", "norm_rtol", "reason"], key)
    if dtype in FLOAT_DTYPES + FP8_DTYPES or dtype is None:
        d_rtol, d_atol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0)) if dtype else min(DEFAULT_TOLERANCES.values())
    else:  # integers are compared exactly unless the spec says otherwise
        d_rtol, d_atol = 0.0, 0.0
    values, scaled = {}, []
    for n, default in (("rtol", d_rtol), ("atol", d_atol), ("max_mismatch", 0.0), ("mismatch_atol", 0.0),
                       ("norm_rtol", None)):
        if n in SCALABLE and isinstance(t.get(n), str):  # an expression over the case's symbols
            try:
                scaled.append((n, ex.parse(t[n])))
            except ex.ExprError as exc:  # worded for the common case, a number mistyped as a string
                r.problem(f"{key}.{n}", f"expected a number, got {describe(t[n])} (or an expression over the "
                                        f"case's symbols: {exc})")
            values[n] = math.nan  # Tolerance.at gives the number for a case; semantics checks every case's
            continue
        v = r.get(t, n, float, key, default=default)
        if v is not None and not 0 <= v < math.inf:
            r.problem(f"{key}.{n}", f"must be a finite number >= 0, got {v}")
        values[n] = v
    if not values["max_mismatch"] <= 1:
        r.problem(f"{key}.max_mismatch", f"is a fraction of the elements, at most 1, got {values['max_mismatch']:g}")
    if values["max_mismatch"] and "mismatch_atol" not in t:
        r.problem(f"{key}.mismatch_atol", "required with max_mismatch: how far outside the bound a budgeted "
                                          "element may be")
    if "mismatch_atol" in t and not values["max_mismatch"]:
        r.problem(f"{key}.mismatch_atol", "has no effect without max_mismatch")
    reason = r.get(t, "reason", str, key, default="").strip()
    looser = values["rtol"] > d_rtol or values["atol"] > d_atol or values["max_mismatch"] > 0 or "norm_rtol" in t
    if looser and not reason:  # an expression's reason: semantics, once its symbols are known good
        r.problem(key, f"loosens the default (rtol {d_rtol:g}, atol {d_atol:g}, no mismatch budget, the dtype's "
                       "norm_rtol) without a reason")
    return Tolerance(values["rtol"], values["atol"], reason, values["max_mismatch"], values["mismatch_atol"],
                     values["norm_rtol"], tuple(scaled))
