"""Kernels that fool the clock are caught by the generated check that names them (harness/correctness/calls.py):
result replay, a cache keyed by data pointer and outputs written on the first call only by ``stale`` (on a CPU
too); a side stream by ``stream`` and a host sync in the launcher by ``graph`` (CUDA only, skipped here with
the reason). The correct kernel passes all three."""

from __future__ import annotations

import pytest
import torch

from harness.correctness.args import case_seed
from harness.correctness.checks import CaseContext, CheckFailure, run_checks
from harness.spec.imports import resolve_import
from harness.target.device import detect
from tests.e2e import write_spec

PLANTED = "tests.planted.clock_kernels:"
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _run(tmp_path, impl: str, dtype: str = "fp32"):
    from harness.spec.load import load

    spec = load(write_spec(tmp_path, "scale", impl))
    device = detect()
    case = spec.cases["ci"][0]
    ctx = CaseContext(spec, "triton", dtype, case, case_seed(spec, dtype, case), device.arch, device.torch_device)
    return run_checks(ctx, resolve_import(impl), resolve_import(spec.reference))


@pytest.mark.parametrize("impl", ["scale_replays", "scale_cached_by_pointer", "scale_first_call_only"])
def test_stale_results_are_caught_by_the_stale_check(tmp_path, impl):
    with pytest.raises(CheckFailure) as exc:
        _run(tmp_path, PLANTED + impl)
    assert exc.value.check == "stale", str(exc.value)
    assert "a second call on the same buffers, with new values written into its inputs" in str(exc.value)


def test_the_correct_kernel_passes_every_call_check(tmp_path):
    outcome = _run(tmp_path, "tests.planted.broken_kernels:scale")
    assert "stale" in outcome.checks
    if torch.cuda.is_available():
        assert {"stream", "graph"} <= set(outcome.checks)
    else:
        assert "stream: needs a CUDA device (skipped on cpu)" in outcome.notes


@GPU
def test_a_side_stream_is_caught_by_the_stream_check(tmp_path):
    with pytest.raises(CheckFailure) as exc:
        _run(tmp_path, PLANTED + "scale_side_stream")
    assert exc.value.check == "stream" and "did not run on the caller's stream" in str(exc.value)


@GPU
def test_a_host_sync_is_caught_by_the_graph_check(tmp_path):
    with pytest.raises(CheckFailure) as exc:
        _run(tmp_path, PLANTED + "scale_host_sync")
    assert exc.value.check == "graph" and "cannot be captured in a CUDA graph" in str(exc.value)


def test_graph_is_waivable_and_stale_and_stream_are_not(tmp_path):
    from harness.spec.checks import BY_NAME

    assert BY_NAME["graph"].waivable and not BY_NAME["stale"].waivable and not BY_NAME["stream"].waivable


# ----------------------------------------------------------------------------- the timed calls themselves

def _job(tmp_path, impl: str):
    from harness.bench.plan import Job
    from harness.spec.load import load
    from harness.target.providers import Provider

    extra = f'\n[peers.planted]\nimpl = "{impl}"\n\n[[cases.bench]]\nrows = 64\ncols = 256\n'
    spec = load(write_spec(tmp_path, "scale", "tests.planted.broken_kernels:scale", extra=extra))
    return Job(spec, spec.cases["bench"][0], "fp32", Provider("planted", "peer", "peer", impl, True))


def test_a_replaying_launcher_passes_one_call_but_its_timed_calls_are_wrong(tmp_path):
    """Result replay returns at once when called again with the same buffers: every check before timing sees a
    fresh buffer and passes except stale; the timed loop's re-check (outputs poisoned before each timed call)
    makes the case wrong even with the checks before timing out of the way."""
    from harness.bench import run as bench_run
    from harness.correctness.checks import ReferenceCache
    from harness.timing.engine import TimingConfig

    job = _job(tmp_path, PLANTED + "scale_replays")
    timing = TimingConfig(timeout_s=0.5, min_time_s=0.01)
    result = bench_run.run_job(job, detect(), None, timing, ReferenceCache())
    assert result.status == "wrong" and "stale" in result.reason
    bench_run.verify, real = (lambda *a, **k: ""), bench_run.verify  # as if it had fooled every check
    try:
        cache = ReferenceCache()
        seed = case_seed(job.spec, job.dtype, job.case, 0)
        real(job, job.provider.load(job.spec), detect(), cache, seed)  # fills the reference, as the real path does
        result = bench_run.run_job(job, detect(), None, timing, cache)
    finally:
        bench_run.verify = real
    assert result.status == "wrong" and result.reason.startswith("timed outputs: out: a timed call's outputs")


