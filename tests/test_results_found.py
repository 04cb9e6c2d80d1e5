"""What the results properties (tests/test_fuzz_results.py) found, each pinned as its own case: the document that
once gave a traceback, a wrong exit or a line without its key, and the one line it gives now."""

from __future__ import annotations

import copy
import math
import tempfile
from pathlib import Path

import pytest

from harness.results.model import SCHEMA_VERSION
from tests.fuzz_docs import get
from tests.results_docs import (
    BASES,
    SCRATCH,
    VERSION,
    _dumps,
    _files,
    _jsonl,
    _run,
    deep,
    report_and_export,
    template_compiled_once,  # noqa: F401  an autouse fixture: Jinja compiled once
)


def _set(path, value):
    def apply(doc):
        get(doc, path[:-1])[path[-1]] = value
    return apply


# (change to the lean results.json, a fragment of the single expected line)
REGRESSIONS = [
    (_set(("ceilings", "copy_gbps"), 10**400), "ceilings.copy_gbps: expected a finite number, got 1000"),
    (_set(("cases", 0, "stats", "n"), 2**64), "cases[0].stats.n: expected a 64-bit integer, got 18446744073709551616"),
    (_set(("cases", 0, "seed"), -10**30), "cases[0].seed: expected a 64-bit integer"),
    (_set(("",), 1), '"": unknown key'),
    (_set((" ",), 1), '" ": unknown key'),
    (_set(("cases", 0, "a\x1eb"), 1), 'cases[0]."a\\u001eb": unknown key'),
    (_set(("environment", "a\u2028b"), math.nan), 'environment."a\\u2028b": expected a finite number, got NaN'),
    (_set(("environment", "deep"), deep(40)), "environment.deep.k[0].k[0]"),  # ...: nested more than 32 levels
    (_set(("ceilings", "matmul_tflops"), []), "ceilings.matmul_tflops: expected an object, got a list"),
]


@pytest.mark.parametrize("change, fragment", REGRESSIONS, ids=[f"r{i}" for i in range(len(REGRESSIONS))])
def test_found_by_the_properties(change, fragment, tmp_path):
    doc = copy.deepcopy(BASES["lean"])
    change(doc)
    path = tmp_path / "results.json"
    path.write_bytes(_dumps(doc))
    assert report_and_export(path.read_bytes(), "results.json") == 2
    code, out, err, _ = _run(["report", str(path), "--out", str(tmp_path / "out")])
    assert code == 2 and err.startswith(f"{path}: {fragment}") and err.count("\n") == 1, err


@pytest.mark.parametrize("data, fragment", [
    (b'{"schema_version": ' + b"9" * 5000 + b"}", "not valid JSON: a number with more than 4300 digits"),
    ((VERSION + b', "case": {}}\n') * 2 + b"[" * 100000 + b"\n", "line 1: case.kernel: required key"),
    (b"[" * 100000 + b"\n", "line 1: not valid JSON: nested too deeply"),
    (b"[1]\n", "line 1: (top level): expected an object with keys schema_version and case, got a list"),
    (b'{"schema_version": true, "case": {}}\n', "line 1: schema_version: unsupported version true"),
    (b'{"case": {}}\n', "line 1: schema_version: required key is missing"),
    (VERSION + b'}\n', "line 1: case: required key is missing"),
    (VERSION + b', "case": {}, "x\\n": 1}\n', 'line 1: "x\\n": unknown key'),
    (VERSION + b', "case": {}, "x": ' + b"9" * 5000 + b"}\n", "line 1: not valid JSON: a number with more"),
])
def test_found_in_cases_jsonl(data, fragment):
    name = "cases.jsonl" if b"\n" in data else "results.json"
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        code, out, err, _ = _run(["report", str(path), "--out", str(Path(tmp) / "out")])
    assert code == 2 and err.count("\n") == 1 and fragment in err, err
    assert report_and_export(data, name) == 2


@pytest.mark.parametrize("header, fragment", [
    (b"[" * 100000, "run.json: unreadable run header: maximum recursion depth exceeded"),
    (b'{"environment": ' + b"9" * 5000 + b"}", "run.json: unreadable run header: Exceeds the limit"),
    (b'{"environment": {"x": NaN}}', "run.json: environment.x: expected a finite number, got NaN"),
    (b"{}", "cases.jsonl: cases[1]: duplicate of cases[0]"),  # the cases' problem, not the header's
    (b'{"waivers": []}', "cases.jsonl: cases[1]: duplicate of cases[0]"),
])
def test_run_header_beside_cases_jsonl(header, fragment):
    """An interrupted run's header (run.json) is read with the cases; each problem names its own file."""
    record = {"schema_version": SCHEMA_VERSION, "case": BASES["lean"]["cases"][0]}
    data = _jsonl([record, record])
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        (Path(tmp) / "run.json").write_bytes(header)
        path = Path(tmp) / "cases.jsonl"
        path.write_bytes(data)
        code, out, err, _ = _run(["report", str(path), "--out", str(Path(tmp) / "out")])
    assert code == 2 and err.count("\n") == 1 and f"/{fragment}" in err, err
    assert report_and_export(data, "cases.jsonl", header) == 2


def test_out_in_the_way_is_one_line_and_nothing_written(tmp_path):
    path = tmp_path / "results.json"
    path.write_bytes(_dumps(BASES["lean"]))
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    for argv in (["export", str(path), "--out", str(tmp_path / "folder")],
                 ["export", str(path), "--out", str(tmp_path / "file" / "pb.json")],
                 ["report", str(path), "--out", str(tmp_path / "file")],
                 ["report", str(path), "--out", str(tmp_path / "file" / "sub")]):
        code, out, err, _ = _run(argv)
        assert code == 2 and out == "" and err.startswith(f"--out {argv[-1]}: ") and err.count("\n") == 1, err
    assert _files(tmp_path) == ["file", "folder", "results.json"]
