"""How far a result is from the reference: the elementwise bound, the mismatch budget and the normwise bound.

Everything is computed in a wide type (fp64 for floats, int64 for integers), so an int8 that is off by 128
does not wrap to "equal", and an error is never rounded away. Two bounds, both must hold:

- elementwise: ``|got - ref| <= atol + rtol * |ref|``. A tolerance with ``max_mismatch`` lets that fraction
  of the elements miss it, each by at most ``mismatch_atol``; an element further out fails regardless.
- normwise, for floating-point tensors, per row (the last dimension):
  ``||got - ref||_2 <= norm_rtol * ||ref||_2 + sqrt(n) * s`` with ``s`` the smallest subnormal of the
  result's dtype (the resolution floor of a row that underflows; fp16 softmax rows of 2**17 columns do), at
  least fp32's smallest normal below fp64 (:func:`norm_floor`: GPUs flush fp32 subnormals).
  It scales with the row, so it fails at any magnitude, where an atol of 1e-5 hides a 30% error on
  outputs of 3e-5. Rows whose reference is all zeros are left to the elementwise bound, and non-finite
  elements to the elementwise and nan_inf checks.

The default ``norm_rtol`` (a tolerance's ``norm_rtol`` replaces it) is a few units of the result's own
precision: 2 eps for fp16 and bf16, whose error is the output's rounding (at most half an ulp; a
truncating conversion, as the Triton interpreter's bf16 one, a whole one) plus at most one intermediate
rounding; 16 eps for fp32 and fp64, whose error is the computation's own (reductions over 2**18 terms,
hardware exp and division approximations of about 2 ulp).

A reference value beyond the result dtype's range is taken as that dtype's rounding of it, an infinity.

A tolerance may give its bounds as expressions over the case's symbols (``atol = "1e-6 * K"``: a GEMM's
fp32 accumulation error grows with the reduction length); they are evaluated for the case being checked.
"""

from __future__ import annotations

import math

import torch

from harness.correctness.poison import first_index
from harness.correctness.registry import CheckFailure, check
from harness.spec.model import Tolerance

NORM_RTOL = {torch.float64: 16 * torch.finfo(torch.float64).eps, torch.float32: 16 * torch.finfo(torch.float32).eps,
             torch.float16: 2 * torch.finfo(torch.float16).eps, torch.bfloat16: 2 * torch.finfo(torch.bfloat16).eps}
_FTZ = torch.finfo(torch.float32).smallest_normal
_CHUNK = 1 << 24  # elements compared at a time: a >2**31-element case must not need full-size fp64 temporaries


def norm_rtol(tol: Tolerance, dtype: torch.dtype) -> float:
    return tol.norm_rtol if tol.norm_rtol is not None else NORM_RTOL.get(dtype, 16 * torch.finfo(dtype).eps)


def norm_floor(n: int, dtype: torch.dtype) -> float:
    """The normwise bound's absolute floor for a row of ``n``: ``sqrt(n) * s``, ``s`` the result dtype's smallest
    subnormal, or fp32's smallest normal when that is larger (not for fp64): a GPU's fp32 exp, divide and rsqrt
    flush subnormal results to zero (ex2.approx.ftz), so an fp32 or bf16 value below fp32's normal range is noise
    (the far tail of a gelu or silu, in a GEMM row of one column)."""
    fi = torch.finfo(dtype)
    s = fi.smallest_normal * fi.eps
    return math.sqrt(n) * (s if dtype == torch.float64 else max(s, _FTZ))


def _wide(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float64 if x.dtype.is_floating_point else torch.int64)


def fmt(x: torch.Tensor, index: tuple[int, ...]) -> str:
    """One element as its own type reads: integers exactly, floats to 7 significant digits."""
    v = x[index].item()
    return f"{v:.7g}" if isinstance(v, float) else str(v)


def _unravel(flat: int, shape) -> tuple[int, ...]:
    out = []
    for n in reversed(tuple(shape)):
        out.append(flat % n if n else 0)
        flat = flat // n if n else 0
    return tuple(reversed(out))


