"""The results documents the property tests start from (SYNTHETIC: built here from harness.results' dataclasses,
device "synthetic-device", no number measured anywhere), how a document is written out (bare NaN and Infinity,
nesting deeper than json.dumps goes), and the check every one must pass: ``python -m harness report FILE --out
DIR`` and ``python -m harness export FILE --out FILE`` exit 0, or exit 2 with one line per problem that starts with
the file (and names the key where there is one), never a traceback, and on exit 2 nothing written. Used by
tests/test_fuzz_results.py (the properties) and tests/test_results_found.py (what they found).
"""

from __future__ import annotations

import contextlib
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
from hypothesis import currently_in_test_context, event

from harness.cli.main import main
from harness.report import render
from harness.results.model import SCHEMA_VERSION, STATS_KEYS, ArchRow, CaseResult, Results, Waiver, to_json

VERSION = b'{"schema_version": ' + str(SCHEMA_VERSION).encode()  # the start of a record of this schema


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
def template_compiled_once():
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


def deep(depth: int) -> str:
    """A placeholder for a value nested ``depth`` levels deep: too deep for json.dumps, so _dumps splices it."""
    return f"<deep {depth}>"


def _deep_text(depth: int) -> str:
    return '{"k": [' * (depth // 2) + "1" + "]}" * (depth // 2)



def _dumps(doc) -> bytes:
    # Python's json writes NaN and Infinity as bare tokens, as a careless producer would
    text = json.dumps(doc, ensure_ascii=False)
    text = re.sub(r'"<deep (\d+)>"', lambda m: _deep_text(int(m.group(1))), text)
    return text.encode("utf-8", "surrogatepass")


def _jsonl(records, tail: bytes = b"") -> bytes:
    return b"".join(_dumps(r) + b"\n" for r in records) + tail
