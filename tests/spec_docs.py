"""The spec documents the property tests start from, a small TOML writer for them, and the check every
generated document must pass: ``python -m harness validate FILE`` exits 0 (the document happened to be valid) or 2
with every stderr line ``"<file>: <key>: <message>"``, and never a traceback, a warning or anything else on
stdout/stderr. Used by tests/test_fuzz_specs.py (the properties) and tests/test_spec_found.py (what they found).
"""

from __future__ import annotations

import contextlib
import io
import keyword
import math
import re
import tempfile
import warnings
from pathlib import Path

from hypothesis import currently_in_test_context, event

from harness.cli.main import main
from harness.spec.imports import use_interpreter_if_no_gpu
from harness.spec.load import load

use_interpreter_if_no_gpu()
import tests.planted.broken_kernels  # noqa: E402,F401  imported once: an example only reads its spec

MOD = "tests.planted.broken_kernels"
NAME = "scale"  # the file is always scale.toml, so kernel.name matches unless a mutation changes it


def scale_doc() -> dict:
    """tests/test_spec_errors.py's VALID."""
    return {
        "kernel": {"name": NAME, "summary": "out = x * w * 2", "reference": f"{MOD}:scale_ref",
                   "dtypes": ["fp32", "fp16", "bf16"], "layouts": ["padded", "strided", "transposed"],
                   "fallback": ["triton", "reference"]},
        "backends": {"triton": {"impl": f"{MOD}:scale", "arch": ["cpu", ">=sm_80"], "requires": ["triton"]}},
        "params": {},
        "inputs": {"x": {"shape": ["rows", "cols"], "values": "normal"}, "w": {"shape": ["cols"]}},
        "outputs": {"out": {"shape": ["rows", "cols"]}},
        "tolerance": {"bf16": {"rtol": 1.6e-2}},
        "cases": {"constraints": ["cols >= 0"],
                  "edge": {"base": {"rows": 5, "cols": 33}, "vary": {"rows": [0, 1], "cols": [1, 83]}},
                  "ci": [{"rows": 16, "cols": 128}]},
        "roofline": {"bytes": "bytes_x + bytes_w + bytes_out", "flops": "2 * numel_x", "target": 0.5},
    }


def rich_doc() -> dict:
    """Every section of the spec reference (docs/spec.md), as rmsnorm.toml and rope.toml use them; its launchers
    take any keyword, as the tensors and params here are not the planted scale kernel's."""
    return {
        "kernel": {"name": NAME, "summary": "every feature", "reference": f"{MOD}:scale_ref_any",
                   "dtypes": ["fp32", "bf16"], "layouts": ["padded", "strided", "transposed"],
                   "fallback": ["cuda", "triton", "reference"], "timeout": 60},
        "backends": {
            "triton": {"impl": f"{MOD}:scale_any", "arch": ["cpu", "sm_80..sm_90", "<sm_100"],
                       "requires": ["triton"], "layouts": ["padded"]},
            "cuda": {"impl": f"{MOD}:scale_any", "arch": [">=sm_80"], "requires": ["zz_fuzz_missing_ext"],
                     "tools": ["nvcc"], "source": f"{MOD}:scale", "build": f"{MOD}:scale"},
        },
        "peers": {"liger": {"impl": "zz_fuzz_missing_peer:scale", "requires": ["zz_fuzz_missing_peer"]}},
        "params": {"eps": {"value": 1e-6}, "half": {"expr": "cols // 2"}, "flag": {"value": True},
                   "mode": {"value": "fast"}},
        "inputs": {
            "x": {"shape": ["rows", "cols"], "dtype": "case", "values": "uniform(-1, 1)", "inplace": False,
                  "contiguous": False},
            "idx": {"shape": ["rows"], "dtype": "int64", "values": "randint(0, max_pos)", "contiguous": True},
            "w": {"shape": [1, "cols"], "values": "normal(0, 2)"},
            "acc": {"shape": ["rows", "block"], "dtype": "fp32", "inplace": True},
        },
        "outputs": {"out": {"shape": ["rows", "cols"], "dtype": "case"}},
        "tolerance": {"bf16": {"rtol": 2e-2, "atol": 1e-2, "reason": "fp32 accumulation, one rounding"},
                      "fp32": {"rtol": 1e-6}},
        "waive": {"determinism": "split-K reduction with atomics"},
        "cases": {
            "symbols": {"max_pos": 4096, "block": "min(cols, 64)", "neox": True},
            "constraints": ["cols >= 0", "block <= max(cols, 1)", "not (rows < 0)"],
            "edge": {"base": {"rows": 5, "cols": 33}, "vary": {"rows": [0, 1, 83], "cols": [1, 7, 769]},
                     "extra": [{"rows": 3, "cols": 4097}, {"rows": 2, "cols": 7, "layout": "transposed"}]},
            "ci": [{"rows": 16, "cols": 128}, {"rows": 3, "cols": 130, "layout": "padded"}],
            "full": [{"rows": 8192, "cols": 4096}],
            "huge": [{"rows": 524417, "cols": 4096}],
            "bench": [{"rows": 16384, "cols": 4096, "headline": True}, {"rows": 64, "cols": 4096}],
        },
        "roofline": {"bytes": "2 * bytes_x + bytes_w", "flops": "4 * numel_x", "target": 0.8},
        "targets": [{"against": "liger", "speedup": 1.5, "where": {"rows": 64, "cols": 4096}, "reason": "a promise"},
                    {"provider": "cuda", "against": "reference", "speedup": 0.8, "metric": "host", "dtype": "bf16",
                     "where": [{"rows": 16384}], "reason": "host time", "gap": "measured"}],
    }


