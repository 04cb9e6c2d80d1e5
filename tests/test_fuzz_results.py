"""Property-based tests: a malformed results.json or cases.jsonl gives one line naming the file, exit 2.

hypothesis starts from small valid documents (tests/results_docs.py) and breaks them: keys deleted, added,
renamed; values swapped for values of other types, NaN, Infinity, huge numbers; the JSON text cut,
spliced, made invalid UTF-8; cases.jsonl lines torn, replaced by other records or garbage, given a
wrong schema_version. Each must pass ``report_and_export`` (exit 0, or exit 2 with one line per problem
naming the file and the key, never a traceback, and on exit 2 nothing written: no report.md, no partial
or temporary file, not even the output folder). Every property runs 500 derandomized examples. What they
found is pinned in tests/test_results_found.py.
"""

from __future__ import annotations

import copy
import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.results.model import SCHEMA_VERSION
from tests.e2e import FUZZ_EXAMPLES
from tests.fuzz_docs import get, splice_bytes, structural_mutation, walk
from tests.results_docs import (
    BASES,
    HEADER_KEYS,
    VERSION,
    _dumps,
    _jsonl,
    deep,
    report_and_export,
    template_compiled_once,  # noqa: F401  an autouse fixture: Jinja compiled once
)

FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much, HealthCheck.large_base_example])


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