def test_the_correct_provider_is_timed_with_its_outputs_rechecked(tmp_path, monkeypatch):
    from harness.bench.recheck import ProbedCheck
    from harness.bench.run import run_job
    from harness.correctness.checks import ReferenceCache
    from harness.timing.engine import TimingConfig

    calls = {"before": 0, "verify": 0}
    for name in calls:  # what the engine calls: the re-check of timed outputs, with its probes of new values
        real = getattr(ProbedCheck, name)
        monkeypatch.setattr(ProbedCheck, name, lambda self, _real=real, _n=name: (
            calls.__setitem__(_n, calls[_n] + 1), _real(self))[1])
    job = _job(tmp_path, "tests.planted.broken_kernels:scale")
    result = run_job(job, detect(), None, TimingConfig(timeout_s=1.0, min_time_s=0.01), ReferenceCache())
    n = result.stats["n"]
    assert result.status == "ok" and calls["before"] >= n and calls["verify"] == n.bit_length()  # 1, 2, 4, ...


def test_physically_impossible_times_fail():
    from harness.bench.roofline import IMPLAUSIBLE_MARGIN, implausible, verdict

    assert verdict(100.0 * (1 + IMPLAUSIBLE_MARGIN) + 1, None, 0.8) == "implausible"
    assert verdict(120.0, 110.0, 0.8) == "model-error"  # beyond the roof, within the margin: the model's error
    assert "below the cost of an empty event pair" in implausible(0.0, {}, None)
    roof = {"verdict": "implausible", "bound": "memory", "bytes": 32e6, "gbps": 32e6 / 0.5e-6 / 1e9,
            "ceiling_gbps": 4300.0}
    assert implausible(0.5, roof, None) == "implausible: 32 MB in 0.50 us is 14.9x the measured 4.30 TB/s"
    assert implausible(100.0, {"verdict": "pass"}, None) == ""


def test_the_gate_rechecks_each_sides_timed_calls(tmp_path):
    """A PR whose launcher replays its result is timed at next to nothing; the gate's interleaved timing
    poisons the outputs before each sample and checks each block's last call, so the PR side is WRONG."""
    import functools

    from harness.correctness.args import make_args, reference_args
    from harness.correctness.checks import TimedCheck
    from harness.gate.abcase import _SideCheck, _SideWrong
    from harness.gate.interleave import BlockConfig, measure_ab
    from harness.gate.verdict import Decision
    from harness.spec.load import load

    spec = load(write_spec(tmp_path, "scale", "tests.planted.broken_kernels:scale"))
    case, device = spec.cases["ci"][0], detect()
    args = make_args(spec, case, "fp32", device.torch_device, 0)
    ref = reference_args(spec, args, "fp32")
    resolve_import(spec.reference)(**ref.kwargs())
    expected = {"out": ref.tensors["out"]}

    def side(impl):
        check = TimedCheck(spec, "fp32", case, args, expected)
        return check.wrap(functools.partial(resolve_import(impl), **args.kwargs())), check

    base, base_check = side("tests.planted.broken_kernels:scale")
    pr, pr_check = side(PLANTED + "scale_replays")
    cfg = BlockConfig(blocks=6, samples=3, budget_s=2.0, method="events" if device.is_gpu else "host")

    def judge(b, p):
        return Decision("SAME", 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, len(b))

    with pytest.raises(_SideWrong) as exc:
        measure_ab(base, pr, device.torch_device, cfg, judge,
                   outputs=(_SideCheck(base_check, "base"), _SideCheck(pr_check, "PR")))
    assert exc.value.side == "PR" and "a timed call's outputs do not match the reference" in str(exc.value)
    run = measure_ab(base, base, device.torch_device, cfg, judge, outputs=(_SideCheck(base_check, "base"),) * 2)
    assert run.decision.verdict == "SAME"


ROTATE_SPEC = """
[kernel]
name = "rotate"
summary = "x <- x reversed along its rows, in place"
reference = "tests.planted.broken_kernels:rotate_inplace_ref"
dtypes = ["fp32"]

[backends.triton]
impl = "tests.planted.broken_kernels:rotate_inplace_ref"
arch = ["cpu", ">=sm_80"]

[peers.planted]
impl = "{impl}"

[inputs.x]
shape = ["rows", "cols"]
inplace = true

[cases.edge]
base = { rows = 4, cols = 8 }
vary = { rows = [0, 1], cols = [7] }

[[cases.bench]]
rows = 64
cols = 256
"""


@pytest.mark.parametrize("impl, wrong", [("rotate_inplace_returns_view", False), ("rotate_replays_a_copy", True)])
def test_a_returned_view_of_an_inplace_input_is_not_compared_after_calls_compound(tmp_path, monkeypatch, impl,
                                                                                   wrong):
    """An in-place input holds every timed call's result so far; a returned view of it does too (Liger's RoPE),
    so only the probed calls (fresh values written first) check it. A returned tensor of its own is checked."""
    from harness.bench import run as bench_run
    from harness.bench.plan import Job
    from harness.bench.run import run_job
    from harness.correctness.checks import ReferenceCache
    from harness.spec.load import load
    from harness.target.providers import Provider
    from harness.timing.engine import TimingConfig

    target = "tests.planted.broken_kernels:" + impl
    path = tmp_path / "rotate.toml"
    path.write_text(ROTATE_SPEC.replace("{impl}", target))
    spec = load(path)
    job = Job(spec, spec.cases["bench"][0], "fp32", Provider("planted", "peer", "peer", target, True))
    cache = ReferenceCache()
    seed = case_seed(job.spec, job.dtype, job.case, 0)
    bench_run.verify(job, job.provider.load(job.spec), detect(), cache, seed)  # the reference, as the real path
    monkeypatch.setattr(bench_run, "verify", lambda *a, **k: "")  # the replay fools the checks before timing
    result = run_job(job, detect(), None, TimingConfig(timeout_s=1.0, min_time_s=0.01), cache)
    if wrong:
        assert result.status == "wrong" and result.reason.startswith("timed outputs: x:"), result.reason
    else:
        assert result.status == "ok", result.reason


