"""The results schema: round trips, CSV columns, strict loading, atomic and incremental writes.

Every Results here is SYNTHETIC, built by tests.e2e.synthetic_results from a seeded RNG: device
"synthetic-device", no number measured on any GPU. Nothing is written outside tmp_path.
"""

from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import fields, replace

import pytest

from harness.results.io import append_case, flat_case, results_frame, write_results
from harness.results.load import load_partial, load_results
from harness.results.model import SCHEMA_VERSION, STATS_KEYS, CaseResult, Results, ResultsError, to_json
from tests.e2e import synthetic_results


@pytest.fixture
def results() -> Results:
    return synthetic_results()


# ----------------------------------------------------------------------------- round trips

def test_json_round_trip(results, tmp_path):
    json_path, csv_path = write_results(results, tmp_path)
    assert load_results(json_path) == results
    assert json.loads(json_path.read_text())["schema_version"] == SCHEMA_VERSION
    assert to_json(load_results(json_path)) == to_json(results)


def test_full_precision_kept(results, tmp_path):
    json_path, csv_path = write_results(results, tmp_path)
    case = results.cases[0]
    assert case.status == "ok" and len(case.samples_us) > 50
    assert load_results(json_path).cases[0].samples_us == case.samples_us
    with open(csv_path, newline="") as fh:
        row = next(csv.DictReader(fh))
    assert float(row["stats.median"]) == case.stats["median"]
    assert float(row["gbps"]) == case.gbps


