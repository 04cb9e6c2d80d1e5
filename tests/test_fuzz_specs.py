"""Property-based tests: a malformed spec gives one line per problem, naming the file and the key, exit 2.

hypothesis starts from two valid spec documents (tests/spec_docs.py, shaped like specs/*.toml and
tests/test_spec_errors.py's VALID) and breaks them: keys deleted, added, renamed; values swapped for
values of other types; expressions, layouts, dtypes, arch rules and import paths replaced by broken
ones; the file's bytes corrupted. Whatever comes out must pass ``assert_one_line_problems`` (exit 0 or 2,
one ``"<file>: <key>: <message>"`` line per problem, never a traceback or a warning). Every property runs
500 derandomized examples, so CI sees the same inputs on every run. What they found is pinned in
tests/test_spec_found.py.
"""

from __future__ import annotations

import math
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli.main import main
from tests.e2e import FUZZ_EXAMPLES
from tests.fuzz_docs import parent, splice_bytes, structural_mutation, walk
from tests.spec_docs import BASES, MOD, assert_one_line_problems, scale_doc, toml_dumps

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FUZZ = settings(max_examples=FUZZ_EXAMPLES, deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much, HealthCheck.large_base_example])



def test_base_documents_are_valid_and_round_trip():
    for make in BASES.values():
        doc = make()
        text = toml_dumps(doc)
        assert tomllib.loads(text) == doc
        assert assert_one_line_problems(text.encode()) == 0


# ----------------------------------------------------------------------------- document surgery













NEAR_MISS = ["sumary", "shapes", "Name", "impl_", "layout", "value", "exprs", "reasons", "bases", "varies",
             "extras", "headlines", "symbol", "constraint", "bench2", "flop", "targets", "timeout", "dtype",
             "values", "inplace", "contiguous", "source", "build", "tools", "x", "w", "out", "eps", "rows",
             "cols", "reference", "class", "lambda", "1x", "a-b", "a b", "a.b", "", " ", "a\nb", "a\rb",
             "a\u2028b", "ключ", "\U0001f680", "__proto__", "true", "-", '"', "\\", "\t", "x\x00"]
KEYS = st.one_of(st.sampled_from(NEAR_MISS), st.text(max_size=12),
                 st.from_regex(r"[a-z_][a-z0-9_]{0,9}", fullmatch=True))
SCALARS = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", " ", "\n", "\r\n", "é", "\U0001f680", "a\u2028b", "x\ry", "\t", "\x00", "\x7f", "\x85",
                     "normal", "case", "fp32", "padded", "cpu", "contiguous", "true", "1e-2x", "x" * 5000]),
    st.integers(),
    st.integers(min_value=-2**63, max_value=2**63 - 1),
    st.sampled_from([0, 1, -1, 2, 83, 2**31, 2**63 - 1, -2**63, 2**64, 10**100, -10**100, 10**4000]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.5, 1e-300, 1e308, 5e-324]),
    st.booleans(),
)
VALUES = st.recursive(SCALARS, lambda s: st.one_of(st.lists(s, max_size=4), st.dictionaries(KEYS, s, max_size=3)),
                      max_leaves=8)


def mutate(data, doc: dict) -> None:
    op = data.draw(st.sampled_from(["delete", "add", "retype", "rename", "empty"]))
    structural_mutation(data, doc, op, KEYS, VALUES)


@FUZZ
@given(data=st.data(), base=st.sampled_from(sorted(BASES)), n=st.integers(1, 3))
def test_structural_mutations(data, base, n):
    """Keys deleted, added (random names), renamed; values of other types; tables and lists emptied."""
    doc = BASES[base]()
    for _ in range(n):
        mutate(data, doc)
    assert_one_line_problems(toml_dumps(doc).encode())


# ----------------------------------------------------------------------------- broken expressions

