"""Strict loading of results files: ``results.json``, and ``cases.jsonl`` of an interrupted run.

A malformed file is one :class:`~harness.results.ResultsError` line naming the file and the key, never a
traceback: every value is checked against the dataclass field it fills.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from pathlib import Path

from harness.results.model import (
    _STATS_INTS,
    _STATS_REQUIRED_NUMBERS,
    ARCH_STATUSES,
    BOUNDS,
    CASE_FIELDS_ADDED_IN,
    MODES,
    READABLE_VERSIONS,
    ROLES,
    SCHEMA_VERSION,
    STATS_KEYS,
    STATUSES,
    VERDICTS,
    ArchRow,
    CaseResult,
    Results,
    ResultsError,
    Speedup,
    Waiver,
    _hints,
    _plain,
)

# ----------------------------------------------------------------------------- strict loading

def _describe(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value).replace("nan", "NaN").replace("inf", "Infinity")
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Bad(Exception):
    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")


def _at(where: str, key: str) -> str:
    """``where.key``; a key that would not read as one ("", " x", "a\nb") is quoted as a JSON string."""
    shown = key if key and key.isprintable() and key.strip() == key else json.dumps(key)
    return f"{where}.{shown}" if where else shown


MAX_DEPTH = 32  # free-form values (environment, ceilings) nested deeper are refused, not recursed into
_INT64 = 2 ** 63


def _number(value, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(where, f"expected a number, got {_describe(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond the float range, 10**400
        number = math.inf
    if not math.isfinite(number):
        raise _Bad(where, f"expected a finite number, got {_describe(value)}")
    return number


def _integer(value, where: str) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(where, f"expected an integer, got {_describe(value)}")
    if not -_INT64 <= value < _INT64:  # what every JSON reader and the report's formatting can hold
        raise _Bad(where, f"expected a 64-bit integer, got {_describe(value)}")
    return value


def _text(value: str, where: str) -> str:
    """JSON's \\ud800 escapes decode to lone surrogates, which no file or terminal can take: refuse them."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _Bad(where, f"a lone surrogate ({value[exc.start]!a}) is not text") from None
    return value