# ----------------------------------------------------------------------------- static inputs (a model's weights)

def _static_w(tmp_path, impl: str, static: bool, extra: str = ""):
    from harness.spec.load import load

    path = write_spec(tmp_path, "scale", impl, extra=extra)
    if static:
        path.write_text(path.read_text().replace("contiguous = true\n", "contiguous = true\nstatic = true\n", 1))
    return load(path)


@pytest.mark.parametrize("static", [False, True], ids=["w-may-change", "w-static"])
def test_a_kernel_caching_what_it_derives_from_w_is_stale_unless_w_is_static(tmp_path, static):
    impl = PLANTED + "scale_derives_w_once"
    spec = _static_w(tmp_path, impl, static)
    assert [t.static for t in spec.inputs] == [False, static]
    device = detect()
    case = spec.cases["ci"][0]
    ctx = CaseContext(spec, "triton", "fp32", case, case_seed(spec, "fp32", case), device.arch, device.torch_device)
    if not static:
        with pytest.raises(CheckFailure) as exc:
            run_checks(ctx, resolve_import(impl), resolve_import(spec.reference))
        assert exc.value.check == "stale", str(exc.value)
        return
    outcome = run_checks(ctx, resolve_import(impl), resolve_import(spec.reference))
    assert "stale" in outcome.checks  # x still gets new values: a cached result would be caught


def test_the_timed_recheck_keeps_a_static_input_and_gives_the_others_new_values(tmp_path):
    from harness.bench.plan import Job
    from harness.bench.run import run_job
    from harness.correctness.checks import ReferenceCache
    from harness.target.providers import Provider
    from harness.timing.engine import TimingConfig

    impl = PLANTED + "scale_derives_w_once"
    results = {}
    for static in (False, True):
        folder = tmp_path / str(static)
        folder.mkdir()
        spec = _static_w(folder, impl, static, extra="\n[[cases.bench]]\nrows = 64\ncols = 256\n")
        job = Job(spec, spec.cases["bench"][0], "fp32", Provider("planted", "peer", "peer", impl, True))
        results[static] = run_job(job, detect(), None, TimingConfig(min_time_s=0.02, timeout_s=3.0),
                                  ReferenceCache())
    assert results[False].status == "wrong", results[False].reason  # caught before or while timed
    assert results[True].status == "ok", results[True].reason


def test_static_and_inplace_together_is_one_line_naming_the_key(tmp_path, capsys):
    from harness.cli.main import main

    path = write_spec(tmp_path, "scale", PLANTED + "scale_derives_w_once")
    both = "contiguous = true\nstatic = true\ninplace = true\n"
    path.write_text(path.read_text().replace("contiguous = true\n", both, 1))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any(ln.startswith(f"{path}: inputs.w.static: an inplace input is written by every call") for ln in err), err


def test_a_static_input_is_never_written_so_a_cache_keyed_by_its_version_stays_valid(tmp_path):
    """Not even with its own values: a write bumps the tensor's version counter, and a launcher that keys what it
    derives by it (as the int4 torch peer does) would derive it again inside a timed call."""
    import functools

    from harness.bench.recheck import ProbedCheck
    from harness.correctness.args import clone_args, make_args, reference_args
    from harness.correctness.calls import _write_inputs
    from harness.correctness.checks import TimedCheck
    from harness.timing.engine import TimingConfig, measure

    spec = _static_w(tmp_path, "tests.planted.broken_kernels:scale", True)
    case = spec.cases["ci"][0]
    args = make_args(spec, case, "fp32", "cpu", 7)
    x, w = args.tensors["x"], args.tensors["w"]
    versions = (x._version, w._version)
    _write_inputs(args, make_args(spec, case, "fp32", "cpu", 8), spec)
    assert (x._version > versions[0], w._version) == (True, versions[1])
    ref_fn = resolve_import(spec.reference)
    ref_args = reference_args(spec, clone_args(args), "fp32")
    ref_fn(**ref_args.kwargs())
    check = ProbedCheck(TimedCheck(spec, "fp32", case, args, {"out": ref_args.tensors["out"]}), ref_fn, "cpu", 7)
    cfg = TimingConfig(min_samples=64, max_samples=64, min_time_s=0.0, max_rsd=0.0, timeout_s=30.0)
    fn = resolve_import("tests.planted.broken_kernels:scale")
    measure(check.wrap(functools.partial(fn, **args.kwargs())), device="cpu", config=cfg, outputs=check)
    check.verify()
    assert check.probes >= 3 and w._version == versions[1]
