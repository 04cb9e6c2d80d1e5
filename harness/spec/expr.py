"""Safe arithmetic expressions over shape symbols, used for shapes, params, values and rooflines.

Expressions are parsed once with :mod:`ast` and checked against a whitelist, so a spec can never run
arbitrary code; evaluation is a small tree walk. String literals may be compared (``reduction == 'none'``)
but take no arithmetic (``'%s' % x`` or ``'a' * n`` would format or allocate); list and tuple literals are
allowed only where a whole shape is evaluated (``parse(..., lists=True)``) and take only ``+``.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
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
# Limits that keep a hostile or mistyped spec from hanging validation (9 ** 9 ** 9) or overflowing the
# evaluator's recursion: real shape arithmetic is a few levels deep and far below 2 ** 4096.
MAX_DEPTH = 100
MAX_INT_BITS = 4096


class ExprError(ValueError):
    """An expression that does not parse or uses something outside the whitelist."""


@dataclass(frozen=True)
class Expr:
    source: str
    tree: ast.expression
    names: frozenset[str]

    def __call__(self, env: dict[str, object]) -> object:
        return _eval(self.tree.body, env, self.source)


def constant(value: bool | int | float | str) -> Expr:
    """A literal (a param's ``value``): evaluates to itself, strings, NaN and infinities included."""
    return Expr(repr(value), ast.Expression(body=ast.Constant(value)), frozenset())


def _clip(text: str) -> str:
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def _show(source: str) -> str:
    return _clip(repr(source))


def _depth(tree: ast.AST) -> int:
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def parse(source: object, *, functions: dict | None = None, lists: bool = False) -> Expr:
    """Parse ``source`` (a string, or a number / bool taken literally) into an :class:`Expr`; ``lists``: list
    and tuple literals are allowed (a shape whose rank depends on the case: ``"[BT] if r == 'none' else []"``)."""
    if isinstance(source, (bool, int, float)):
        source = repr(source)
    if not isinstance(source, str):
        raise ExprError(f"expected an expression string, got {type(source).__name__}")
    try:
        with warnings.catch_warnings():  # "invalid escape sequence" and the like: the whitelist decides
            warnings.simplefilter("ignore")
            tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"cannot parse {_show(source)}: {exc.msg}") from None
    except ValueError as exc:  # a NUL character, before Python 3.12
        raise ExprError(f"cannot parse {_show(source)}: {exc}") from None
    except (RecursionError, MemoryError):  # what CPython's parser raises for very deep nesting
        raise ExprError(f"{_show(source)}: nested too deeply") from None
    if _depth(tree) > MAX_DEPTH:
        raise ExprError(f"{_show(source)}: nested too deeply (more than {MAX_DEPTH} levels)")
    allowed_calls = FUNCTIONS if functions is None else functions
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in allowed_calls or node.keywords:
                raise ExprError(f"{_show(source)}: only calls of {sorted(allowed_calls)} are allowed")
        elif isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, str)):  # None, 1j, b''
            raise ExprError(f"{_show(source)}: only numbers and strings are allowed, got {_clip(repr(node.value))}")
        elif isinstance(node, (ast.List, ast.Tuple)) and not lists:
            raise ExprError(f"{_show(source)}: a list is allowed only as a whole shape (shape = \"[a, b]\")")
        elif not isinstance(node, _ALLOWED_NODES):
            raise ExprError(f"{_show(source)}: {type(node).__name__} is not allowed in an expression")
    call_names = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)}
    names -= call_names
    names -= {"true", "false", "True", "False"}
    return Expr(source, tree, frozenset(names))


_ALLOWED_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Constant, ast.Name, ast.Load,
    ast.IfExp, ast.USub, ast.UAdd, ast.Not, ast.And, ast.Or, ast.List, ast.Tuple, *_BINOPS, *_CMPOPS,
)
_LITERALS = {"true": True, "false": False, "True": True, "False": False}


def _number(value: object, source: str) -> object:
    """A result the rest of the harness can use: real, and an integer small enough to print."""
    if isinstance(value, complex):
        raise ExprError(f"{_show(source)}: the result is not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ExprError(f"{_show(source)}: an integer larger than 2**{MAX_INT_BITS}")
    return value


def _eval(node: ast.AST, env: dict, source: str) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        if node.id in _LITERALS:
            return _LITERALS[node.id]
        raise ExprError(f"{_show(source)}: undefined symbol {node.id!r}")
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, env, source) for e in node.elts]
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, env, source), _eval(node.right, env, source)
        if isinstance(left, (str, list)) or isinstance(right, (str, list)):
            if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
                return left + right  # shapes concatenated: "[B] + ([H] if heads else [])"
            raise ExprError(f"{_show(source)}: arithmetic on {_clip(repr(left))} and {_clip(repr(right))}: strings "
                            "can only be compared, lists only concatenated with +")
        if (isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int) and right > 0
                and right * max(abs(left).bit_length() - 1, 0) > MAX_INT_BITS):
            raise ExprError(f"{_show(source)}: an integer larger than 2**{MAX_INT_BITS}")  # before computing it
        try:
            value = _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExprError(f"{_show(source)}: division by zero") from None
        except (OverflowError, TypeError, ValueError) as exc:
            raise ExprError(f"{_show(source)}: {exc}") from None
        return _number(value, source)
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env, source)
        try:
            return {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}[type(node.op)](value)
        except TypeError as exc:  # -'none', -[1]
            raise ExprError(f"{_show(source)}: {exc}") from None
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, env, source) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, source)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, env, source)
            try:
                if not _CMPOPS[type(op)](left, right):
                    return False
            except TypeError as exc:
                raise ExprError(f"{_show(source)}: {exc}") from None
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env, source) else node.orelse, env, source)
    if isinstance(node, ast.Call):
        args = [_eval(a, env, source) for a in node.args]
        try:
            value = FUNCTIONS[node.func.id](*args)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ExprError(f"{_show(source)}: {node.func.id}(): {exc}") from None
        return _number(value, source)
    raise ExprError(f"{_show(source)}: unsupported syntax {type(node).__name__}")


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
