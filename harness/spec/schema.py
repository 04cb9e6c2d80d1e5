"""A small reader for TOML tables that collects one-line problems instead of raising tracebacks.

Every problem is ``"<file>: <key.path>: <message>"``; unknown keys get a did-you-mean.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a table"}


class SpecError(Exception):
    """One or more problems in spec files; ``problems`` holds one line each."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


def describe(value: object) -> str:
    if isinstance(value, str):
        text = f'"{value}"'
    elif isinstance(value, dict):
        return "a table"
    elif isinstance(value, list):
        return "a list"
    else:
        text = repr(value).lower() if isinstance(value, bool) else repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def one_line(text: str) -> str:
    """Non-printable characters (newlines, U+2028...) escaped: a problem is always exactly one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class Reader:
    """Collects problems for one file; methods return a usable default when a value is bad."""

    def __init__(self, path: str):
        self.path = path
        self.problems: list[str] = []

    def problem(self, key: str, message: str) -> None:
        where = f"{one_line(key)}: " if key else ""
        self.problems.append(f"{self.path}: {where}{one_line(message)}")

    def keys(self, table: dict, allowed: Iterable[str], key: str, required: Iterable[str] = ()) -> None:
        allowed = list(allowed)
        for name in table:
            if name not in allowed:
                close = difflib.get_close_matches(str(name), allowed, n=1, cutoff=0.6)
                hint = f" (did you mean '{close[0]}'?)" if close else f" (allowed: {', '.join(allowed)})"
                self.problem(_join(key, name), f"unknown key{hint}")
        for name in required:
            if name not in table:
                self.problem(_join(key, name), "missing required key")

    def get(self, table: dict, name: str, kind, key: str, default=None, required: bool = False):
        """Read ``table[name]`` expecting ``kind`` (a type or tuple of types)."""
        if name not in table:
            if required:
                self.problem(_join(key, name), "missing required key")
            return default
        value = table[name]
        if not _is(value, kind):
            self.problem(_join(key, name), f"expected {_kind_name(kind)}, got {describe(value)}")
            return default
        if kind is float:
            try:
                return float(value)
            except OverflowError:  # an integer beyond the float range
                self.problem(_join(key, name), f"expected a number, got {describe(value)}: too large")
                return default
        return value

    def table(self, table: dict, name: str, key: str, required: bool = False) -> dict:
        return self.get(table, name, dict, key, default={}, required=required)

    def str_list(self, table: dict, name: str, key: str, default=(), required: bool = False) -> tuple:
        value = self.get(table, name, list, key, default=None, required=required)
        if value is None:
            return tuple(default)
        bad = [i for i, v in enumerate(value) if not isinstance(v, str)]
        for i in bad:
            self.problem(f"{_join(key, name)}[{i}]", f"expected a string, got {describe(value[i])}")
        return tuple(v for v in value if isinstance(v, str))


def _is(value: object, kind) -> bool:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool):
        return bool in kinds
    if float in kinds and isinstance(value, int):
        return True
    return isinstance(value, kinds)


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)


def _join(key: str, name: object) -> str:
    name = str(name)
    if not name or name.strip() != name or not name.isprintable():  # "", " ", "a\nb": quoted, as TOML does
        name = json.dumps(name)
    return f"{key}.{name}" if key else name


def did_you_mean(name: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def parse_expr(r: Reader, source, key: str, functions=None, lists: bool = False):
    """``source`` parsed as a spec expression, or None with the problem recorded under ``key``."""
    from harness.spec import expr as ex  # the expression language imports nothing of the spec's

    try:
        return ex.parse(source, functions=functions, lists=lists)
    except ex.ExprError as exc:
        r.problem(key, f"bad expression: {exc}")
        return None