def _json_value(value, where: str, depth: int = 0):
    """Free-form JSON: anything but NaN/Infinity, with string keys, at most MAX_DEPTH levels deep."""
    if depth > MAX_DEPTH:
        raise _Bad(where, f"nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, float) and not math.isfinite(value):
        raise _Bad(where, f"expected a finite number, got {_describe(value)}")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise _Bad(where, f"expected string keys, got {_describe(k)}")
            _json_value(v, _at(where, _text(k, where)), depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _json_value(v, f"{where}[{i}]", depth + 1)
    elif isinstance(value, str):
        _text(value, where)
    elif value is not None and not isinstance(value, (int, float, bool)):
        raise _Bad(where, f"expected a JSON value, got {type(value).__name__}")
    return value


_SIMPLE = {bool: "true or false", str: "a string", dict: "an object"}


def _convert(value, tp, where: str):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _convert(value, args[0], where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _Bad(where, f"expected a list, got {_describe(value)}")
        item_tp = typing.get_args(tp)[0]
        return tuple(_convert(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value))
    if is_dataclass(tp):
        return _from_dict(tp, value, where)
    if tp is float:
        return _number(value, where)
    if tp is int:
        return _integer(value, where)
    if tp in _SIMPLE:
        if not isinstance(value, tp) or (tp is not bool and isinstance(value, bool)):
            raise _Bad(where, f"expected {_SIMPLE[tp]}, got {_describe(value)}")
        return copy.deepcopy(_json_value(value, where)) if tp is dict else _text(value, where) if tp is str else value
    raise TypeError(f"results schema: unsupported field type {tp!r}")  # a bug in this module


def _one_of(allowed: tuple[str, ...]) -> Callable:
    def check(value, where):
        if value is not None and value not in allowed:
            raise _Bad(where, f"expected one of {', '.join(allowed)}, got {_describe(value)}")
    return check


def _check_shape(value: dict, where: str) -> None:
    for k, v in value.items():
        if v is None or isinstance(v, (dict, list)):
            raise _Bad(_at(where, k), f"expected a number, string or boolean, got {_describe(v)}")


def _check_stats(value: dict | None, where: str) -> None:
    if value is None:
        return
    for key in STATS_KEYS:
        if key not in value:
            raise _Bad(f"{where}.{key}", "required key is missing")
    for key, v in value.items():
        if v is None and key not in _STATS_REQUIRED_NUMBERS:
            continue
        at = _at(where, key)
        value[key] = _integer(v, at) if key in _STATS_INTS else _number(v, at)


def _check_speedups(value: dict, where: str) -> None:
    for provider, entry in value.items():
        value[provider] = _plain(_from_dict(Speedup, entry, _at(where, provider)))


def _mapping(block: dict, key: str, at: str) -> dict:
    value = block.get(key)
    if value is not None and not isinstance(value, dict):
        raise _Bad(f"{at}.{key}", f"expected an object, got {_describe(value)}")
    return value or {}


def _check_ceilings(value: dict, where: str) -> None:
    sheet = value.get("datasheet")
    if sheet is not None and not isinstance(sheet, dict):
        raise _Bad(f"{where}.datasheet", f"expected an object, got {_describe(sheet)}")
    for block, at in ((value, where), (sheet or {}, f"{where}.datasheet")):
        if block.get("copy_gbps") is not None:
            _number(block["copy_gbps"], f"{at}.copy_gbps")
        for name, v in _mapping(block, "bandwidth_gbps", at).items():
            if v is not None:
                _number(v, _at(f"{at}.bandwidth_gbps", name))
        for dtype, v in _mapping(block, "matmul_tflops", at).items():
            if v is not None:
                _number(v, _at(f"{at}.matmul_tflops", dtype))


def _needs_reason(ok_statuses: tuple[str, ...], what: str = "required when status is {!r}") -> Callable:
    def check(obj, where):
        if getattr(obj, "status", None) not in ok_statuses and not obj.reason.strip():
            raise _Bad(f"{where}.reason", what.format(getattr(obj, "status", None)))
    return check


def _case_rules(case: CaseResult, where: str) -> None:
    _needs_reason(("ok",))(case, where)
    if case.status == "ok" and case.stats is None:
        raise _Bad(f"{where}.stats", "required when status is 'ok'")


# Per-field checks beyond the type, and per-record rules; the types themselves come from the fields.
_FIELD_CHECKS: dict[tuple[type, str], Callable] = {
    (CaseResult, "status"): _one_of(STATUSES),
    (CaseResult, "role"): _one_of(ROLES),
    (CaseResult, "verdict"): _one_of(VERDICTS),
    (CaseResult, "bound"): _one_of(BOUNDS),
    (CaseResult, "mode"): _one_of(MODES),
    (CaseResult, "shape"): _check_shape,
    (CaseResult, "stats"): _check_stats,
    (CaseResult, "speedups"): _check_speedups,
    (ArchRow, "status"): _one_of(ARCH_STATUSES),
    (Results, "ceilings"): _check_ceilings,
}
_RECORD_RULES: dict[type, Callable] = {
    CaseResult: _case_rules,
    ArchRow: _needs_reason(("ran",)),
    Waiver: _needs_reason((), "every waiver needs a reason"),
}


def _from_dict(cls: type, data, where: str):
    if not isinstance(data, dict):
        raise _Bad(where, f"expected an object, got {_describe(data)}")
    hints = _hints(cls)
    for key in data:
        if key not in hints:
            raise _Bad(_at(where, key), "unknown key")
    kwargs = {}
    for name in (f.name for f in fields(cls)):
        at = f"{where}.{name}" if where else name
        if name not in data:
            raise _Bad(at, "required key is missing")
        kwargs[name] = _convert(data[name], hints[name], at)
        if check := _FIELD_CHECKS.get((cls, name)):
            check(kwargs[name], at)
    obj = cls(**kwargs)
    if rule := _RECORD_RULES.get(cls):
        rule(obj, where)
    return obj


def _case_key(case: CaseResult) -> tuple:
    return (case.kernel, case.provider, case.backend, case.dtype, case.case_id, case.mode)


def _check_version(doc: dict) -> int:
    if "schema_version" not in doc:
        raise _Bad("schema_version", "required key is missing")
    version = doc["schema_version"]
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        readable = " and ".join(str(v) for v in READABLE_VERSIONS)
        raise _Bad("schema_version", f"unsupported version {_describe(version)} (this harness reads {readable})")
    return int(version)


def _upgrade_case(case, version: int, where: str):
    """A case of an older schema as one of the current schema: the fields added since get their defaults.

    Only a dict is upgraded (anything else fails the normal checks); a field from a later version than the
    file's is refused as unknown, so a version-2 file cannot smuggle in schema-3 keys, unless it holds that
    field's default (``"mode": "fwd"``), which says nothing the file's own schema could not."""
    if version == SCHEMA_VERSION or not isinstance(case, dict):
        return case
    defaults = {f.name: f.default for f in fields(CaseResult)}
    case = dict(case)
    for key, since in CASE_FIELDS_ADDED_IN.items():
        if version < since:
            if key in case and case[key] != _plain(defaults[key]):
                raise _Bad(_at(where, key), f"unknown key in a schema version {version} file (added in {since})")
            case[key] = defaults[key]
    return case


def results_from_json(doc, source: str = "<results>") -> Results:
    """Build a :class:`Results` from a parsed document; :class:`ResultsError` names source and key."""
    try:
        if not isinstance(doc, dict):
            raise _Bad("(top level)", f"expected an object, got {_describe(doc)}")
        version = _check_version(doc)
        if version != SCHEMA_VERSION and isinstance(doc.get("cases"), list):
            doc = {**doc, "schema_version": SCHEMA_VERSION,
                   "cases": [_upgrade_case(c, version, f"cases[{i}]") for i, c in enumerate(doc["cases"])]}
        elif version != SCHEMA_VERSION:
            doc = {**doc, "schema_version": SCHEMA_VERSION}
        results = _from_dict(Results, doc, "")
        seen: dict[tuple, int] = {}
        for i, case in enumerate(results.cases):
            first = seen.setdefault(_case_key(case), i)
            if first != i:
                raise _Bad(f"cases[{i}]", f"duplicate of cases[{first}] ({' '.join(_case_key(case))})")
    except _Bad as exc:
        raise ResultsError(f"{source}: {exc}") from None
    return results


def case_from_json(doc, source: str = "<case>", version: int = SCHEMA_VERSION) -> CaseResult:
    try:
        return _from_dict(CaseResult, _upgrade_case(doc, version, "case"), "case")
    except _Bad as exc:
        raise ResultsError(f"{source}: {exc}") from None


def _parse_json(text: str, source: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{source}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") \
            from None
    except RecursionError:
        raise ResultsError(f"{source}: not valid JSON: nested too deeply") from None
    except ValueError:  # json.loads' int() refuses a number this long, with a plain ValueError
        raise ResultsError(f"{source}: not valid JSON: {_TOO_LONG}") from None


_TOO_LONG = f"a number with more than {sys.get_int_max_str_digits()} digits"


def read_json_file(path: str | os.PathLike):
    """(parsed JSON, source name) of a file; unreadable or malformed is one :class:`ResultsError` line."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{source}: cannot read: {exc.__class__.__name__}: {exc}") from None
    return _parse_json(text, source), source


def load_results(path: str | os.PathLike) -> Results:
    """Load and validate results.json; any problem is one :class:`ResultsError` line."""
    return results_from_json(*read_json_file(path))


def load_partial(jsonl_path: str | os.PathLike) -> tuple[CaseResult, ...]:
    """The cases recorded by :func:`append_case`; a torn last line (a crash mid-write) is skipped."""
    source = str(jsonl_path)
    try:
        text = Path(jsonl_path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ResultsError(f"{source}: cannot read: {exc.__class__.__name__}: {exc}") from None
    lines = text.split("\n")
    torn_tail = not text.endswith("\n")
    cases: list[CaseResult] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        last = number == len(lines)
        where = f"{source}: line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if last and torn_tail:
                break
            raise ResultsError(f"{where}: not valid JSON: {exc.msg}") from None
        except RecursionError:
            raise ResultsError(f"{where}: not valid JSON: nested too deeply") from None
        except ValueError:
            raise ResultsError(f"{where}: not valid JSON: {_TOO_LONG}") from None
        try:
            if not isinstance(record, dict):
                raise _Bad("(top level)", f"expected an object with keys schema_version and case, "
                                          f"got {_describe(record)}")
            for key in record:
                if key not in ("schema_version", "case"):
                    raise _Bad(_at("", key), "unknown key (a record has schema_version and case)")
            version = _check_version(record)
            if "case" not in record:
                raise _Bad("case", "required key is missing")
        except _Bad as exc:
            raise ResultsError(f"{where}: {exc}") from None
        cases.append(case_from_json(record["case"], where, version))
    return tuple(cases)


def load_interrupted(jsonl_path: str | os.PathLike) -> Results:
    """An interrupted run as results: its finished cases (``cases.jsonl``), with the run's header (``run.json``
    beside it) when present. A problem in the header names run.json; after that only the cases can be wrong."""
    from harness.results.model import SCHEMA_VERSION, to_json

    cases = [to_json(c) for c in load_partial(jsonl_path)]
    header_path = Path(jsonl_path).with_name("run.json")
    header = {}
    if header_path.exists():
        try:
            header = json.loads(header_path.read_text())
        except (OSError, ValueError, RecursionError) as exc:  # ValueError: bad JSON or UTF-8, a 5000-digit number
            raise ResultsError(f"{header_path}: unreadable run header: {exc}") from None
        if not isinstance(header, dict):
            raise ResultsError(f"{header_path}: expected a JSON object")
    doc = {"schema_version": SCHEMA_VERSION, "environment": header.get("environment", {}),
           "ceilings": header.get("ceilings", {}), "cases": cases, "arch_matrix": header.get("arch_matrix", []),
           "waivers": header.get("waivers", []), "complete": False}
    results_from_json({**doc, "cases": []}, str(header_path))
    return results_from_json(doc, str(jsonl_path))


def load_any(path: str | os.PathLike) -> Results:
    """results.json, or the cases.jsonl of an interrupted run."""
    return load_interrupted(path) if str(path).endswith(".jsonl") else load_results(path)