BASES = {"scale": scale_doc, "rich": rich_doc}

# ----------------------------------------------------------------------------- a tiny TOML writer

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_str(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def toml_key(k: str) -> str:
    return k if _BARE_KEY.fullmatch(k) else toml_str(k)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items()) + " }" if v else "{}"
    raise TypeError(type(v))


def toml_dumps(doc: dict) -> str:
    """Top-level tables as [headers], everything below them inline (TOML 1.0, what tomllib reads)."""
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for k, v in doc.items():
        if isinstance(v, dict):
            lines.append(f"\n[{toml_key(k)}]")
            lines += [f"{toml_key(k2)} = {toml_value(v2)}" for k2, v2 in v.items()]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- running validate

WHOLE_FILE = ("invalid TOML: ", "file not found", "cannot read")
# Everything str.splitlines() splits on: a problem must not contain any of them.
LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def validate(data: bytes) -> tuple[int, str, str, str, list]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{NAME}.toml"
        path.write_bytes(data)
        out, err = io.StringIO(), io.StringIO()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(["validate", str(path)])
            usable = _usable(path) if code == 0 else None
        assert usable is None, usable
        return code, out.getvalue(), err.getvalue(), str(path), [str(w.message) for w in caught]


def _usable(path: Path) -> str | None:
    """An accepted spec can be called as the calling convention (docs/spec.md) says: keyword arguments."""
    spec = load(path)
    names = [t.name for t in spec.tensors] + list(spec.params)
    bad = [n for n in names if not n.isidentifier() or keyword.iskeyword(n)]
    if bad:
        return f"accepted argument names that are not Python identifiers: {bad}"
    if len(set(names)) != len(names):
        return f"accepted duplicate argument names: {names}"
    return None


def assert_one_line_problems(data: bytes) -> int:
    code, out, err, path, caught = validate(data)
    if currently_in_test_context():
        event(f"exit {code}")
    assert code in (0, 2), (code, out, err)
    assert "Traceback" not in out + err, err
    assert caught == [], caught
    if code == 0:
        assert err == "", err
        assert out.startswith(f"{path}: ok (") and out.count("\n") == 1, out
        return code
    assert out == "", out
    assert err.endswith("\n") and err.strip(), err
    for line in err[:-1].split("\n"):
        assert not LINE_BREAKS.search(line), repr(line)
        assert line.startswith(f"{path}: "), line
        rest = line[len(path) + 2:]
        if rest.startswith(WHOLE_FILE):
            continue
        key, sep, message = rest.partition(": ")
        assert sep and key.strip() and message.strip(), f"no key in {line!r}"
    return code
