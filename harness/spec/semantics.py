"""Semantic checks of a parsed spec: symbols defined, every case evaluable, edge coverage, imports resolve."""

from __future__ import annotations

import inspect
import sys

from harness.spec import expr as ex
from harness.spec.imports import module_available, resolve_import
from harness.spec.schema import Reader, describe, did_you_mean


def check_semantics(r: Reader, spec) -> None:
    known = set(spec.symbols)
    for tier_cases in spec.cases.values():
        for c in tier_cases:
            known |= set(c.values)
    _names(r, known, spec)
    if r.problems:
        return
    for tier, tier_cases in spec.cases.items():
        for i, case in enumerate(tier_cases):
            _case(r, spec, case, f"cases.{tier}[{i}]" if tier != "edge" else f"cases.edge ({case.id})")
    _edge_coverage(r, spec)
    _imports(r, spec)


def _names(r: Reader, known: set, spec) -> None:
    def check(e: ex.Expr | None, key: str, extra=()) -> None:
        if e is None:
            return
        for n in sorted(e.names - known - set(extra)):
            r.problem(key, f"undefined symbol '{n}'{did_you_mean(n, sorted(known | set(extra)))}")

    for name, e in spec.symbols.items():
        check(e, f"cases.symbols.{name}")
    for i, c in enumerate(spec.constraints):
        check(c, f"cases.constraints[{i}]")
    for name, e in spec.params.items():
        check(e, f"params.{name}")
    for t in spec.tensors:
        where = f"{'outputs' if t.output else 'inputs'}.{t.name}"
        for i, d in enumerate(t.shape):
            check(d, f"{where}.shape[{i}]")
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


def _case(r: Reader, spec, case, key: str) -> None:
    try:
        env = spec.env(case)
        for c in spec.constraints:
            if not c(env):
                r.problem(key, f"breaks constraint {c.source!r}")
        for t in spec.tensors:
            for d in t.shape:
                v = d(env)
                if isinstance(v, bool) or not isinstance(v, int) and not (isinstance(v, float) and v.is_integer()):
                    r.problem(key, f"{t.name} dimension {d.source!r} = {v!r} is not an integer")
                elif v < 0:
                    r.problem(key, f"{t.name} dimension {d.source!r} = {v} is negative")
        for p in spec.params.values():
            p(env)
        for where, tol in _tolerances(spec):
            for field, e in tol.scaled:
                v = e(env)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
                    r.problem(key, f"{where}.{field} {e.source!r} = {v!r}: a bound must be a finite number >= 0")
    except ex.ExprError as exc:
        r.problem(key, str(exc))


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
            sizes.append({int(d(env)) for t in spec.inputs for d in t.shape})
        except (ex.ExprError, TypeError, ValueError, OverflowError):  # int(inf): reported by _case
            continue
    if sizes and not any(0 in s for s in sizes):
        r.problem("cases.edge", "no generated case has a 0-size dimension: add 0 to a vary list")
    if sizes and not any(1 in s for s in sizes):
        r.problem("cases.edge", "no generated case has a size-1 dimension: add 1 to a vary list")
    if sizes and not any(any(v > 2 and v & (v - 1) for v in s) for s in sizes):
        r.problem("cases.edge", "no generated case has an odd / non-power-of-two size (e.g. 83, 769)")


def _imports(r: Reader, spec) -> None:
    targets = [("kernel.reference", spec.reference, ())]
    for b in spec.backends.values():
        targets += [(f"backends.{b.name}.impl", b.impl, b.requires)]
        targets += [(f"backends.{b.name}.{k}", getattr(b, k), b.requires) for k in ("source", "build") if getattr(b, k)]
    targets += [(f"peers.{p.name}.impl", p.impl, p.requires) for p in spec.peers.values()]
    targets += [("kernel.op", spec.op, ())] if spec.op else []
    for key, path, requires in targets:
        if not all(module_available(m) for m in requires):
            continue  # checked where it can run; the arch resolver reports the missing module
        try:
            obj = resolve_import(path)
        except ModuleNotFoundError as exc:
            module = path.partition(":")[0]
            if exc.name and not _is_parent(exc.name, module):
                # The kernel module exists but needs a package this Python lacks: the environment is wrong,
                # not the spec. Say so, and where to run instead.
                r.problem(key, f'not checked: importing "{path}" needs module {exc.name!r}, which this Python '
                               f"({sys.executable}) lacks; run `nox -s validate` or install the project's "
                               "dependencies")
            else:
                r.problem(key, f'cannot import "{path}": no module named {exc.name!r}')
            continue
        except AttributeError:
            module, _, attr = path.partition(":")
            r.problem(key, f'cannot import "{path}": module {module!r} has no attribute {attr!r}')
            continue
        except Exception as exc:  # a kernel module that fails at import: say so in one line
            first = str(exc).splitlines()[0] if str(exc) else ""
            r.problem(key, f'importing "{path}" failed: {type(exc).__name__}: {first}')
            continue
        if key == "kernel.op" and type(obj).__name__ not in _OP_TYPES:
            r.problem(key, f'"{path}" is a {type(obj).__name__}, not a torch op (an OpOverload, OpOverloadPacket or '
                           "what torch.library.custom_op returns)")
        elif key.endswith((".impl", ".reference", ".build")) and not callable(obj):
            r.problem(key, f'"{path}" is not callable')
        elif key.endswith((".impl", ".reference")):
            _signature(r, spec, key, path, obj)


_OP_TYPES = ("OpOverload", "OpOverloadPacket", "CustomOpDef")  # by name: the spec package never imports torch


def _is_parent(name: str, module: str) -> bool:
    """True when ``name`` is ``module`` or one of its parent packages (the import path itself is wrong)."""
    return module == name or module.startswith(name + ".")


def _signature(r: Reader, spec, key: str, path: str, fn) -> None:
    """Every implementation is called with each tensor and param by name: its keywords must match the spec."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C extension without a signature: nothing to compare
        return
    names = [t.name for t in spec.tensors] + list(spec.params)
    takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    by_keyword = {n for n, p in params.items()
                  if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    where = {t.name: f"{'outputs' if t.output else 'inputs'}.{t.name}" for t in spec.tensors}
    where.update({n: f"params.{n}" for n in spec.params})
    if not takes_any:
        for n in names:
            if n not in by_keyword:
                close = did_you_mean(n, sorted(by_keyword))
                r.problem(key, f'"{path}" has no keyword parameter "{n}" (the spec\'s {where[n]}){close}')
    for n, p in params.items():
        if p.default is not inspect.Parameter.empty or p.kind in (inspect.Parameter.VAR_POSITIONAL,
                                                                   inspect.Parameter.VAR_KEYWORD):
            continue
        if p.kind == inspect.Parameter.POSITIONAL_ONLY:
            r.problem(key, f'"{path}" has positional-only parameter "{n}": implementations are called by keyword')
        elif n not in names:
            close = did_you_mean(n, names)
            r.problem(key, f'"{path}" requires parameter "{n}", which the spec declares as no tensor or param{close}')
