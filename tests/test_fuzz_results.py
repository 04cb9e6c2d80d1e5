"""Property-based tests: a malformed results.json or cases.jsonl gives one line naming the file, exit 2.

hypothesis starts from small valid documents (SYNTHETIC: built here from harness.results' dataclasses,
device "synthetic-device", no number measured anywhere) and breaks them: keys deleted, added,
renamed; values swapped for values of other types, NaN, Infinity, huge numbers; the JSON text cut,
spliced, made invalid UTF-8; cases.jsonl lines torn, replaced by other records or garbage, given a
wrong schema_version. ``python -m harness report FILE --out DIR`` and ``python -m harness export FILE
--out FILE`` must then exit 0, or exit 2 with one line per problem that starts with the file (and
names the key where there is one), never a traceback, and on exit 2 nothing written: no report.md,
no partial or temporary file, not even the output folder. Every property runs 500 derandomized
examples.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import math
import os
import re
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings
from hypothesis import strategies as st

from harness.cli.main import main
from harness.report import render
from harness.results.model import SCHEMA_VERSION, STATS_KEYS, ArchRow, CaseResult, Results, Waiver, to_json
from tests.e2e import FUZZ_EXAMPLES
from tests.fuzz_docs import get, splice_bytes, structural_mutation, walk

VERSION = b'{"schema_version": ' + str(SCHEMA_VERSION).encode()  # the start of a record of this schema

FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much, HealthCheck.large_base_example])


def _stats(samples: list[float]) -> dict:
    s = sorted(samples)
    n = len(s)
    mean = sum(s) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in s) / (n - 1))
    q = {p: s[min(n - 1, round(p / 100 * (n - 1)))] for p in (5, 25, 50, 75, 95)}
    stats = {"n": n, "min": s[0], "p5": q[5], "p25": q[25], "median": q[50], "p75": q[75], "p95": q[95],
             "max": s[-1], "mean": mean, "std": std, "cv": std / mean, "iqr": q[75] - q[25],
             "median_ci_lo": q[25], "median_ci_hi": q[75], "outliers_low": 0, "outliers_high": 1}
    assert tuple(stats) == STATS_KEYS
    return stats


def _case(provider, backend, role, samples, status="ok", reason="", headline=True, **extra) -> CaseResult:
    shape = {"rows": 4096, "cols": 4096} if headline else {"rows": 17, "cols": 769, "transposed": True}
    stats = _stats(samples) if samples else None
    median = stats["median"] if stats else None
    nbytes, flops = 3.0 * 2 * shape["rows"] * shape["cols"], 2.0 * shape["rows"] * shape["cols"]
    base = dict(kernel="scale", provider=provider, backend=backend, role=role, dtype="bf16",
                case_id=",".join(f"{k}={v}" for k, v in shape.items()), shape=shape, headline=headline,
                status=status, reason=reason, method="host-timer" if status == "ok" else "",
                stop_reason="rel. noise <= 0.5%" if status == "ok" else "", samples_us=tuple(samples),
                dropped_us=(samples[0] * 1.5,) if samples else (), warm_us=tuple(s * 0.9 for s in samples[:4]),
                stats=stats, warm_median_us=median * 0.9 if median else None, bytes=nbytes, flops=flops,
                gbps=nbytes / (median * 1e3) if median else None,
                tflops=flops / (median * 1e6) if median else None,
                pct_roofline=100 * nbytes / (median * 1e3) / 4000.0 if median else None,
                bound="memory", ceiling_gbps=4000.0 if median else None, target=0.8,
                verdict="below-target" if median else "n/a", speedups={}, seed=1234)
    return CaseResult(**{**base, **extra})


def synthetic_results(plots: bool) -> Results:
    """SYNTHETIC: one kernel, an ok candidate with speedups, a baseline, a wrong peer, a skip, an error.

    ``plots=False`` leaves out samples and the roofline model, so rendering draws no picture (fast);
    ``plots=True`` draws the distribution plot and the roofline.
    """
    cand = [10.0 + 0.1 * i for i in range(12)] if plots else []
    base = [31.0 + 0.2 * i for i in range(12)] if plots else []
    cand_stats, base_stats = _stats(cand or [10.0, 10.5, 11.0]), _stats(base or [31.0, 32.0, 33.0])
    ratio = base_stats["median"] / cand_stats["median"]
    roof = {} if plots else {"tflops": None}
    cases = (
        _case("triton", "triton", "candidate", cand, stats=cand_stats,
              speedups={"reference": {"ratio": ratio, "lo": ratio * 0.99, "hi": ratio * 1.01},
                        "torch.compile": {"ratio": 1.5, "lo": None, "hi": None}}, **roof),
        _case("reference", "reference", "baseline", base, stats=base_stats, **roof),
        _case("liger", "peer", "peer", [], "wrong", "max abs err 0.31 > atol 0.01 at [5, 3]"),
        _case("torch.compile", "reference", "baseline", [], "skipped", "torch.compile is not available"),
        _case("triton", "triton", "candidate", [], "error", "RuntimeError: | out of shared memory", headline=False),
    )
    arch = (ArchRow("scale", "cpu", "triton", "ran", ""),
            ArchRow("scale", "sm_75", "reference", "fallback", "triton needs >=sm_80"))
    waivers = (Waiver("scale", "tolerance bf16 rtol=2e-2", "synthetic: fp32 accumulation"),)
    env = {"device": "synthetic-device (test fixture)", "arch": "cpu", "date": "2026-11-29T08:00:00+00:00",
           "flush": "none", "stopping_rule": "synthetic", "throttle": "synthetic",
           "clocks": {"sm_mhz": 1980, "list": [1, "two", None, True]}, "git_dirty": False}
    ceilings = {"copy_gbps": 4000.0,
                "bandwidth_gbps": {"fill": 3900.0, "copy": 4000.0, "add": 4100.0, "read": 4300.0},
                "matmul_tflops": {"bf16": 700.0, "fp32": 50.0},
                "datasheet": {"copy_gbps": 4800.0, "matmul_tflops": {"bf16": 989.0}}, "copy_bytes": 2 ** 30}
    return Results(SCHEMA_VERSION, env, ceilings, cases, arch, waivers, True)


BASES = {"lean": to_json(synthetic_results(plots=False)), "plots": to_json(synthetic_results(plots=True))}


@pytest.fixture(autouse=True, scope="module")
def _template_compiled_once():
    """render_report compiles its Jinja template on every call (0.3 s); 1,000 reports here need it once."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(render, "_environment", functools.cache(render._environment))
        yield


