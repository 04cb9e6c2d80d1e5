"""The results schema, in one place: frozen dataclasses, strict loading, atomic writes.

Everything that leaves a benchmark run goes through here: ``results.json`` (full precision, raw
samples), ``results.csv`` (one row per case, derived from the dataclass fields), and ``cases.jsonl``
(one line per finished case, so an interrupted run keeps what it measured).

Conventions the producers follow and the report relies on:

- times are microseconds (``*_us``); ``gbps`` counts bytes read plus bytes written;
- ``pct_roofline`` is a percentage (81.5 means 81.5 % of the measured roofline), ``target`` is the
  spec's fraction (0.8); ``verdict`` is "model-error" above 100 %;
- ``stats`` holds the :data:`STATS_KEYS` in microseconds, ``cv`` as a fraction (std / mean), numbers
  or ``null`` where a statistic is undefined for the sample, never NaN: the document is standard JSON;
- ``speedups[p]`` is p's median over this case's median with its 95 % interval;
- ``ceilings`` holds ``copy_gbps`` (measured device copy), ``matmul_tflops`` ({dtype: TFLOP/s}) and
  optionally ``datasheet`` with the same two keys; other keys are free-form;
- ``environment`` is free-form; the report reads ``device``, ``arch``, ``date``, ``flush``,
  ``stopping_rule`` and ``throttle`` when present and lists every key as provenance.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import functools
import io
import json
import math
import os
import sys
import tempfile
import types
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path

SCHEMA_VERSION = 1

STATUSES = ("ok", "wrong", "error", "skipped")
ROLES = ("candidate", "baseline", "peer")
VERDICTS = ("pass", "below-target", "model-error", "n/a")
BOUNDS = ("memory", "compute")
ARCH_STATUSES = ("ran", "fallback", "skipped", "unavailable")
STATS_KEYS = ("n", "min", "p5", "p25", "median", "p75", "p95", "max", "mean", "std", "cv", "iqr",
              "median_ci_lo", "median_ci_hi", "outliers_low", "outliers_high")
_STATS_REQUIRED_NUMBERS = ("n", "min", "median", "max")
_STATS_INTS = ("n", "outliers_low", "outliers_high")


class ResultsError(ValueError):
    """A results file or record that does not match the schema; the message is one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.splitlines()))  # every line break, U+2028 and \x1e included


@dataclass(frozen=True)
class CaseResult:
    """One kernel x provider x dtype x case, measured (or not, with the reason)."""

    kernel: str
    provider: str                 # "triton", "cuda", "reference" (eager torch), "torch.compile", peers
    backend: str                  # the backend that produced it: "triton", "cuda", "reference", "peer"
    role: str                     # "candidate" | "baseline" | "peer"
    dtype: str
    case_id: str
    shape: dict                   # symbol -> value
    headline: bool
    status: str                   # "ok" | "wrong" (failed the pre-timing check) | "error" | "skipped"
    reason: str                   # why wrong/error/skipped; "" when ok
    method: str                   # timing method, e.g. "cuda-events", "cupti", "host-timer"
    stop_reason: str              # why sampling stopped
    samples_us: tuple[float, ...]
    dropped_us: tuple[float, ...]  # samples discarded as throttled
    warm_us: tuple[float, ...]     # back-to-back launches, no flush
    stats: dict | None            # STATS_KEYS over samples_us
    warm_median_us: float | None
    bytes: float | None
    flops: float | None
    gbps: float | None
    tflops: float | None
    pct_roofline: float | None    # percent of the measured roofline
    bound: str | None             # "memory" | "compute"
    target: float | None          # fraction of the roofline the spec asks for
    verdict: str                  # "pass" | "below-target" | "model-error" | "n/a"
    speedups: dict                # other provider -> {"ratio", "lo", "hi"}; > 1: this one is faster
    seed: int


@dataclass(frozen=True)
class Speedup:
    """The shape of each ``CaseResult.speedups`` value (kept as a plain dict there)."""

    ratio: float                  # the other provider's median / this case's median
    lo: float | None              # 95 % interval
    hi: float | None


@dataclass(frozen=True)
class ArchRow:
    """What happened for one kernel on one architecture."""

    kernel: str
    arch: str
    backend: str                  # the backend that ran (or was tried)
    status: str                   # "ran" | "fallback" | "skipped" | "unavailable"
    reason: str


@dataclass(frozen=True)
class Waiver:
    """A loosened tolerance, waived check or skip, with its reason."""

    kernel: str
    what: str
    reason: str


@dataclass(frozen=True)
class Results:
    schema_version: int
    environment: dict
    ceilings: dict
    cases: tuple[CaseResult, ...]
    arch_matrix: tuple[ArchRow, ...]
    waivers: tuple[Waiver, ...]
    complete: bool


# ----------------------------------------------------------------------------- to plain JSON

