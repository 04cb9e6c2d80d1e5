"""Benchmark modes on the CPU: ``bench --mode bwd`` times the reference's backward, a planted backward that
replays a kept gradient is reported wrong (tests/planted/bench_mode_kernels.py), the mode is part of every
row of the report and of compare.md, [backward.roofline] gives bwd rows their bytes, and a results file of an
older schema still loads."""

from __future__ import annotations

import json

import pytest

from harness.bench.plan import Job
from harness.bench.run import run_job
from harness.bench.workflow import BenchOptions, bench
from harness.correctness.checks import ReferenceCache
from harness.results.load import load_results
from harness.results.model import ResultsError
from harness.spec.bind import bind
from harness.spec.imports import use_interpreter_if_no_gpu
from harness.spec.load import load
from harness.spec.schema import SpecError
from harness.target.device import detect
from harness.target.providers import Provider
from harness.timing.engine import TimingConfig
from tests.e2e import REPO, spec_variant
from tests.planted import bench_mode_kernels

SHIPPED_AUTOGRAD = 'autograd = "kernels.rmsnorm_bwd:RMSNormFunction"'
SHIPPED_KERNEL = 'kernel = "kernels.rmsnorm_bwd:rmsnorm_bwd"'


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """rmsnorm's cpu tier in fwd and bwd: the reference is the only provider a CPU times."""
    out = tmp_path_factory.mktemp("bench")
    result = bench(BenchOptions(kernels=("rmsnorm",), modes=("fwd", "bwd"), out=str(out), timeout=1.0,
                                min_time=0.0))
    return result, out


def test_bench_mode_bwd_gives_the_reference_bwd_rows_with_the_backward_roofline(run):
    result, _ = run
    bwd = [c for c in result.results.cases if c.mode == "bwd" and c.provider == "reference"]
    assert {c.case_id for c in bwd} == {c.id for c in next(s for s in result.specs).cases["cpu"]}
    for c in bwd:
        assert c.status == "ok", c.reason
        assert c.stats["median"] > 0 and c.stats["n"] == len(c.samples_us) >= 1  # a 1 s budget per case
        assert c.peak_mem_bytes is None  # a CPU has no device counter: None, not a number
        # [backward.roofline]: x, weight and grad_out read, grad_x and grad_weight written, bf16
        tokens, hidden = c.shape["tokens"], c.shape["hidden"]
        assert c.bytes == 2 * (3 * tokens * hidden + 2 * hidden)
        assert c.flops == 11 * tokens * hidden
    fwd = {c.case_id: c for c in result.results.cases if c.mode == "fwd" and c.provider == "reference"}
    assert set(fwd) == {c.case_id for c in bwd}  # one row per mode, the same cases
    assert all(fwd[c.case_id].bytes == 2 * (2 * c.shape["tokens"] * c.shape["hidden"] + c.shape["hidden"])
               for c in bwd)
    assert not any(c.mode == "full" for c in result.results.cases)  # not asked for


def test_a_provider_without_a_backward_is_left_out_of_bwd_with_its_reason(run):
    result, _ = run
    waivers = {w.what: w.reason for w in result.results.waivers}
    assert "declares none" in waivers["provider cuda not benchmarked in mode bwd"]
    assert not any(c.provider == "cuda" and c.mode == "bwd" for c in result.results.cases)


def test_the_mode_is_in_the_report_and_in_compare_md(run, tmp_path):
    from harness.gate.workflow import CompareOptions, run_compare

    _, out = run
    report = (out / "report.md").read_text()
    summary = [line for line in report.splitlines() if line.startswith("| rmsnorm |")]
    assert any("| bf16 | fwd |" in line for line in summary) and any("| bf16 | bwd |" in line for line in summary)
    assert "· bf16 · bwd (backward alone)" in report
    cmp = run_compare(CompareOptions(base=str(out / "results.json"), pr=str(out / "results.json"),
                                     out=str(tmp_path)))
    modes = sorted(c.mode for c in cmp.comparison.cases)
    assert modes == ["bwd"] * (len(modes) // 2) + ["fwd"] * (len(modes) // 2) and modes
    md = (tmp_path / "compare.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| shape |"))
    assert "| mode |" in header and "peak mem base → PR" in header
    rows = [line for line in md.splitlines() if line.startswith("| tokens=")]
    assert {line.split(" | ")[2] for line in rows} == {"fwd", "bwd"}
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert {c["mode"] for c in doc["comparison"]["cases"]} == {"fwd", "bwd"}