# ----------------------------------------------------------------------------- running report and export

WHOLE_FILE = ("not valid JSON", "cannot read")
HEADER_WHOLE_FILE = ("unreadable run header", "expected a JSON object")
# Reports are written with fsync (atomic_write_text); in memory that costs nothing, on a CI disk ~10 ms a file.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _run(argv: list[str]) -> tuple[int, str, str, list]:
    out, err = io.StringIO(), io.StringIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    return code, out.getvalue(), err.getvalue(), [str(w.message) for w in caught]


HEADER_KEYS = ("environment", "ceilings", "arch_matrix", "waivers")  # what run.json holds (cmd_bench writes it)


def _check_problems(code, out, err, path, header=None) -> None:
    """``header``: the run.json beside a cases.jsonl; its lines may name it, for its own keys only."""
    assert code in (0, 2), (code, out, err)
    assert "Traceback" not in out + err, err
    if code == 0:
        assert err == "", err
        return
    assert out == "", out
    assert err.endswith("\n") and err.strip(), err
    for line in err[:-1].split("\n"):
        assert not LINE_BREAKS.search(line), repr(line)
        named = header if header and line.startswith(f"{header}: ") else path
        assert line.startswith(f"{named}: "), line
        rest = line[len(named) + 2:]
        rest = re.sub(r"^line \d+: ", "", rest)  # cases.jsonl: the line, then the key
        if rest.startswith(WHOLE_FILE + HEADER_WHOLE_FILE):
            continue
        key, sep, message = rest.partition(": ")
        assert sep and key.strip() and message.strip(), f"no key in {line!r}"
        if named == header:
            assert key.startswith(HEADER_KEYS), f"{header} blamed for {line!r}"


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def report_and_export(data: bytes, name: str, header: bytes | None = None) -> int:
    """Run both commands on the file; check their output and what they left on disk. Returns report's code.

    ``header``: the bytes of a run.json written beside the file (an interrupted run's header).
    """
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        tmp = Path(tmp)
        path = tmp / name
        path.write_bytes(data)
        header_path = None
        if header is not None:
            header_path = str(tmp / "run.json")
            Path(header_path).write_bytes(header)
        out_dir, export = tmp / "report", tmp / "export" / "pb.json"

        code, out, err, caught = _run(["report", str(path), "--out", str(out_dir)])
        _check_problems(code, out, err, str(path), header_path)
        if code == 2:
            assert not out_dir.exists(), _files(out_dir)
        else:
            assert out == f"wrote {out_dir / 'report.md'}\n", out
            files = _files(out_dir)
            assert "report.md" in files and not [f for f in files if f.endswith(".tmp")], files
            assert all(f == "report.md" or re.fullmatch(r"(roofline|dist_.*)\.png", f) for f in files), files
        report_code = code

        code, out, err, caught_export = _run(["export", str(path), "--out", str(export)])
        _check_problems(code, out, err, str(path), header_path)
        assert code == report_code, (report_code, code, err)  # the same loader decides for both
        if code == 2:
            assert not export.parent.exists(), _files(export.parent)
        else:
            assert out == f"wrote {export}\n", out
            assert _files(export.parent) == ["pb.json"]
            json.loads(export.read_text(encoding="utf-8"), parse_constant=_no_constant)
        assert path.read_bytes() == data  # the input is never touched
        assert header is None or Path(header_path).read_bytes() == header
        if currently_in_test_context():
            event(f"exit {code}")
        for message in caught + caught_export:  # matplotlib may warn about a degenerate axis; nothing else
            assert "axis" in message or "limits" in message or "Data has no positive values" in message, message
        return report_code