NASTY_EXPRESSIONS = [
    "__import__('os')", "__import__('os').system('true')", "rows.__class__", "rows.real", "(lambda: 1)()",
    "lambda x: x", "[1, 2]", "{}", "rows[0]", "'abc'", "b'x'", "f'{rows}'", "rows if cols else", "(rows", "rows)",
    "((((rows)))", "1 +", "* 2", "", " ", "\n", "rows\n+ cols", "1 / 0", "rows // 0", "cols % 0", "0 ** -1", "-rows",
    "-1", "rows - 1000", "-2**40", "2 ** 64", "9 ** 9 ** 9", "10 ** 10 ** 10", "2 ** 10 ** 9 > 1", "2.0 ** 10000",
    "1e308 * 10", "ceil(1e308 * 10)", "ceil(1e308 * 10) > 0", "floor(-1e308 * 10)", "ceil(nan)", "log2(0)",
    "log2(-1)", "sqrt(-1)", "sqrt(10 ** 400)", "(-8) ** 0.5", "(-1) ** 0.5 < 1", "(-8) ** 0.5 // 1",
    "10 ** 400 / 3", "10 ** 400 * 1.5", "10 ** 400 // 1.5", "min()", "max(rows)", "min(rows, cols, key=abs)",
    "open('x')", "exec('1')", "eval('1')", "globals()", "rows.__dict__", "().__class__.__bases__[0].__subclasses__()",
    "[x for x in ()]", "{x: 1 for x in ()}", "(x := 1)", "rows @ cols", "rows << 2", "~rows", "rows is cols",
    "rows in cols", "*rows", "yield 1", "await rows", "1 if rows else 'x'", "'a' * 10", "rows.bit_length()",
    "\x00", "rows\x00", "\\", "'\\d'", "1 is 1", "rows\u2028+ 1", "rows\r+1", "nan", "inf", "-inf", "None", "...",
    "True", "true", "normal(", "normal(0)", "normal(0, 1, 2)", "uniform(1)", "randint(0, rows)", "normal(rows=1)",
    "gaussian(0, 1)", "normal(*rows)", "normal(0, 1)(2)", "normal(0, 'a')", "uniform(0, 1 / 0)", "normal.x",
    "undefined_symbol", "rows +" * 3000 + " 1", "+".join(["rows"] * 5000), "(" * 300 + "rows" + ")" * 300,
    "-" * 5000 + "1", "not " * 2000 + "rows", "1 + " * 900 + "1", "(" * 150 + "1" + ")" * 150,
    "-(" * 90 + "1" + ")" * 90, "rows " * 100, "min(" * 60 + "1" + ")" * 60, "1 < " * 5000 + "2",
    "rows * " * 200 + "10 ** 300", "(10 ** 300) * (10 ** 300) * (10 ** 300) * (10 ** 300) * (10 ** 300)",
    "-(10 ** 300) * (10 ** 300) * (10 ** 300) * (10 ** 300) * (10 ** 300)",
]
_ATOMS = st.one_of(
    st.sampled_from(["rows", "cols", "block", "max_pos", "neox", "zz", "nan", "inf", "True", "None", "x", "numel_x"]),
    st.integers(-10**30, 10**30).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["0", "1", "-1", "0.5", "1e308", "2**64", "'s'"]),
)
_BINOPS = ["+", "-", "*", "/", "//", "%", "**", "<", "<=", ">", ">=", "==", "!=", "and", "or", "&", "|", "^",
           "<<", "@", "is", "in"]
_FUNCS = ["min", "max", "ceil", "floor", "log2", "abs", "sqrt", "normal", "uniform", "randint", "open", "int"]
GRAMMAR = st.recursive(_ATOMS, lambda s: st.one_of(
    st.tuples(s, st.sampled_from(_BINOPS), s).map(" ".join),
    st.tuples(st.sampled_from(["-", "+", "not ", "~"]), s).map("".join),
    s.map(lambda e: f"({e})"),
    st.tuples(st.sampled_from(_FUNCS), st.lists(s, max_size=3)).map(lambda t: f"{t[0]}({', '.join(t[1])})"),
    st.tuples(s, s, s).map(lambda t: f"{t[0]} if {t[1]} else {t[2]}"),
    st.tuples(s, st.sampled_from([".real", ".__class__", "[0]", "(1)", "()"])).map("".join),
), max_leaves=12)


@st.composite
def unbalanced(draw):
    text = draw(GRAMMAR)
    i = draw(st.integers(0, len(text)))
    return text[:i] + draw(st.sampled_from(["(", ")", "[", "'", ",", " ** ", "lambda: "])) + text[i:]


