"""Semantic checks of a parsed spec: symbols defined, every case evaluable, edge coverage.

Pure: nothing here imports a kernel, torch or triton (resolving the import paths is :mod:`harness.spec.bind`).
"""

from __future__ import annotations

from harness.spec import expr as ex
from harness.spec.schema import Reader, describe, did_you_mean


def check_semantics(r: Reader, spec) -> None:
    known = set(spec.symbols)
    for tier_cases in spec.cases.values():
        for c in tier_cases:
            known |= set(c.values)
    _names(r, known, spec)
    if r.problems:
        return
    once: set[str] = set()  # keys whose expression is of the wrong kind: reported at the key, at its first case
    for tier, tier_cases in spec.cases.items():
        if tier == "cpu" and [c.given for c in tier_cases] == [c.given for c in spec.cases.get("ci", ())]:
            continue  # the default cpu tier is the ci cases: their problems are reported once, under cases.ci
        for i, case in enumerate(tier_cases):
            _case(r, spec, case, f"cases.{tier}[{i}]" if tier != "edge" else f"cases.edge ({case.id})", once)
    _edge_coverage(r, spec)


def _names(r: Reader, known: set, spec) -> None:
    def check(e: ex.Expr | None, key: str, extra=()) -> None:
        if e is None:
            return
        for n in sorted(e.names - known - set(extra)):
            r.problem(key, f"undefined symbol '{n}'{did_you_mean(n, sorted(known | set(extra)))}")

    for name, e in spec.symbols.items():
        bare = e.source.strip()
        if bare in e.names - known and not did_you_mean(bare, sorted(known)):  # "mean", meant as the string
            r.problem(f"cases.symbols.{name}", f"undefined symbol {bare!r} (a string is written as a literal: "
                                               f"\"'{bare}'\")")
            continue
        check(e, f"cases.symbols.{name}")
    for i, c in enumerate(spec.constraints):
        check(c, f"cases.constraints[{i}]")
    for name, e in spec.params.items():
        check(e, f"params.{name}")
    for name, e in spec.param_present.items():
        check(e, f"params.{name}.present")
    for t in spec.tensors:
        where = f"{'outputs' if t.output else 'inputs'}.{t.name}"
        for i, d in enumerate(t.shape):
            check(d, f"{where}.shape[{i}]")
        check(t.shape_expr, f"{where}.shape")
        check(t.present, f"{where}.present")
        for a in t.values.args:
            check(a, f"{where}.values")
    for key, tol in _tolerances(spec):
        if tol.scaled and not tol.reason:
            r.problem(key, "scales its bounds with the case without a reason (say what error grows with what)")
        for field, e in tol.scaled:  # worded for the common case, a number mistyped as a string
            for n in sorted(e.names - known):
                r.problem(f"{key}.{field}", f"expected a number, got {describe(e.source)} (or an expression over "
                                            f"the case's symbols: undefined symbol '{n}'"
                                            f"{did_you_mean(n, sorted(known))})")
    if spec.roofline is not None:
        extra = ["itemsize"] + [f"{p}_{t.name}" for t in spec.tensors for p in ("numel", "bytes")]
        split = spec.roofline.read_bytes is not None
        check(spec.roofline.read_bytes, "roofline.read_bytes", extra)
        check(spec.roofline.write_bytes, "roofline.write_bytes", extra)
        check(None if split else spec.roofline.bytes, "roofline.bytes", extra)
        check(spec.roofline.flops, "roofline.flops", extra)


def _case(r: Reader, spec, case, key: str, once: set[str]) -> None:
    try:
        env = spec.env(case)
        for c in spec.constraints:
            if not c(env):
                r.problem(key, f"breaks constraint {c.source!r}")
        strings = set()
        for t in spec.tensors:
            where = f"{'outputs' if t.output else 'inputs'}.{t.name}"
            if not _boolean(r, t.present, env, case, f"{where}.present", once):
                continue  # absent here: nothing of it is allocated, so its shape is not evaluated
            try:
                dims = t.dims(env)
            except ex.ExprError as exc:  # a whole-shape expression that gives no list
                _once(r, once, f"{where}.shape", f"{exc} (case {case.id})")
                continue
            exprs = t.shape if t.shape_expr is None else (t.shape_expr,) * len(dims)
            for d, v in zip(exprs, dims, strict=True):
                if isinstance(v, str):  # a string symbol used as a size: once, at the key that set it
                    if d.source not in strings:
                        strings.add(d.source)
                        at = f"{key}.{d.source}" if d.source in case.values else key
                        r.problem(at, f"a dimension (of {t.name}) must be a number, got {describe(v)}")
                elif isinstance(v, bool) or not isinstance(v, int) and not (isinstance(v, float) and v.is_integer()):
                    r.problem(key, f"{t.name} dimension {d.source!r} = {v!r} is not an integer")
                elif v < 0:
                    r.problem(key, f"{t.name} dimension {d.source!r} = {v} is negative")
            for a in t.values.args if not t.output else ():
                v = a(env)
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    r.problem(key, f"{where}.values: {a.source!r} = {describe(v)} is not a number")
        for name, p in spec.params.items():
            p(env)
            _boolean(r, spec.param_present.get(name), env, case, f"params.{name}.present", once)
        for where, tol in _tolerances(spec):
            for field, e in tol.scaled:
                v = e(env)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
                    r.problem(key, f"{where}.{field} {e.source!r} = {v!r}: a bound must be a finite number >= 0")
    except ex.ExprError as exc:
        r.problem(key, str(exc))


def _boolean(r: Reader, e: ex.Expr | None, env: dict, case, where: str, once: set[str]) -> bool:
    """A ``present`` expression's value at a case (None: always present); anything but a boolean is a problem."""
    if e is None:
        return True
    v = e(env)
    if not isinstance(v, bool):
        _once(r, once, where, f"{e.source!r} = {describe(v)} at case {case.id}: must be true or false")
        return False
    return v


def _once(r: Reader, once: set[str], key: str, message: str) -> None:
    if key not in once:
        once.add(key)
        r.problem(key, message)


def _tolerances(spec):
    """(key, tolerance) of every declared tolerance: ``[tolerance.<dtype>]`` and each tensor's own."""
    out = [(f"tolerance.{d}", t) for d, t in spec.tolerances.items()]
    return out + [(f"{'outputs' if t.output else 'inputs'}.{t.name}.tolerance", t.tolerance)
                  for t in spec.tensors if t.tolerance is not None]


def _edge_coverage(r: Reader, spec) -> None:
    sizes = []
    for case in spec.cases["edge"]:
        try:
            env = spec.env(case)
            sizes.append({int(d(env)) for t in spec.present(env) if not t.output for d in t.shape})
        except (ex.ExprError, TypeError, ValueError, OverflowError):  # int(inf): reported by _case
            continue
    if sizes and not any(0 in s for s in sizes):
        r.problem("cases.edge", "no generated case has a 0-size dimension: add 0 to a vary list")
    if sizes and not any(1 in s for s in sizes):
        r.problem("cases.edge", "no generated case has a size-1 dimension: add 1 to a vary list")
    if sizes and not any(any(v > 2 and v & (v - 1) for v in s) for s in sizes):
        r.problem("cases.edge", "no generated case has an odd / non-power-of-two size (e.g. 83, 769)")