def _no_constant(name):
    raise AssertionError(f"export wrote {name}: not standard JSON")


def test_base_documents_render_and_export():
    for name, doc in BASES.items():
        assert report_and_export(json.dumps(doc).encode(), "results.json") == 0, name
        assert report_and_export(_jsonl([{"schema_version": SCHEMA_VERSION, "case": c} for c in doc["cases"]]),
                                 "cases.jsonl") == 0, name


# ----------------------------------------------------------------------------- document surgery










NEAR_MISS = ["schema_version", "schema", "case", "cases", "kernel", "median", "median_us", "stats", "status", "n",
             "ratio", "mid", "copy_gbps", "datasheet", "matmul_tflops", "bf16", "reason", "", " ", "a.b", "a\nb",
             "a\rb", "a\u2028b", "\x00", "ключ", "\U0001f680", "__proto__", "null", "NaN", '"', "\\"]
KEYS = st.one_of(st.sampled_from(NEAR_MISS), st.text(max_size=12))
SCALARS = st.one_of(
    st.none(), st.booleans(), st.text(max_size=20),
    st.sampled_from(["", " ", "\n", "ok", "wrong", "error", "skipped", "candidate", "pass", "memory", "ran", "x" * 3000,
                     "a\u2028b", "\r", "\x00", "$x^$", "|", "<b>", "**", "`"]),
    st.integers(),
    st.sampled_from([0, 1, -1, 2**31, 2**53 + 1, 2**63, -2**63 - 1, 10**20, 10**308, 10**309, -10**400, 10**4000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 5e-324, 1e-300, 1e300, 1.7976931348623157e308,
                     -1.7976931348623157e308]),
)
VALUES = st.recursive(SCALARS, lambda s: st.one_of(st.lists(s, max_size=4), st.dictionaries(KEYS, s, max_size=3)),
                      max_leaves=8)


def deep(depth: int) -> str:
    """A placeholder for a value nested ``depth`` levels deep: too deep for json.dumps, so _dumps splices it."""
    return f"<deep {depth}>"


