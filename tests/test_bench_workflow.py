"""``bench`` is a chain of small typed steps (harness.bench.workflow.STEPS); each is tested on its own here, on
the CPU with the planted scale kernel (its Triton backend runs only under the interpreter, so the eager
reference is what gets timed). The machine's ceilings are a synthetic record: nothing here is a measurement."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness.bench import workflow as wf
from harness.steps import BadInput
from harness.timing.ceilings import Ceilings
from tests.e2e import write_spec

FAKE_CEILINGS = Ceilings("synthetic", "n/a", 40.0, {"copy": 40.0, "read": 80.0, "write": 40.0}, {"fp32": 0.2},
                         {}, "synthetic", "2026-12-01T00:00:00+00:00", True)


@pytest.fixture
def specs(tmp_path):
    d = tmp_path / "specs"
    d.mkdir()
    write_spec(d, "scale", "tests.planted.broken_kernels:scale", extra="\n[[cases.bench]]\nrows = 64\ncols = 256\n")
    return d


@pytest.fixture
def loaded(specs, tmp_path):
    return wf.load(wf.BenchRun(wf.BenchOptions(specs_dir=str(specs), out=str(tmp_path / "out"), dtypes=("fp32",),
                                               timeout=0.5, min_time=0.01)))


@pytest.fixture(autouse=True)
def synthetic_ceilings(monkeypatch):
    import harness.timing.ceilings as ceilings

    monkeypatch.setattr(ceilings, "measure_ceilings", lambda *a, **k: FAKE_CEILINGS)


def test_the_steps_are_the_command(specs, tmp_path):
    assert [s.__name__ for s in wf.STEPS] == ["load", "plan", "open_journal", "measure_machine", "run_jobs",
                                              "finish", "write"]
    run = wf.bench(wf.BenchOptions(specs_dir=str(specs), out=str(tmp_path / "o"), dtypes=("fp32",), timeout=0.5,
                                   min_time=0.01))
    assert [p.name for p in run.written] == ["results.json", "results.csv", "report.md"]


def test_load_binds_the_specs_and_finds_the_device(loaded, specs):
    assert [s.name for s in loaded.specs] == ["scale"] and loaded.device.arch == "cpu"
    with pytest.raises(BadInput, match="no spec for kernel"):
        wf.load(wf.BenchRun(wf.BenchOptions(specs_dir=str(specs), kernels=("nope",))))
    broken = specs / "scale.toml"
    broken.write_text(broken.read_text().replace("broken_kernels:scale\"", "broken_kernels:missing\""))
    with pytest.raises(BadInput, match="has no attribute 'missing'"):
        wf.load(wf.BenchRun(wf.BenchOptions(specs_dir=str(specs))))


def test_plan_takes_the_cpu_tier_on_a_cpu_and_leaves_torch_compile_out_with_the_reason(loaded):
    run = wf.plan(loaded)
    spec = run.specs[0]
    assert run.tier == "cpu" and {j.case.id for j in run.jobs} == {c.id for c in spec.cases["ci"]}
    assert "torch.compile" not in {j.provider.name for j in run.jobs}
    assert any(w.what == "provider torch.compile not benchmarked" and "cpu tier" in w.reason for w in run.waivers)
    full = wf.plan(replace(loaded, options=replace(loaded.options, tier="bench")))
    assert full.tier == "bench" and "torch.compile" in {j.provider.name for j in full.jobs}
    asked = wf.plan(replace(loaded, options=replace(loaded.options, providers=("torch.compile",))))
    assert {j.provider.name for j in asked.jobs} == {"torch.compile"}  # asked for by name: timed
    with pytest.raises(BadInput, match="nothing to measure"):
        wf.plan(replace(loaded, options=replace(loaded.options, dtypes=("int8",))))


def test_open_journal_resumes_only_when_asked(loaded):
    run = wf.open_journal(wf.plan(loaded))
    ran = wf.run_jobs(wf.measure_machine(run)).cases  # each journalled as it finished
    resumed = wf.open_journal(replace(run, options=replace(run.options, resume=True)))
    assert list(resumed.done.values()) == list(ran)
    fresh = wf.open_journal(run)
    assert fresh.done == {} and not (run.out / "cases.jsonl").exists()


def test_measure_machine_writes_the_header_a_partial_report_needs(loaded):
    run = wf.measure_machine(wf.open_journal(wf.plan(loaded)))
    header = json.loads((run.out / "run.json").read_text())
    assert run.ceilings is FAKE_CEILINGS and header["ceilings"]["device"] == "synthetic"
    assert header["environment"]["bench_tier"] == "cpu" and "not timings of GPU kernels" in run.environment["note"]


def test_run_jobs_keeps_plan_order_journals_each_case_and_skips_resumed_ones(loaded):
    run = wf.measure_machine(wf.open_journal(wf.plan(loaded)))
    out = wf.run_jobs(run)
    assert [(c.provider, c.case_id) for c in out.cases] == [(j.provider.name, j.case.id) for j in run.jobs]
    assert {c.status for c in out.cases if c.provider == "reference"} == {"ok"}
    assert len((run.out / "cases.jsonl").read_text().splitlines()) == len(run.jobs)
    first = out.cases[0]
    key = (first.kernel, first.provider, first.dtype, first.case_id)
    again = wf.run_jobs(replace(run, done={key: first}))
    assert again.cases[0] is first


def test_finish_and_write(loaded):
    run = wf.finish(wf.run_jobs(wf.measure_machine(wf.open_journal(wf.plan(loaded)))))
    assert run.results.complete and len(run.results.cases) == len(run.jobs) and "at_end" in run.environment
    ok = [c for c in run.results.cases if c.status == "ok"]
    assert ok and all(c.verdict == "n/a" and c.target is None for c in ok)  # a GPU kernel's target, not torch's
    written = wf.write(run)
    assert all(p.exists() for p in written.written)
    assert not (run.out / "cases.jsonl").exists() and not (run.out / "run.json").exists()
    report = (run.out / "report.md").read_text()
    assert "[!NOTE]" in report and "not timings of GPU kernels" in report
