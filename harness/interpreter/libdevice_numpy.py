"""NumPy stand-ins for libdevice (CUDA) and ocml (HIP) functions, keyed by the name Triton's libdevice modules give
them (``tanh``, ``div_rz``, ``float2int_rd``...), one function for every width (libdevice's ``f`` and double
variants). Each takes the arguments' arrays as the interpreter holds them and returns the result; the caller
casts it to the declared return type (one round-to-nearest-even from float64 for the float results).

Results are float64 computations rounded once, so at least as accurate as libdevice (``fast_*`` variants, which
the GPU approximates, are computed exactly); fp32 ``fma`` and the directed roundings are exact (``directed``),
fp64 ``fma`` rounds twice. Names absent here (the Bessel functions but i0, ``rcp64h``, double-precision
directed rounding) are limitations: the dispatcher says so instead of returning garbage.
"""

from __future__ import annotations

import math
import statistics

import numpy as np

F64 = np.float64
_NORMAL = statistics.NormalDist()


def _f64(*arrays):
    return [np.asarray(a, dtype=F64) for a in arrays]


def _wide(fn):
    """fn on float64 copies: the caller's single cast to the result type is the only rounding."""
    return lambda *arrays: fn(*_f64(*arrays))


def _each(fn, error=np.nan):
    """A scalar math function over arrays, domain and range errors as the C library reports them."""
    def call(v):
        try:
            return fn(v)
        except (ValueError, OverflowError) as exc:
            return math.inf if isinstance(exc, OverflowError) else error

    vec = np.vectorize(call, otypes=[F64])
    return lambda *arrays: vec(*_f64(*arrays))


def _round_half_away(x):
    t = np.trunc(x)
    return t + np.where(np.abs(x - t) >= 0.5, np.sign(x), 0.0)  # x - t is exact: no double rounding at .5


def _erfinv(y):
    if y == 1 or y == -1:
        return math.copysign(math.inf, y)
    if not -1 < y < 1:
        return math.nan
    return _NORMAL.inv_cdf((y + 1) / 2) / math.sqrt(2)


def _erfcinv(y):
    if y == 0:
        return math.inf
    if y == 2:
        return -math.inf
    if not 0 < y < 2:
        return math.nan
    return -_NORMAL.inv_cdf(y / 2) / math.sqrt(2)  # from y/2, not 1 - y: no cancellation for tiny y


def _erfcx(x):
    if x < 25:
        return math.exp(x * x) * math.erfc(x)
    inv = 1 / (x * x)  # the asymptotic series, where exp(x*x) overflows
    return (1 - inv / 2 + 3 * inv * inv / 4) / (x * math.sqrt(math.pi))


def _inv_cdf(p):
    if p == 0:
        return -math.inf
    if p == 1:
        return math.inf
    return _NORMAL.inv_cdf(p) if 0 < p < 1 else math.nan


def _ilogb(x):
    x = np.asarray(x)
    _, e = np.frexp(x)
    out = (e - 1).astype(np.int64)
    out = np.where(x == 0, np.iinfo(np.int32).min, out)
    out = np.where(np.isnan(x), np.iinfo(np.int32).min, out)
    return np.where(np.isinf(x), np.iinfo(np.int32).max, out)


def _logb(x):
    x = np.asarray(x, dtype=F64)
    with np.errstate(divide="ignore"):
        out = _ilogb(x).astype(F64)
    out = np.where(x == 0, -np.inf, out)
    return np.where(np.isinf(x), np.inf, np.where(np.isnan(x), np.nan, out))


def _unsigned(a):
    a = np.asarray(a)
    return a.view(np.dtype(f"uint{a.dtype.itemsize * 8}")) if a.dtype.kind == "i" else a


def _clz(a):
    u = _unsigned(a).astype(np.uint64)
    width = np.asarray(a).dtype.itemsize * 8
    length = np.zeros(u.shape, np.int64)
    for s in range(width):  # scanning up, the highest set bit is the last to write
        length = np.where((u >> np.uint64(s)) & np.uint64(1), s + 1, length)
    return width - length


def _popc(a):
    u = _unsigned(a).astype(np.uint64)
    return sum(((u >> np.uint64(s)) & np.uint64(1)).astype(np.int64) for s in range(np.asarray(a).dtype.itemsize * 8))