def _deep_text(depth: int) -> str:
    return '{"k": [' * (depth // 2) + "1" + "]}" * (depth // 2)


SPECIAL = st.one_of(st.sampled_from([50, 400, 600, 900, 2000]).map(deep), VALUES)


# Valid but extreme: what a broken producer could write that the schema still accepts.
EXTREME_NUMBERS = st.one_of(st.sampled_from([0, -0.0, -1, 5e-324, -5e-324, 1e-300, 1e300, -1e300, 2**63 - 1, -2**63,
                                             1.7976931348623157e308, -1.7976931348623157e308, 2**53 + 1]),
                            st.floats(allow_nan=False, allow_infinity=False), st.integers(-2**63, 2**63 - 1))
EXTREME_TEXT = st.one_of(st.sampled_from(["", " ", "\n", "a\u2028b", "\r\n", "$x^$", "$", "|", "<b>", "**bold**", "`",
                                          "\\", "{{ x }}", "{% raw %}", "ключ", "\U0001f680", "x" * 3000, "\x00",
                                          "../../etc", "/", "."]),
                         st.text(max_size=30))


def mutate(data, doc) -> None:
    op = data.draw(st.sampled_from(["delete", "add", "retype", "retype", "rename", "empty", "duplicate", "extreme",
                                    "extreme"]))
    if structural_mutation(data, doc, op, KEYS, SPECIAL):
        return
    if op == "duplicate":
        lists = [p for p, v in walk(doc) if isinstance(v, list) and v]
        if lists:
            items = get(doc, data.draw(st.sampled_from(lists)))
            items.append(copy.deepcopy(items[data.draw(st.integers(0, len(items) - 1))]))
    elif op == "extreme":  # a number or string leaf, or a sample list, given a valid but extreme value
        leaves = [p for p, v in walk(doc) if isinstance(v, (int, float, str)) and not isinstance(v, bool)
                  or p[-1] in ("samples_us", "dropped_us", "warm_us")]
        if leaves:
            path = data.draw(st.sampled_from(leaves))
            old = get(doc, path)
            new = (data.draw(EXTREME_TEXT) if isinstance(old, str) else
                   data.draw(st.lists(EXTREME_NUMBERS, max_size=5)) if isinstance(old, list) else
                   data.draw(EXTREME_NUMBERS))
            get(doc, path[:-1])[path[-1]] = new


def _dumps(doc) -> bytes:
    # Python's json writes NaN and Infinity as bare tokens, as a careless producer would
    text = json.dumps(doc, ensure_ascii=False)
    text = re.sub(r'"<deep (\d+)>"', lambda m: _deep_text(int(m.group(1))), text)
    return text.encode("utf-8", "surrogatepass")


@FUZZ
@given(data=st.data(), n=st.integers(1, 3))
def test_malformed_results_json(data, n):
    """Keys deleted, added, renamed; wrong types, NaN, Infinity, huge and deep values at random paths.

    The base draws no picture (matplotlib takes seconds a report here); a mutation that adds samples
    does, and test_base_documents_render_and_export renders the plots once.
    """
    doc = copy.deepcopy(BASES["lean"])
    for _ in range(n):
        mutate(data, doc)
    report_and_export(_dumps(doc), "results.json")


# ----------------------------------------------------------------------------- bytes

SNIPPETS = [b"{", b"}", b"[", b"]", b",", b":", b'"', b"\\", b"\n", b"\r", b"\xff", b"\xc3", b"\xe2\x80", b"\x00",
            b"\xef\xbb\xbf", b"NaN", b"Infinity", b"-Infinity", b"null", b"9" * 5000, b"1e999", b"-1e999",
            b"[" * 5000, b'{"a":' * 3000, b"\\ud800", b'"\\ud800"', b"true", b"01", b"1.", b".5", b"+1"]


@st.composite
def spliced(draw, text: bytes) -> bytes:
    return splice_bytes(draw, text, SNIPPETS, max_ops=3, max_insert=6, max_delete=30)


@FUZZ
@given(data=st.one_of(spliced(_dumps(BASES["lean"])), st.binary(max_size=200),
                      st.sampled_from([b"", b"null", b"[]", b"1", b'"results"', b"{}", b'{"schema_version": true}',
                                       VERSION + b'.0}', b'{"schema_version": 99}',
                                       b'{"schema_version": ' + b"9" * 5000 + b"}",
                                       _dumps(BASES["lean"]).replace(b"\n", b"\r\n") + b"\xff",
                                       json.dumps(BASES["lean"]).encode("utf-16"), b"[" * 100000])))
def test_corrupted_results_json(data):
    """JSON text cut and spliced, invalid UTF-8, huge integers, deep nesting, other top-level values."""
    report_and_export(data, "results.json")


# ----------------------------------------------------------------------------- cases.jsonl of an interrupted run

def _jsonl(records, tail: bytes = b"") -> bytes:
    return b"".join(_dumps(r) + b"\n" for r in records) + tail


@st.composite
def partial_files(draw) -> bytes:
    cases = copy.deepcopy(BASES["lean"]["cases"])
    lines = [_dumps({"schema_version": SCHEMA_VERSION, "case": c}) for c in cases]
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines)))
        op = draw(st.sampled_from(["torn", "garbage", "record", "version", "case", "non-dict", "blank", "drop",
                                   "crlf", "bytes"]))
        if op == "torn" and lines:  # a crash mid-write: in the middle of the file, or at its end
            j = min(i, len(lines) - 1)
            lines[j] = lines[j][:draw(st.integers(0, max(0, len(lines[j]) - 1)))]
        elif op == "garbage":
            lines.insert(i, draw(st.one_of(st.binary(max_size=40).filter(lambda b: b"\n" not in b),
                                           st.sampled_from([s for s in SNIPPETS if b"\n" not in s]))))
        elif op == "record":
            record = draw(st.one_of(SPECIAL, st.dictionaries(st.sampled_from(["schema_version", "case", "x"]),
                                                             SPECIAL, max_size=3)))
            lines.insert(i, _dumps(record))
        elif op == "version" and lines:
            j = min(i, len(lines) - 1)
            record = {"schema_version": draw(SCALARS), "case": cases[j % len(cases)]}
            lines[j] = _dumps(record)
        elif op == "case" and lines:  # a wrong value, missing or unknown key inside one record's case
            case = copy.deepcopy(cases[draw(st.integers(0, len(cases) - 1))])
            mutate(_Drawer(draw), case)
            lines.insert(i, _dumps({"schema_version": SCHEMA_VERSION, "case": case}))
        elif op == "non-dict":
            lines.insert(i, _dumps(draw(st.one_of(SCALARS, st.lists(SCALARS, max_size=3)))))
        elif op == "blank":
            lines.insert(i, draw(st.sampled_from([b"", b" ", b"\t", b"\r"])))
        elif op == "drop" and lines:
            lines.pop(min(i, len(lines) - 1))
        elif op == "crlf" and lines:
            j = min(i, len(lines) - 1)
            lines[j] += b"\r"
        elif op == "bytes" and lines:
            j = min(i, len(lines) - 1)
            k = draw(st.integers(0, len(lines[j])))
            lines[j] = lines[j][:k] + draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\xe2\x80\xa8"])) + lines[j][k:]
    torn_end = draw(st.booleans())
    return b"\n".join(lines) + (b"" if torn_end else b"\n"), draw(run_headers())