EXPRESSIONS = st.one_of(st.sampled_from(NASTY_EXPRESSIONS), GRAMMAR, unbalanced(), st.text(max_size=30))


def _expression_slots(doc) -> list[tuple]:
    """Where a spec holds an expression: shapes, values, params.*.expr, symbols, constraints, roofline."""
    slots = []
    for p, v in walk(doc):
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            continue
        head = p[:1]
        if (head in (("inputs",), ("outputs",)) and "shape" in p or p[-1] == "values"
                or head == ("params",) and p[-1] in ("expr", "value") or p[:2] == ("cases", "symbols")
                or p[:2] == ("cases", "constraints") or head == ("roofline",)):
            slots.append(p)
    return slots


@FUZZ
@given(data=st.data(), base=st.sampled_from(sorted(BASES)), n=st.integers(1, 2))
def test_broken_expressions(data, base, n):
    """Random text, operators, unbalanced parentheses, imports, attributes, lambdas, huge/deep/zero-division."""
    doc = BASES[base]()
    for _ in range(n):
        path = data.draw(st.sampled_from(_expression_slots(doc)))
        parent(doc, path)[path[-1]] = data.draw(EXPRESSIONS)
    assert_one_line_problems(toml_dumps(doc).encode())


# ----------------------------------------------------------------------------- vocabulary: names from a closed set

VOCABULARY = {
    "dtype": ["fp32", "fp16", "bf16", "fp64", "int64", "int8", "uint8", "bool", "case", "fp61", "FP32", "float32",
              "bfloat16", " fp32", "fp32 ", "", "Case", "int", "complex64"],
    "layout": ["padded", "strided", "transposed", "contiguous", "paded", "Padded", "", "diagonal", " padded"],
    "arch": ["cpu", "sm_80", ">=sm_80", "<sm_100", "sm_80..sm_90", ">= sm_90", ">=sm80", "sm_", "sm_x", "gpu",
             "sm_90..cpu", "cpu..sm_90", "==sm_90", "!sm_90", ">=cpu", "sm_\u0669\u0660", "", " ", "sm_" + "9" * 500,
             ">>sm_80", "sm_80..", "..sm_90"],
    "import": [f"{MOD}:scale", f"{MOD}:scale_ref", f"{MOD}:nope", f"{MOD}:", f":{MOD}", f"{MOD}:scale:x",
               f"{MOD}:scale.__call__", f"{MOD}:scale..x", f"{MOD}:torch", f"{MOD}:_launch", f"{MOD}:__doc__",
               f"{MOD}.zz_missing:scale", "zz_fuzz_missing:scale", "tests.planted:broken_kernels", "math:pi",
               "os:sep", "os.path:join", ".relative:scale", "..up:scale", "tests..planted:scale", "zz\x00:scale",
               "zz fuzz:scale", "zz/fuzz:scale", "zz-fuzz:scale", "\u00e9t\u00e9:scale", "scale", "", ":", "::",
               " : ", f" {MOD}:scale", f"{MOD}:scale ", "1zz:scale", "zz\n:scale"],
    "requires": ["triton", "torch", "zz_fuzz_missing", "", ".", "..", ".zz", "zz.", "zz..zz", "\x00", "a\x00b",
                 "os.path.zz_missing", f"{MOD}.zz", "tests.planted.zz", " ", "zz fuzz", "\u00e9t\u00e9"],
    "values": ["normal", "normal(0, 1)", "uniform(-1, 1)", "randint(0, 100)", "randint(0, max_pos)",
               "uniform(1)", "gaussian", "normal()", "randint(0)", "normal(0, 1, 2)", "Normal"],
    "backend": ["triton", "cuda", "reference", "triton ", "Triton", "", "zz"],
    "check": ["determinism", "layout", "inputs", "nan_inf", "speed", "poison", "", "Determinism"],
}


