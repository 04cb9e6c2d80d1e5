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
- ``ceilings`` holds ``copy_gbps`` (measured device copy), ``bandwidth_gbps`` ({pattern: GB/s}, the
  patterns of :data:`harness.ceilings.PATTERNS`), ``matmul_tflops`` ({dtype: TFLOP/s}) and optionally
  ``datasheet`` with ``copy_gbps`` and ``matmul_tflops``; other keys are free-form;
- ``environment`` is free-form; the report reads ``device``, ``arch``, ``date``, ``flush``,
  ``stopping_rule`` and ``throttle`` when present and lists every key as provenance.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
import typing
from collections.abc import Iterable
from dataclasses import fields
from pathlib import Path

from harness.results.load import case_from_json, results_from_json
from harness.results.model import SCHEMA_VERSION, CaseResult, Results, _hints, to_json


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


def finite_json(value):
    """NaN and infinities as None, deeply: what is written stays standard JSON that the loaders read back."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


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
    # Nullable dtypes: an integer column with a missing value stays integer (n=208, not 208.0).
    return pd.DataFrame(rows, columns=columns, dtype=object).convert_dtypes()


def _csv_text(results: Results) -> str:
    # The same frame `results_frame` gives: one schema for the CSV and for analysis in pandas.
    return results_frame(results).to_csv(index=False, lineterminator="\n", na_rep="")


def write_results(results: Results, out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Validate, then atomically write out_dir/results.json and out_dir/results.csv."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = to_json(results)
    results_from_json(doc, str(out / "results.json"))  # never write what could not be read back
    atomic_write_text(out / "results.json", _dumps(doc, indent=1) + "\n")
    atomic_write_text(out / "results.csv", _csv_text(results))
    return out / "results.json", out / "results.csv"


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