def test_csv_columns_are_flattened_fields(results, tmp_path):
    _, csv_path = write_results(results, tmp_path)
    with open(csv_path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows = list(reader)
    expected = []
    for f in fields(CaseResult):
        if f.name == "stats":
            expected += [f"stats.{k}" for k in STATS_KEYS]
        elif f.name == "speedups":
            providers = dict.fromkeys(p for c in results.cases for p in c.speedups)
            expected += [f"speedups.{p}.{k}" for p in providers for k in ("ratio", "lo", "hi")]
        elif f.name in ("samples_us", "dropped_us", "warm_us", "host_us", "wall_us"):
            expected.append(f"{f.name}.count")
        elif f.name == "launch":  # a dict: flattened when a case has one, no column when none has
            expected += list(dict.fromkeys(f"launch.{k}" for c in results.cases for k in (c.launch or {})))
        else:
            expected.append(f.name)
    assert header == expected
    assert len(rows) == len(results.cases)
    assert list(results_frame(results).columns) == header
    counts = [int(r[header.index("samples_us.count")]) for r in rows]
    assert counts == [len(c.samples_us) for c in results.cases]
    assert "samples_us" not in header  # raw samples live in the JSON only


def test_flat_case_matches_frame(results):
    frame = results_frame(results)
    assert frame.shape[0] == len(results.cases)
    assert frame.loc[0, "stats.median"] == flat_case(results.cases[0])["stats.median"]


def test_atomic_write_leaves_no_temp_file(results, tmp_path):
    write_results(results, tmp_path)
    write_results(results, tmp_path)  # overwrite in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv", "results.json"]


def test_write_refuses_invalid_and_keeps_old_file(results, tmp_path):
    write_results(results, tmp_path)
    before = (tmp_path / "results.json").read_text()
    bad_stats = {**results.cases[0].stats, "median": float("nan")}
    bad = replace(results, cases=(replace(results.cases[0], stats=bad_stats),) + results.cases[1:])
    with pytest.raises(ResultsError, match=r"cases\[0\]\.stats\.median: expected a finite number, got NaN"):
        write_results(bad, tmp_path)
    assert (tmp_path / "results.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv", "results.json"]


# ----------------------------------------------------------------------------- strict loading

def _mutations():
    def set_(path, value):
        def apply(doc):
            *head, last = path
            node = doc
            for key in head:
                node = node[key]
            node[last] = value
        return apply

    def delete(path):
        def apply(doc):
            *head, last = path
            node = doc
            for key in head:
                node = node[key]
            del node[last]
        return apply

    return [
        ("missing key", delete(["cases", 3, "seed"]), r"cases\[3\]\.seed: required key is missing"),
        ("wrong type", set_(["cases", 3, "stats", "median"], "x"),
         r"cases\[3\]\.stats\.median: expected a number, got 'x'"),
        ("bad schema_version", set_(["schema_version"], 99), r"schema_version: unsupported version 99"),
        ("no schema_version", delete(["schema_version"]), r"schema_version: required key is missing"),
        ("non-dict case", set_(["cases", 2], [1, 2]), r"cases\[2\]: expected an object, got a list"),
        ("NaN", set_(["cases", 1, "gbps"], float("nan")),
         r"cases\[1\]\.gbps: expected a finite number, got NaN"),
        ("unknown key", set_(["cases", 0, "median_us"], 1.0), r"cases\[0\]\.median_us: unknown key"),
        ("bad status", set_(["cases", 0, "status"], "fine"),
         r"cases\[0\]\.status: expected one of ok, wrong"),
        ("bool as number", set_(["cases", 0, "bytes"], True),
         r"cases\[0\]\.bytes: expected a number, got true"),
        ("string sample", set_(["cases", 0, "samples_us", 4], "7"),
         r"cases\[0\]\.samples_us\[4\]: expected a number, got '7'"),
        ("missing stats key", delete(["cases", 0, "stats", "p95"]), r"cases\[0\]\.stats\.p95: required key"),
        ("wrong without reason", set_(["cases", 0, "status"], "wrong"), r"cases\[0\]\.reason: required when"),
        ("speedup shape", set_(["cases", 0, "speedups", "reference"], 3.2),
         r"cases\[0\]\.speedups\.reference: expected an object, got 3\.2"),
        ("speedup key", set_(["cases", 0, "speedups", "reference", "mid"], 3.2),
         r"cases\[0\]\.speedups\.reference\.mid: unknown key"),
        ("arch status", set_(["arch_matrix", 0, "status"], "maybe"),
         r"arch_matrix\[0\]\.status: expected one of"),
        ("waiver reason", set_(["waivers", 1, "reason"], " "),
         r"waivers\[1\]\.reason: every waiver needs a reason"),
        ("ceiling type", set_(["ceilings", "matmul_tflops", "bf16"], "fast"),
         r"ceilings\.matmul_tflops\.bf16: expected a number, got 'fast'"),
        ("complete not bool", set_(["complete"], "yes"), r"complete: expected true or false, got 'yes'"),
        ("cases not a list", set_(["cases"], {}), r"cases: expected a list, got an object"),
        ("float seed", set_(["cases", 0, "seed"], 1.5), r"cases\[0\]\.seed: expected an integer, got 1\.5"),
        ("duplicate case", lambda doc: doc["cases"].append(doc["cases"][0]), r"duplicate of cases\[0\]"),
    ]


@pytest.mark.parametrize("name,mutate,message", _mutations(), ids=[m[0] for m in _mutations()])
def test_malformed_file_one_line_error(results, tmp_path, name, mutate, message):
    doc = to_json(results)
    mutate(doc)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(doc))  # Python's json writes NaN as a bare token, as a careless producer would
    with pytest.raises(ResultsError) as info:
        load_results(path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{path}: ")
    assert re.search(message, text), text


@pytest.mark.parametrize("text,message", [
    ('{"schema_version": 1, "cases": [', "not valid JSON"),
    ("", "not valid JSON"),
    ("[1, 2]", "(top level): expected an object, got a list"),
    ('{"schema_version": "1"}', "schema_version: unsupported version '1'"),
])
def test_unparseable_file_one_line_error(tmp_path, text, message):
    path = tmp_path / "results.json"
    path.write_text(text)
    with pytest.raises(ResultsError) as info:
        load_results(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_truncated_file(results, tmp_path):
    path, _ = write_results(results, tmp_path)
    path.write_text(path.read_text()[: 5000])
    with pytest.raises(ResultsError, match=r"results\.json: not valid JSON: .* at line \d+ column \d+$"):
        load_results(path)


def test_missing_file(tmp_path):
    with pytest.raises(ResultsError, match="cannot read: FileNotFoundError"):
        load_results(tmp_path / "nope.json")


# ----------------------------------------------------------------------------- incremental records

def test_partial_jsonl_round_trip_and_torn_tail(results, tmp_path):
    path = tmp_path / "run" / "cases.jsonl"
    for case in results.cases[:5]:
        append_case(path, case)
    assert load_partial(path) == results.cases[:5]
    with open(path, "ab") as fh:  # a crash in the middle of the sixth record
        fh.write(json.dumps({"schema_version": SCHEMA_VERSION, "case": to_json(results.cases[5])}).encode()[:300])
    assert load_partial(path) == results.cases[:5]
    append_case(path, results.cases[6])  # resuming cuts the torn fragment first
    assert load_partial(path) == results.cases[:5] + (results.cases[6],)
    assert path.read_bytes().endswith(b"\n")


def test_partial_jsonl_corrupt_middle_line_is_an_error(results, tmp_path):
    path = tmp_path / "cases.jsonl"
    append_case(path, results.cases[0])
    with open(path, "a") as fh:
        fh.write("{garbage\n")
    append_case(path, results.cases[1])
    with pytest.raises(ResultsError, match=r"cases\.jsonl: line 2: not valid JSON"):
        load_partial(path)


def test_partial_jsonl_bad_record_names_line_and_key(results, tmp_path):
    path = tmp_path / "cases.jsonl"
    append_case(path, results.cases[0])
    doc = to_json(results.cases[1])
    doc["stats"]["n"] = "many"
    with open(path, "a") as fh:
        fh.write(json.dumps({"schema_version": SCHEMA_VERSION, "case": doc}) + "\n")
    with pytest.raises(ResultsError, match=r"line 2: case\.stats\.n: expected an integer, got 'many'"):
        load_partial(path)


def test_append_case_validates_before_writing(results, tmp_path):
    path = tmp_path / "cases.jsonl"
    with pytest.raises(ResultsError, match=r"case\.status: expected one of"):
        append_case(path, replace(results.cases[0], status="fine"))
    assert not path.exists() or os.path.getsize(path) == 0