def _abs_diff(g: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """|g - e| of int64 tensors, exact, as fp64 (a difference that overflows int64 is +inf)."""
    d = g - e
    wrapped = ((g >= e) != (d >= 0)) | (d == torch.iinfo(torch.int64).min)
    return d.abs().to(torch.float64).masked_fill(wrapped, math.inf)


def mismatch(got: torch.Tensor, expected: torch.Tensor, tol: Tolerance, atol_floor: bool = False) -> str | None:
    """None when ``got`` is within ``tol`` of ``expected`` (elementwise, then normwise), else why not.

    ``atol_floor``: the normwise bound's floor also takes ``sqrt(n) * atol``, for gradients: a gradient row that
    is zero in exact arithmetic (RMSNorm's dx over one column) holds rounding noise only, which the relative
    bound would judge against itself."""
    expected = _overflowed(got, expected)
    if _within(got, expected, tol):
        return None
    return _elementwise(got, expected, tol) or (_normwise(got, expected, tol, atol_floor)
                                                if got.dtype.is_floating_point else None)


def _overflowed(got: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """``expected`` with each value past the result dtype's range as that dtype rounds it, +-inf: the right result
    there is an infinity (an fp16 sum of half a million broadcast grad outputs), which a finite reference would
    call an error."""
    if (not got.dtype.is_floating_point or expected.numel() == 0 or not expected.dtype.is_floating_point
            or torch.finfo(expected.dtype).max <= torch.finfo(got.dtype).max):  # no wider than the result
        return expected
    lo, hi = torch.aminmax(expected)  # without a full-size temporary: the common case costs one pass
    if max(-float(lo), float(hi)) <= torch.finfo(got.dtype).max:  # False for a NaN or an inf: the exact way
        return expected
    rounded = expected.to(got.dtype).to(expected.dtype)  # back to the wide type: FP8 has no isinf
    return torch.where(torch.isinf(rounded) & torch.isfinite(expected), rounded, expected)


def _rows(got: torch.Tensor, expected: torch.Tensor):
    """Both as (rows, n) over the last dimension, and the blocks of them to compare at a time (rows, columns)."""
    n = got.shape[-1] if got.dim() else 1
    g2, e2 = got.reshape(-1, n), expected.reshape(-1, n)
    rows_per = max(1, _CHUNK // max(n, 1))
    blocks = [(slice(r0, r0 + rows_per), slice(c0, c0 + _CHUNK)) for r0 in range(0, g2.shape[0], rows_per)
              for c0 in range(0, n, _CHUNK)]
    return g2, e2, n, blocks


def _within(got: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> bool:
    """The common case, fast: every element within the elementwise bound and every row within the normwise one,
    all finite. False sends the comparison to the exact accounting (NaN, Inf, a budget, a failure)."""
    if got.numel() == 0:
        return True
    g2, e2, n, blocks = _rows(got, expected)
    floating = got.dtype.is_floating_point
    bound = norm_rtol(tol, got.dtype) if floating else 0.0
    floor = norm_floor(n, got.dtype) if floating else 0.0
    err_sq = ref_sq = 0
    for k, (rows, cols) in enumerate(blocks):
        g, e = _wide(g2[rows, cols]), _wide(e2[rows, cols])
        d = (g - e).abs_() if floating else _abs_diff(g, e)
        if not bool((d <= e.abs().to(torch.float64).mul_(tol.rtol).add_(tol.atol)).all()):
            return False
        if not floating:
            continue
        err_sq = err_sq + torch.linalg.vector_norm(d, dim=-1).square()
        ref_sq = ref_sq + torch.linalg.vector_norm(e, dim=-1).square()
        if k + 1 == len(blocks) or blocks[k + 1][0] != rows:  # the rows are complete
            if not bool((err_sq.sqrt() <= bound * ref_sq.sqrt() + floor).all()):
                return False
            err_sq = ref_sq = 0
    return True


def _elementwise(got: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> str | None:
    g_flat, e_flat = got.reshape(-1), expected.reshape(-1)
    numel = e_flat.numel()
    n_soft = n_hard = 0
    first_bad = first_hard = None
    max_abs = max_rel = 0.0
    for start in range(0, numel, _CHUNK):
        g, e = _wide(g_flat[start:start + _CHUNK]), _wide(e_flat[start:start + _CHUNK])
        if g.dtype.is_floating_point:
            fin_g, fin_e = torch.isfinite(g), torch.isfinite(e)
            both = fin_g & fin_e
            err = (g - e).abs().masked_fill(~both, 0)
            # NaN where the reference is finite (or the reverse), or another non-finite value than it holds
            odd = (fin_g ^ fin_e) | (~fin_g & ~fin_e & (g != e) & ~(torch.isnan(g) & torch.isnan(e)))
        else:
            err, odd = _abs_diff(g, e), torch.zeros(g.shape, dtype=torch.bool, device=g.device)
        over = err - (tol.atol + tol.rtol * e.abs().to(torch.float64))
        soft = (over > 0) & (over <= tol.mismatch_atol) & ~odd
        hard = (over > tol.mismatch_atol) | odd
        bad = soft | hard
        if err.numel():
            max_abs = max(max_abs, float(err.max()))
        if bad.any():
            err = err.masked_fill(odd, math.inf)
            e_abs = e.abs().to(torch.float64)
            rel = torch.where(e_abs > 0, err / e_abs, math.inf)
            max_rel = max(max_rel, float(rel.masked_fill(~bad, 0).max()))
            n_soft, n_hard = n_soft + int(soft.sum()), n_hard + int(hard.sum())
            first_bad = first_bad if first_bad is not None else start + int(torch.nonzero(bad)[0])
            if first_hard is None and hard.any():
                first_hard = start + int(torch.nonzero(hard)[0])
            if odd.any():
                max_abs = math.inf
    allowed = math.floor(tol.max_mismatch * numel)
    if n_hard == 0 and n_soft <= allowed:
        return None
    n_bad = n_soft + n_hard
    text = (f"{n_bad} of {numel} elements ({100.0 * n_bad / numel:.3g}%) outside atol={tol.atol:g} "
            f"rtol={tol.rtol:g}")
    if tol.max_mismatch:
        text += (f"; the mismatch budget allows {allowed} ({tol.max_mismatch:g} of the elements), each at most "
                 f"{tol.mismatch_atol:g} beyond that bound: {n_soft} within it, {n_hard} beyond it")
    text += f"; max abs err {max_abs:.4g}, max rel err {max_rel:.4g}"
    beyond = bool(tol.max_mismatch) and first_hard is not None
    where = "first index beyond the budget's bound" if beyond else "first bad index"
    idx = _unravel(first_hard if beyond else first_bad, got.shape)
    return text + f"; {where} {idx}: got {fmt(got, idx)}, expected {fmt(expected, idx)}"


def _normwise(got: torch.Tensor, expected: torch.Tensor, tol: Tolerance, atol_floor: bool = False) -> str | None:
    if got.numel() == 0:
        return None
    g2, e2, n, blocks = _rows(got, expected)
    bound = norm_rtol(tol, got.dtype)
    floor = norm_floor(n, got.dtype) + (math.sqrt(n) * tol.atol if atol_floor else 0.0)
    n_over, worst = 0, None  # worst: (ratio, row)
    err_sq = ref_sq = 0
    for k, (rows, cols) in enumerate(blocks):
        g, e = g2[rows, cols].to(torch.float64), e2[rows, cols].to(torch.float64)
        both = torch.isfinite(g) & torch.isfinite(e)
        err_sq = err_sq + (g - e).masked_fill(~both, 0).square().sum(-1)
        ref_sq = ref_sq + e.masked_fill(~both, 0).square().sum(-1)
        if k + 1 < len(blocks) and blocks[k + 1][0] == rows:
            continue  # a row longer than a chunk: sum its next columns first
        err, ref = err_sq.sqrt(), ref_sq.sqrt()
        err_sq = ref_sq = 0
        over = (err > bound * ref + floor) & (ref > 0)
        if over.any():
            n_over += int(over.sum())
            ratio = (err / ref).masked_fill(~over, -1)
            i = int(ratio.argmax())
            if worst is None or float(ratio[i]) > worst[0]:
                worst = (float(ratio[i]), rows.start + i)
    if worst is None:
        return None
    ratio, row = worst
    g, e = g2[row].to(torch.float64), e2[row].to(torch.float64)
    col = int((g - e).abs().nan_to_num(0.0).argmax())
    idx = _unravel(row * n + col, got.shape)
    source = "" if tol.norm_rtol is not None else f", the {str(got.dtype).removeprefix('torch.')} default"
    return (f"{n_over} of {g2.shape[0]} rows (last dimension, {n} elements) over the normwise bound: "
            f"||got - ref|| / ||ref|| = {ratio:.4g} > norm_rtol={bound:.4g}{source} in row "
            f"{_unravel(row, got.shape[:-1])}; "
            f"its largest error at index {idx}: got {fmt(got, idx)}, expected {fmt(expected, idx)}")


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise bit equality (NaN == NaN when the bits match)."""
    if a.dtype.is_floating_point:
        int_dtype = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}[a.element_size()]
        return a.contiguous().view(int_dtype) == b.contiguous().view(int_dtype)
    return a == b


def _finite(x: torch.Tensor) -> torch.Tensor:
    """torch.isfinite for every float dtype the spec language has: the FP8 types have no isfinite kernel, so
    they are widened first (exactly: every FP8 value is an fp32 value)."""
    return torch.isfinite(x.float() if x.element_size() == 1 else x)


def _all_finite(x: torch.Tensor) -> bool:
    """Cheap and exact: NaN and Inf survive an fp64 sum (which no finite values of a narrower type overflow)."""
    if x.dtype == torch.float64:
        return bool(torch.isfinite(x).all())
    return math.isfinite(float(x.sum(dtype=torch.float64))) if x.numel() else True


@check("nan_inf", reads=("ref",))
def check_nan_inf(run) -> None:
    for t in run.compared:
        g, e = run.got[t.name], run.ref[t.name]
        if not g.dtype.is_floating_point or _all_finite(g) and _all_finite(e):
            continue
        g_bad, e_bad = ~_finite(g), ~_finite(e)
        for mask, what in ((g_bad & ~e_bad, "NaN/Inf values where the reference is finite"),
                           (e_bad & ~g_bad, "finite values where the reference has NaN/Inf")):
            if mask.any():
                idx = first_index(mask)
                raise CheckFailure("nan_inf", f"{t.name}: {int(mask.sum())} {what}, first at index {idx}: got "
                                              f"{fmt(g, idx)}, expected {fmt(e, idx)}")
    return None


@check("numerics", reads=("ref",))
def check_numerics(run) -> None:
    spec, dtype = run.ctx.spec, run.ctx.dtype
    for t in run.compared:
        problem = mismatch(run.got[t.name], run.ref[t.name], spec.tolerance(dtype, t.name, run.ctx.case))
        if problem:
            raise CheckFailure("numerics", f"{t.name}: {problem}")
    return None