def test_a_schema_5_results_file_still_loads_as_fwd_rows(run, tmp_path):
    _, out = run
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema_version"] == 6
    old = {**doc, "schema_version": 5, "cases": []}
    for c in doc["cases"]:
        if c["mode"] == "fwd":
            old["cases"].append({k: v for k, v in c.items() if k not in ("mode", "peak_mem_bytes")})
    (tmp_path / "old.json").write_text(json.dumps(old))
    loaded = load_results(tmp_path / "old.json")
    assert len(loaded.cases) == len(old["cases"]) > 0
    assert {(c.mode, c.peak_mem_bytes) for c in loaded.cases} == {("fwd", None)}
    # a version-5 file cannot carry the fields schema 6 added
    old["cases"][0]["mode"] = "bwd"
    (tmp_path / "smuggled.json").write_text(json.dumps(old))
    with pytest.raises(ResultsError, match=r"cases\[0\]\.mode: unknown key in a schema version 5 file"):
        load_results(tmp_path / "smuggled.json")


def _planted(tmp_path, autograd: str, kernel: str | None):
    text = (REPO / "specs" / "rmsnorm.toml").read_text()
    assert SHIPPED_AUTOGRAD in text and SHIPPED_KERNEL in text, "specs/rmsnorm.toml's [backward] changed"
    text = text.replace(SHIPPED_AUTOGRAD, f'autograd = "{autograd}"')
    text = text.replace(SHIPPED_KERNEL, f'kernel = "{kernel}"' if kernel else "")
    (tmp_path / "rmsnorm.toml").write_text(text)
    return bind(load(tmp_path / "rmsnorm.toml"))


def _bwd_job(spec, mode: str = "bwd"):
    use_interpreter_if_no_gpu()
    bench_mode_kernels.reset()
    # a backend's own provider, made runnable: a CPU would leave a Triton backend untimed, and the planted
    # backwards are plain torch
    provider = Provider("triton", "triton", "candidate", spec.backends["triton"].impl, True)
    job = Job(spec, spec.cases["cpu"][0], "fp32", provider, mode)
    timing = TimingConfig(min_samples=64, max_samples=64, min_time_s=0.0, max_rsd=0.0, timeout_s=30.0, launch=False)
    return run_job(job, detect(), None, timing, ReferenceCache())


PLANTED = "tests.planted.bench_mode_kernels"


@pytest.mark.parametrize("variant, autograd, kernel", [
    ("kernel", f"{PLANTED}:CachedGradRMSNorm", f"{PLANTED}:rmsnorm_bwd_cached"),
    ("autograd", f"{PLANTED}:CachedGradRMSNorm", None),
])
def test_a_backward_that_replays_a_kept_gradient_is_wrong_in_bwd_mode(tmp_path, variant, autograd, kernel):
    result = _bwd_job(_planted(tmp_path, autograd, kernel))
    assert bench_mode_kernels._state["calls"] > bench_mode_kernels.HONEST_CALLS  # it got to replay
    assert result.mode == "bwd"
    assert result.status == "wrong", (result.status, result.reason)
    assert result.reason.startswith("timed outputs: grad_")
    assert "whose inputs got new values" in result.reason
    assert result.stats is None  # no time reported for it


def test_an_honest_standalone_backward_passes_the_same_timed_recheck(tmp_path):
    spec = _planted(tmp_path, f"{PLANTED}:CachedGradRMSNorm", "kernels.rmsnorm_bwd:rmsnorm_bwd_ref")
    result = _bwd_job(spec)
    assert result.status == "ok", result.reason
    assert result.stats["n"] == 64
    # full needs the backend's autograd: the planted one replays there too, through its own backward
    full = _bwd_job(spec, "full")
    assert full.mode == "full" and full.status == "wrong" and "timed outputs" in full.reason


def test_backward_roofline_names_a_tensor_the_backward_has(tmp_path):
    path = spec_variant(tmp_path, "rmsnorm", 'write_bytes = "bytes_grad_x + bytes_grad_weight"',
                        'write_bytes = "bytes_grad_x + bytes_grad_wieght"')
    with pytest.raises(SpecError, match=r"backward\.roofline\.write_bytes: undefined symbol 'bytes_grad_wieght'"
                                        r".*did you mean"):
        load(path)


@pytest.mark.parametrize("mode", ["bwd", "full"])
@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_an_absent_optional_input_has_no_gradient_to_time(mode, backend):
    """layernorm without a bias (bias = false): no grad_bias buffer, no grad_bias keyword for the forward, and
    the backward is timed and re-checked on the gradients that exist (the H200's first bwd run errored there)."""
    import dataclasses

    use_interpreter_if_no_gpu()
    spec = bind(load(REPO / "specs" / "layernorm.toml"))
    base = spec.cases["cpu"][0]
    case = dataclasses.replace(base, given=tuple(base.given) + (("bias", False),))
    impl = spec.reference if backend == "reference" else spec.backends["triton"].impl
    provider = Provider(backend, backend, "candidate", impl, True)
    timing = TimingConfig(min_samples=8, max_samples=8, min_time_s=0.0, max_rsd=0.0, timeout_s=30.0, launch=False)
    result = run_job(Job(spec, case, "fp32", provider, mode), detect(), None, timing, ReferenceCache())
    assert (result.status, result.reason) == ("ok", "")
