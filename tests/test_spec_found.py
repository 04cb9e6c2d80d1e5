"""What the spec properties (tests/test_fuzz_specs.py) found, each pinned as its own case: the input that once
gave a traceback, a hang, a wrong exit or a line without its key, and the line it gives now."""

from __future__ import annotations

import math

import pytest

from harness.spec.load import load
from tests.spec_docs import MOD, NAME, assert_one_line_problems, scale_doc, toml_dumps, validate


def _set(path, value):
    def apply(doc):
        node = doc
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = value
    return apply


def _param(name, entry):
    """Add a param, and call launchers that take it (scale's own signature has no params)."""
    def apply(doc):
        doc["params"][name] = entry
        doc["kernel"]["reference"] = f"{MOD}:scale_ref_any"
        doc["backends"]["triton"]["impl"] = f"{MOD}:scale_any"
    return apply


def _rename(table, old, new):
    def apply(doc):
        doc[table][new] = doc[table].pop(old)
    return apply


# (change to scale_doc, exit code, a fragment of an expected line or None)
REGRESSIONS = [
    (_set(("cases", "edge", "vary", "cols"), [1, 83, math.inf]), 2, "cases.edge (rows=5,cols=inf): w dimension"),
    (_set(("inputs", "w", "shape"), ["cols * 9 ** 9 ** 9"]), 2, "an integer larger than 2**4096"),  # hung
    (_set(("inputs", "w", "shape"), ["ceil(cols * 1e308 * 10)"]), 2, "ceil(): cannot convert float infinity"),
    (_set(("inputs", "w", "shape"), ["-" * 5000 + "cols"]), 2, "inputs.w.shape[0]: bad expression"),
    (_set(("inputs", "w", "shape"), ["cols\x00"]), 2, "inputs.w.shape[0]: bad expression: cannot parse"),
    (_set(("inputs", "w", "shape"), ["(-8) ** 0.5 + cols"]), 2, "the result is not a real number"),
    (_set(("tolerance", "bf16", "rtol"), 10**400), 2, "tolerance.bf16.rtol: expected a number, got 1000"),
    (_set(("tolerance", "bf16", "rtol"), math.nan), 2, "tolerance.bf16.rtol: must be a finite number >= 0, got nan"),
    (_set(("tolerance", "bf16", "atol"), math.inf), 2, "tolerance.bf16.atol: must be a finite number >= 0, got inf"),
    (_set(("kernel", "timeout"), -1), 2, "kernel.timeout: must be a positive number of seconds, got -1.0"),
    (_set(("kernel", "summary"), {"a\nb": 1}), 2, 'kernel.summary: expected a string, got a table'),
    (_set(("kernel", "a\u2028b"), 1), 2, 'kernel."a\\u2028b": unknown key'),
    (_set((" ",), 1), 2, '" ": unknown key'),
    (_set(("",), 1), 2, '"": unknown key'),
    (_set(("waive", "determinism"), "a\nb"), 0, None),
    (_param("mode", {"value": "fast"}), 0, None),  # a string param: used to fail once per case
    (_param("limit", {"value": math.inf}), 0, None),  # used to be "undefined symbol 'inf'"
    (_set(("params", "mode"), {"value": "fast"}), 2, 'has no keyword parameter "mode" (the spec\'s params.mode)'),
    (_set(("outputs", "out", "dtype"), "int64"), 0, None),  # used to ask for values, which outputs cannot take
    (_rename("inputs", "w", "w w"), 2, "inputs.w w: not a Python identifier"),
    (_rename("outputs", "out", "x"), 2, "outputs.x: inputs.x has the same name"),
    (_set(("params", "class"), {"value": 1}), 2, "params.class: not a Python identifier"),
]


@pytest.mark.parametrize("change, code, fragment", REGRESSIONS, ids=[f"r{i}" for i in range(len(REGRESSIONS))])
def test_found_by_the_properties(change, code, fragment):
    doc = scale_doc()
    doc["roofline"]["bytes"] = "bytes_x"  # renaming w or out must not break the roofline first
    change(doc)
    assert assert_one_line_problems(toml_dumps(doc).encode()) == code
    if fragment is not None:
        assert fragment in validate(toml_dumps(doc).encode())[2]


def test_huge_integer_literal_is_invalid_toml():
    text = toml_dumps(scale_doc()).replace("rows = 16", "rows = " + "9" * 5000)
    code, _, err, path, _ = validate(text.encode())
    assert code == 2 and err.startswith(f"{path}: invalid TOML: Exceeds the limit") and err.count("\n") == 1


def test_param_values_evaluate_to_themselves(tmp_path):
    doc = scale_doc()
    for name, value in (("mode", "fast"), ("limit", math.inf), ("eps", 1e-6)):
        _param(name, {"value": value})(doc)
    path = tmp_path / f"{NAME}.toml"
    path.write_text(toml_dumps(doc))
    spec = load(path)
    assert {n: p({}) for n, p in spec.params.items()} == {"mode": "fast", "limit": math.inf, "eps": 1e-6}