@st.composite
def run_headers(draw) -> bytes | None:
    """No run.json, a valid one, one with wrong values at random paths, or broken bytes."""
    kind = draw(st.sampled_from(["none", "none", "valid", "mutated", "mutated", "bytes"]))
    if kind == "none":
        return None
    header = {k: copy.deepcopy(BASES["lean"][k]) for k in HEADER_KEYS}
    if kind == "bytes":
        return draw(st.one_of(spliced(_dumps(header)), st.sampled_from([b"", b"[]", b"null", b"[" * 100000,
                                                                         b'{"environment": ' + b"9" * 5000 + b"}",
                                                                         b"\xff\xfe{}"])))
    for _ in range(draw(st.integers(0 if kind == "valid" else 1, 0 if kind == "valid" else 3))):
        mutate(_Drawer(draw), header)
    return _dumps(header)


class _Drawer:
    """Lets :func:`mutate` (written for st.data()) draw inside a composite strategy."""

    def __init__(self, draw):
        self.draw = draw


@FUZZ
@given(files=partial_files())
def test_malformed_cases_jsonl(files):
    """Torn lines, bad records in the middle, wrong schema_version, non-object lines, NaN, wrong types;
    beside it, sometimes, the run's header (run.json), valid or broken."""
    data, header = files
    report_and_export(data, "cases.jsonl", header)


def test_torn_last_line_is_skipped_and_torn_middle_line_is_an_error(tmp_path):
    records = [{"schema_version": SCHEMA_VERSION, "case": c} for c in BASES["lean"]["cases"]]
    whole = _jsonl(records)
    assert report_and_export(whole[:-40], "cases.jsonl") == 0  # the crash cut the last record: skipped
    lines = whole.split(b"\n")
    lines[1] = lines[1][:50]
    assert report_and_export(b"\n".join(lines), "cases.jsonl") == 2


# ----------------------------------------------------------------------------- what the properties found

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