def _brev(a):
    a = np.asarray(a)
    width = a.dtype.itemsize * 8
    u = _unsigned(a).astype(np.uint64)
    out = np.zeros(u.shape, np.uint64)
    for s in range(width):
        out |= ((u >> np.uint64(s)) & np.uint64(1)) << np.uint64(width - 1 - s)
    return out.astype(_unsigned(a).dtype).view(a.dtype)


def _ffs(a):
    u = _unsigned(a).astype(np.uint64)
    out = np.zeros(u.shape, np.int64)
    for s in range(np.asarray(a).dtype.itemsize * 8 - 1, -1, -1):  # the lowest set bit wins: scan down
        out = np.where((u >> np.uint64(s)) & np.uint64(1), s + 1, out)
    return out


def _mulhi(a, b):
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    width = a.dtype.itemsize * 8
    if width < 64:
        wide = np.int64 if a.dtype.kind == "i" else np.uint64
        return ((a.astype(wide) * b.astype(wide)) >> width).astype(a.dtype)
    pairs = zip(a.ravel().tolist(), b.ravel().tolist(), strict=True)
    high = [((x * y) >> 64) & (2 ** 64 - 1) for x, y in pairs]  # the 128-bit product, in Python ints
    return np.array(high, np.uint64).view(a.dtype).reshape(a.shape)


def _mul24(a, b):
    a, b = np.asarray(a), np.asarray(b)
    low = (lambda x: ((x.astype(np.int64) & 0xFFFFFF) ^ 0x800000) - 0x800000) if a.dtype.kind == "i" else \
        (lambda x: x.astype(np.int64) & 0xFFFFFF)
    return (low(a) * low(b)).astype(np.int64).astype(np.uint32 if a.dtype.kind == "u" else np.int32)


def _byte_perm(x, y, s):
    pool = (np.asarray(y).astype(np.uint64) << np.uint64(32)) | np.asarray(x).astype(np.uint32).astype(np.uint64)
    sel = np.asarray(s).astype(np.uint32)
    out = np.zeros(pool.shape, np.uint64)
    for n in range(4):  # byte n of the result is byte (s >> 4n) & 7 of y:x
        pick = ((sel >> np.uint32(4 * n)) & np.uint32(7)).astype(np.uint64)
        out |= ((pool >> (pick * np.uint64(8))) & np.uint64(0xFF)) << np.uint64(8 * n)
    return out.astype(np.uint32).view(np.int32)


def _norm(*v):
    return np.sqrt(sum(a * a for a in v))


def _ldexp(x, n):
    return np.ldexp(x, np.asarray(n, np.int32))


def _view(dtype):
    return lambda a: np.asarray(a).view(dtype)


def _ints(fn):
    """fn on int64 copies of integer arguments: sums of two int32/uint32 cannot overflow there."""
    return lambda *a: fn(*[np.asarray(v, np.int64) for v in a])


def _to_int(rounder, dtype):
    """float -> int as cvt.r*i: rounded, NaN to 0, saturating at the type's range."""
    def convert(x):
        info = np.iinfo(dtype)
        v = rounder(np.nan_to_num(np.asarray(x, dtype=F64), nan=0.0, posinf=info.max, neginf=info.min))
        return np.clip(v, info.min, info.max).astype(dtype)

    return convert


_ROUNDERS = {"rn": np.rint, "rz": np.trunc, "rd": np.floor, "ru": np.ceil}

_rsqrt = _wide(lambda x: 1 / np.sqrt(x))
_exp10 = _wide(lambda x: np.power(10.0, x))

