"""Safe arithmetic expressions over shape symbols, used for shapes, params, values and rooflines.

Expressions are parsed once with :mod:`ast` and checked against a whitelist, so a spec can never run
arbitrary code; evaluation is a small tree walk.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_CMPOPS = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
}
FUNCTIONS = {"min": min, "max": max, "ceil": math.ceil, "floor": math.floor, "log2": math.log2,
             "abs": abs, "sqrt": math.sqrt}


class ExprError(ValueError):
    """An expression that does not parse or uses something outside the whitelist."""


@dataclass(frozen=True)
class Expr:
    source: str
    tree: ast.expression
    names: frozenset[str]

    def __call__(self, env: dict[str, object]) -> object:
        return _eval(self.tree.body, env, self.source)


def parse(source: object, *, functions: dict | None = None) -> Expr:
    """Parse ``source`` (a string, or a number / bool taken literally) into an :class:`Expr`."""
    if isinstance(source, (bool, int, float)):
        source = repr(source)
    if not isinstance(source, str):
        raise ExprError(f"expected an expression string, got {type(source).__name__}")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse {source!r}: {exc.msg}") from None
    allowed_calls = FUNCTIONS if functions is None else functions
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in allowed_calls or node.keywords:
                raise ExprError(f"{source!r}: only calls of {sorted(allowed_calls)} are allowed")
        elif not isinstance(node, _ALLOWED_NODES):
            raise ExprError(f"{source!r}: {type(node).__name__} is not allowed in an expression")
    call_names = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    names -= call_names
    names -= {"true", "false", "True", "False"}
    return Expr(source, tree, frozenset(names))


_ALLOWED_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Constant, ast.Name, ast.Load,
    ast.IfExp, ast.USub, ast.UAdd, ast.Not, ast.And, ast.Or, *_BINOPS, *_CMPOPS,
)
_LITERALS = {"true": True, "false": False, "True": True, "False": False}


def _eval(node: ast.AST, env: dict, source: str) -> object:
    if isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, bool)):
            raise ExprError(f"{source!r}: only numbers are allowed, got {node.value!r}")
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in _LITERALS:
            return _LITERALS[node.id]
        raise ExprError(f"{source!r}: undefined symbol {node.id!r}")
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env, source), _eval(node.right, env, source)
        try:
            return _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExprError(f"{source!r}: division by zero") from None
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, source)
        return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}[type(node.op)](value)
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, env, source) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, source)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, env, source)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env, source) else node.orelse, env, source)
    if isinstance(node, ast.Call):
        args = [_eval(a, env, source) for a in node.args]
        try:
            return FUNCTIONS[node.func.id](*args)
        except (TypeError, ValueError) as exc:
            raise ExprError(f"{source!r}: {node.func.id}(): {exc}") from None
    raise ExprError(f"{source!r}: unsupported syntax {type(node).__name__}")


def resolve_symbols(values: dict[str, object], derived: dict[str, Expr]) -> dict[str, object]:
    """Complete a case's symbols with defaults/derived expressions, in dependency order."""
    env = dict(values)
    pending = {k: e for k, e in derived.items() if k not in env}
    while pending:
        ready = {k: e for k, e in pending.items() if e.names <= env.keys()}
        if not ready:
            missing = sorted({n for e in pending.values() for n in e.names} - env.keys() - pending.keys())
            what = f"undefined symbol(s) {missing}" if missing else f"circular definitions {sorted(pending)}"
            raise ExprError(what)
        for k, e in ready.items():
            env[k] = e(env)
            del pending[k]
    return env
