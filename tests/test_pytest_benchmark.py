"""`pytest --benchmark-only` turns bench cases into items timed by the engine; pytest-benchmark's JSON
and compare machinery then work on those samples."""

from __future__ import annotations

import json
from pathlib import Path

TEMPLATE = (Path(__file__).parent / "specs" / "scale.toml").read_text()
BENCH = """
[[cases.bench]]
rows = 64
cols = 256
headline = true
"""


def test_benchmark_only_runs_bench_cases_through_the_engine(pytester, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))
    spec = TEMPLATE.replace("{impl}", "tests.planted.broken_kernels:scale").replace(
        "{layouts}", '["padded", "strided", "transposed"]') + BENCH
    pytester.makefile(".toml", **{"specs/scale": spec})
    out = pytester.path / "bench.json"
    result = pytester.runpytest_inprocess("--specs", "specs", "--benchmark-only", "--dtype", "fp32",
                                          "-k", "reference", f"--benchmark-json={out}", "-q")
    result.assert_outcomes(passed=1)
    doc = json.loads(out.read_text())
    (bench,) = doc["benchmarks"]
    assert bench["name"] == "scale[bench-reference-fp32-rows=64,cols=256]"
    assert bench["extra_info"]["timing_method"] == "host-perf-counter"
    assert bench["stats"]["rounds"] == len(bench["stats"]["data"]) >= 10
    assert 0 < bench["stats"]["min"] <= bench["stats"]["median"] <= bench["stats"]["max"] < 1.0