IMPLS = {
    "abs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint, "nearbyint": np.rint,
    "round": _wide(_round_half_away), "fabs": np.abs, "rsqrt": _rsqrt, "rsqrt_rn": _rsqrt,
    "sqrt": _wide(np.sqrt), "cbrt": _wide(np.cbrt), "rcbrt": _wide(lambda x: 1 / np.cbrt(x)),
    "exp": _wide(np.exp), "exp2": _wide(np.exp2), "exp10": _exp10,
    "expm1": _wide(np.expm1), "log": _wide(np.log), "log2": _wide(np.log2), "log10": _wide(np.log10),
    "log1p": _wide(np.log1p), "sin": _wide(np.sin), "cos": _wide(np.cos), "tan": _wide(np.tan),
    "sinpi": _wide(lambda x: np.sin(np.pi * np.fmod(x, 2.0))),  # fmod is exact: the reduction loses nothing
    "cospi": _wide(lambda x: np.cos(np.pi * np.fmod(x, 2.0))),
    "asin": _wide(np.arcsin), "acos": _wide(np.arccos), "atan": _wide(np.arctan), "atan2": _wide(np.arctan2),
    "sinh": _wide(np.sinh), "cosh": _wide(np.cosh), "tanh": _wide(np.tanh), "asinh": _wide(np.arcsinh),
    "acosh": _wide(np.arccosh), "atanh": _wide(np.arctanh),
    "erf": _each(math.erf), "erfc": _each(math.erfc), "erfinv": _each(_erfinv), "erfcinv": _each(_erfcinv),
    "erfcx": _each(_erfcx), "normcdf": _each(lambda x: 0.5 * math.erfc(-x / math.sqrt(2))),
    "normcdfinv": _each(_inv_cdf), "lgamma": _each(math.lgamma, math.inf), "tgamma": _each(math.gamma),
    "cyl_bessel_i0": _wide(np.i0),
    "pow": _wide(np.power), "fast_powf": _wide(np.power), "hypot": _wide(np.hypot),
    "rhypot": _wide(lambda x, y: 1 / np.hypot(x, y)), "norm3d": _wide(_norm), "norm4d": _wide(_norm),
    "rnorm3d": _wide(lambda *v: 1 / _norm(*v)), "rnorm4d": _wide(lambda *v: 1 / _norm(*v)),
    "fmod": np.fmod, "remainder": np.vectorize(math.remainder, otypes=[F64]),
    "copysign": np.copysign, "nextafter": np.nextafter, "ldexp": _ldexp, "scalbn": _ldexp,
    "fdim": _wide(lambda x, y: np.where(np.isnan(x) | np.isnan(y), np.nan, np.maximum(x - y, 0.0))),
    "saturatef": lambda x: np.where(np.isnan(x), 0.0, np.clip(x, 0.0, 1.0)),
    "fast_expf": _wide(np.exp), "fast_exp10f": _exp10, "fast_logf": _wide(np.log),
    "fast_log2f": _wide(np.log2), "fast_log10f": _wide(np.log10), "fast_sinf": _wide(np.sin),
    "fast_cosf": _wide(np.cos), "fast_tanf": _wide(np.tan), "fast_tanhf": _wide(np.tanh),
    "fast_dividef": _wide(np.divide),
    "isnan": np.isnan, "isinf": np.isinf, "finitef": np.isfinite, "isfinited": np.isfinite, "signbit": np.signbit,
    "ilogb": _ilogb, "logb": _logb, "llrint": _to_int(np.rint, np.int64),
    "llround": _to_int(_round_half_away, np.int64),
    "clz": _clz, "popc": _popc, "brev": _brev, "ffs": _ffs, "mulhi": _mulhi, "mul24": _mul24, "byte_perm": _byte_perm,
    "sad": _ints(lambda x, y, z: np.abs(x - y) + z), "hadd": _ints(lambda x, y: (x + y) >> 1),
    "rhadd": _ints(lambda x, y: (x + y + 1) >> 1),
    "int_as_float": _view(np.float32), "uint_as_float": _view(np.float32), "float_as_int": _view(np.int32),
    "float_as_uint": _view(np.int32), "longlong_as_double": _view(F64), "double_as_longlong": _view(np.int64),
    "double2loint": lambda a: np.asarray(a, F64).view(np.uint64).astype(np.uint32).view(np.int32),
    "double2hiint": lambda a: (np.asarray(a, F64).view(np.uint64) >> np.uint64(32)).astype(np.uint32).view(np.int32),
    "int2double_rn": lambda a: np.asarray(a, F64), "uint2double_rn": lambda a: np.asarray(a, F64),
    "hiloint2double": lambda hi, lo: ((np.asarray(hi).astype(np.uint32).astype(np.uint64) << np.uint64(32))
                                      | np.asarray(lo).astype(np.uint32).astype(np.uint64)).view(F64),
}
for _mode, _rounder in _ROUNDERS.items():
    for _src in ("float", "double"):
        IMPLS[f"{_src}2int_{_mode}"] = _to_int(_rounder, np.int32)
        IMPLS[f"{_src}2uint_{_mode}"] = lambda x, r=_rounder: _to_int(r, np.uint32)(x).view(np.int32)
        IMPLS[f"{_src}2ll_{_mode}"] = _to_int(_rounder, np.int64)
        IMPLS[f"{_src}2ull_{_mode}"] = lambda x, r=_rounder: _to_int(r, np.uint64)(x).view(np.int64)


