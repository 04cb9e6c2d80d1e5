"""`pytest --benchmark-only` turns bench cases into items timed by the engine, and pytest-benchmark's JSON
holds the engine's samples (its compare machinery on an export is tested in test_report.py)."""

from __future__ import annotations

import json

from tests.e2e import REPO, write_spec
from tests.test_bench_workflow import FAKE_CEILINGS

BENCH = """
[[cases.bench]]
rows = 64
cols = 256
headline = true
"""


def test_benchmark_only_runs_bench_cases_through_the_engine(pytester, monkeypatch):
    from harness.timing import ceilings

    monkeypatch.syspath_prepend(str(REPO))
    # pytester's HOME is a fresh folder, so the cached ceilings are never found: measuring them took 27 of this
    # test's 33 s on the 2-core CI machine, and they are not what it tests
    monkeypatch.setattr(ceilings, "measure_ceilings", lambda *a, **k: FAKE_CEILINGS)
    # under pytest-xdist the inner run would read the outer worker's variable and turn benchmarks off
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    (pytester.path / "specs").mkdir()
    write_spec(pytester.path / "specs", "scale", "tests.planted.broken_kernels:scale", extra=BENCH)
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