def _vocab_slots(doc) -> list[tuple[tuple, str]]:
    slots = []
    for p, v in walk(doc):
        last = p[-1]
        container = p[-2] if len(p) > 1 else None
        if last == "dtype" or container == "dtypes":
            slots.append((p, "dtype"))
        elif last == "layout" or container == "layouts":
            slots.append((p, "layout"))
        elif container == "arch":
            slots.append((p, "arch"))
        elif last in ("impl", "reference", "source", "build"):
            slots.append((p, "import"))
        elif container in ("requires", "tools"):
            slots.append((p, "requires"))
        elif last == "values" and isinstance(v, str):
            slots.append((p, "values"))
        elif container == "fallback":
            slots.append((p, "backend"))
        elif p[:1] == ("waive",) and len(p) == 2:
            slots.append((p, "check"))
    return slots


@FUZZ
@given(data=st.data(), base=st.sampled_from(sorted(BASES)), n=st.integers(1, 3))
def test_random_vocabulary(data, base, n):
    """Layouts, dtypes, arch rules, import paths, required modules, distributions, backend and check names."""
    doc = BASES[base]()
    for _ in range(n):
        path, kind = data.draw(st.sampled_from(_vocab_slots(doc)))
        word = data.draw(st.one_of(st.sampled_from(VOCABULARY[kind]), st.text(max_size=12)))
        if kind == "check":  # a waiver's name is its key
            table = parent(doc, path)
            table[word] = table.pop(path[-1])
        else:
            parent(doc, path)[path[-1]] = word
    assert_one_line_problems(toml_dumps(doc).encode())


# ----------------------------------------------------------------------------- bytes: invalid TOML, invalid UTF-8

BYTE_SNIPPETS = [b"[", b"]", b"[[", b"]]", b"=", b'"', b"'''", b"\n", b"\r", b"\r\n", b"\xff", b"\xc3", b"\xe2\x80",
                 b"\x00", b"\xef\xbb\xbf", b"nan", b"inf", b"{", b"}", b",", b"#", b"\\", b"x = 1\n", b"[kernel]\n",
                 b"rows = " + b"9" * 5000 + b"\n", b"a = " + b"[" * 5000 + b"\n", b"a = " + b"{b=" * 3000 + b"\n",
                 b"\n[[cases.ci]]\nrows = 1\ncols = 2\n", b"\n[cases]\n", b"\ncols = 99999999999999999999999\n"]


@st.composite
def corrupted(draw) -> bytes:
    text = toml_dumps(BASES[draw(st.sampled_from(sorted(BASES)))]()).encode()
    return splice_bytes(draw, text, BYTE_SNIPPETS, max_ops=4, max_insert=8, max_delete=40, duplicate_lines=True)


WHOLE_FILES = st.one_of(
    st.binary(max_size=300),
    corrupted(),
    st.sampled_from([b"", b"\n", b"# only a comment\n", b"\xef\xbb\xbf" + toml_dumps(scale_doc()).encode(),
                     toml_dumps(scale_doc()).encode("utf-16"), toml_dumps(scale_doc()).replace("\n", "\r\n").encode(),
                     toml_dumps(scale_doc()).encode() + b"\xff\xfe", b"\x00" * 64, b"kernel = 1\n", b"[kernel]\n",
                     b"[kernel]\nname = \"scale\"\n[inputs]\n[cases]\n"]),
    st.text(max_size=200).map(lambda s: s.encode("utf-8", "surrogatepass")),
)


@FUZZ
@given(data=WHOLE_FILES)
def test_corrupted_files(data):
    """Random bytes, valid TOML cut and spliced, invalid UTF-8, huge integers, deep nesting."""
    assert_one_line_problems(data)


def test_directory_and_missing_file(capsys, tmp_path):
    code = main(["validate", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"{tmp_path}: ") and err.count("\n") == 1 and "Traceback" not in err
    code = main(["validate", str(tmp_path / "nope.toml")])
    assert code == 2 and capsys.readouterr().err == f"{tmp_path / 'nope.toml'}: file not found\n"


@pytest.mark.parametrize("expression", NASTY_EXPRESSIONS, ids=[f"e{i}" for i in range(len(NASTY_EXPRESSIONS))])
def test_nasty_expression_in_a_shape_gives_one_line_per_problem(expression):
    """Each listed expression on its own, so a failure here names the input directly. Some are valid
    (``2 ** 64``, deep parentheses); the others give one line per case they break, never a traceback."""
    doc = scale_doc()
    doc["inputs"]["w"]["shape"] = [expression]
    assert_one_line_problems(toml_dumps(doc).encode())