# ------------------------------------------------------------------------------------------- directed rounding
# libdevice's _rn/_rz/_rd/_ru variants at fp32. The float64 result is a start within half an fp32 ulp of the
# exact one (plus float64's own error, far smaller); an exact test of which side of the exact result that fp32
# candidate lies on decides the one step a directed rounding may need. Double-precision variants would need
# more than float64 to decide and are limitations.


def _two_sum(x, y):
    s = x + y
    v = s - x
    return s, (x - (s - v)) + (y - v)  # s + error == x + y exactly


def _sign(values) -> np.ndarray:
    return np.sign(np.asarray(values, dtype=F64))


def _int_side(candidate, exact_ints) -> np.ndarray:
    """sign(candidate - n) for integers n, compared as Python ints where float64 could not hold n."""
    out = [(int(c) > int(n)) - (int(c) < int(n)) if math.isfinite(c) else (1 if c > 0 else -1)
           for c, n in zip(np.ravel(candidate).tolist(), np.ravel(exact_ints).tolist(), strict=True)]
    return np.array(out, F64).reshape(np.shape(candidate))


def _sides(base: str, args: list[np.ndarray]):
    """(the float64 value to round, a function giving sign(candidate - exact result))."""
    x = np.asarray(args[0], F64)
    if base in ("add", "sub", "fma"):
        if base == "fma":
            hi, lo = _two_sum(x * np.asarray(args[1], F64), np.asarray(args[2], F64))  # x*y is exact in float64
        else:
            hi, lo = _two_sum(x, np.asarray(args[1], F64) * (1 if base == "add" else -1))
        return hi, lambda r: _sign((r - hi) - lo)
    if base == "mul":
        p = x * np.asarray(args[1], F64)
        return p, lambda r: _sign(r - p)
    if base == "div":
        y = np.asarray(args[1], F64)
        return x / y, lambda r: _sign(r * y - x) * _sign(y)  # r*y is exact: 24 x 24 bits
    if base == "rcp":
        return 1 / x, lambda r: _sign(r * x - 1) * _sign(x)
    if base == "sqrt":
        return np.sqrt(x), lambda r: _sign(r * r - x)
    if base in ("double2float", "int2float", "uint2float"):  # exact in float64 already
        return x, lambda r: _sign(r - x)
    ints = np.asarray(args[0])  # ll2float, ull2float, ll2double, ull2double: float64 may have rounded them
    return ints.astype(F64), lambda r: _int_side(r, ints)


DIRECTED = frozenset({"add", "sub", "mul", "div", "rcp", "sqrt", "fma", "double2float", "int2float",
                      "uint2float", "ll2float", "ull2float", "ll2double", "ull2double"})


def directed(base: str, mode: str, args: list[np.ndarray], out_dtype) -> np.ndarray:
    """``base`` rounded to ``out_dtype`` by ``mode`` (rn: to nearest even, rz/rd/ru: toward zero, -inf, +inf)."""
    value, side = _sides(base, args)
    with np.errstate(over="ignore", invalid="ignore"):
        r = value.astype(out_dtype).astype(F64)
        above = side(r)
        up = np.nextafter(r.astype(out_dtype), out_dtype(np.inf)).astype(F64)
        down = np.nextafter(r.astype(out_dtype), out_dtype(-np.inf)).astype(F64)
    if mode == "rn":
        # float64 may have rounded an exact sum onto an fp32 midpoint (a product is exact in float64; a quotient
        # or root is never one): the exact result's side of that midpoint picks the neighbour, not ties-to-even.
        other = 2 * value - r
        mid = (other != r) & ((other == up) | (other == down))
        at = side(value)
        low, high = np.minimum(r, other), np.maximum(r, other)
        r = np.where(mid & (at > 0), low, np.where(mid & (at < 0), high, r))
    elif mode == "rd":
        r = np.where(above > 0, down, r)
    elif mode == "ru":
        r = np.where(above < 0, up, r)
    else:
        r = np.where((r > 0) & (above > 0), down, np.where((r < 0) & (above < 0), up, r))
    return r.astype(out_dtype)