def _plain(value):
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def to_json(results: Results | CaseResult) -> dict:
    """A plain, JSON-ready dict (a deep copy): tuples become lists."""
    return _plain(results)


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
            _json_value(v, _at(where, k), depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _json_value(v, f"{where}[{i}]", depth + 1)
    elif value is not None and not isinstance(value, (str, int, float, bool)):
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
        return copy.deepcopy(_json_value(value, where)) if tp is dict else value
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


def _check_ceilings(value: dict, where: str) -> None:
    sheet = value.get("datasheet")
    if sheet is not None and not isinstance(sheet, dict):
        raise _Bad(f"{where}.datasheet", f"expected an object, got {_describe(sheet)}")
    for block, at in ((value, where), (sheet or {}, f"{where}.datasheet")):
        if block.get("copy_gbps") is not None:
            _number(block["copy_gbps"], f"{at}.copy_gbps")
        per_dtype = block.get("matmul_tflops")
        per_dtype = {} if per_dtype is None else per_dtype
        if not isinstance(per_dtype, dict):
            raise _Bad(f"{at}.matmul_tflops", f"expected an object, got {_describe(per_dtype)}")
        for dtype, v in per_dtype.items():
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


@functools.cache
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


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
    return (case.kernel, case.provider, case.backend, case.dtype, case.case_id)


def _check_version(doc: dict) -> None:
    if "schema_version" not in doc:
        raise _Bad("schema_version", "required key is missing")
    version = doc["schema_version"]
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise _Bad("schema_version", f"unsupported version {_describe(version)} (this harness reads {SCHEMA_VERSION})")


def results_from_json(doc, source: str = "<results>") -> Results:
    """Build a :class:`Results` from a parsed document; :class:`ResultsError` names source and key."""
    try:
        if not isinstance(doc, dict):
            raise _Bad("(top level)", f"expected an object, got {_describe(doc)}")
        _check_version(doc)
        results = _from_dict(Results, doc, "")
        seen: dict[tuple, int] = {}
        for i, case in enumerate(results.cases):
            first = seen.setdefault(_case_key(case), i)
            if first != i:
                raise _Bad(f"cases[{i}]", f"duplicate of cases[{first}] ({' '.join(_case_key(case))})")
    except _Bad as exc:
        raise ResultsError(f"{source}: {exc}") from None
    return results


def case_from_json(doc, source: str = "<case>") -> CaseResult:
    try:
        return _from_dict(CaseResult, doc, "case")
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


def load_results(path: str | os.PathLike) -> Results:
    """Load and validate results.json; any problem is one :class:`ResultsError` line."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{source}: cannot read: {exc.__class__.__name__}: {exc}") from None
    return results_from_json(_parse_json(text, source), source)


# ----------------------------------------------------------------------------- writing

def _dumps(doc, **kw) -> str:
    return json.dumps(doc, allow_nan=False, ensure_ascii=False, **kw)


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temp file in the same folder, fsync, then os.replace: readers never see half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are meant to be read by others (CI artifacts)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable, where a folder can be opened
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _flatten(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
    elif isinstance(value, tuple):
        out[f"{prefix}.count"] = len(value)
    else:
        out[prefix] = value


def flat_case(case: CaseResult) -> dict:
    """One CSV row: dict fields flattened with dots (stats.median), sample tuples as counts."""
    row: dict = {}
    for f in fields(CaseResult):
        value = getattr(case, f.name)
        if f.name == "shape":  # symbols differ per kernel: one column, not a sparse spread
            row["shape"] = json.dumps(value, separators=(",", ":"))
        elif value is None and dict in typing.get_args(_hints(CaseResult)[f.name]):
            continue  # an absent dict (stats of a skipped case) adds no column of its own
        else:
            _flatten(f.name, value, row)
    return row


def _columns(rows: Iterable[dict]) -> list[str]:
    """Field order, then first appearance within a field (stats keys keep their producer's order)."""
    order = {f.name: i for i, f in enumerate(fields(CaseResult))}
    seen: dict[str, int] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, len(seen))
    return sorted(seen, key=lambda k: (order[k.split(".")[0]], seen[k]))


def _rows(results: Results) -> tuple[list[str], list[dict]]:
    rows = [flat_case(c) for c in results.cases]
    return (_columns(rows) if rows else [f.name for f in fields(CaseResult)]), rows


def results_frame(results: Results):
    """A pandas DataFrame, one row per case, with the CSV's columns."""
    import pandas as pd

    columns, rows = _rows(results)
    return pd.DataFrame(rows, columns=columns)


def _csv_text(results: Results) -> str:
    columns, rows = _rows(results)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buf.getvalue()


def write_results(results: Results, out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Validate, then atomically write out_dir/results.json and out_dir/results.csv."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = to_json(results)
    results_from_json(doc, str(out / "results.json"))  # never write what could not be read back
    atomic_write_text(out / "results.json", _dumps(doc, indent=1) + "\n")
    atomic_write_text(out / "results.csv", _csv_text(results))
    return out / "results.json", out / "results.csv"


# ----------------------------------------------------------------------------- incremental records

def append_case(jsonl_path: str | os.PathLike, case: CaseResult) -> None:
    """Append one finished case as a JSON line, flushed and fsync'd."""
    path = Path(jsonl_path)
    doc = to_json(case)
    case_from_json(doc, str(path))
    line = _dumps({"schema_version": SCHEMA_VERSION, "case": doc}) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        # A crash mid-append leaves a line without its newline; cut it so the next record starts clean.
        size = fh.seek(0, os.SEEK_END)
        if size and fh.seek(size - 1) >= 0 and fh.read(1) != b"\n":
            fh.seek(0)
            fh.truncate(fh.read().rfind(b"\n") + 1)  # rare: the whole file is read only after a crash
        fh.write(line.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


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
            _check_version(record)
            if "case" not in record:
                raise _Bad("case", "required key is missing")
        except _Bad as exc:
            raise ResultsError(f"{where}: {exc}") from None
        cases.append(case_from_json(record["case"], where))
    return tuple(cases)
