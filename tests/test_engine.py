"""The timing engine's CPU path, its sampling loop, throttle filter and CUPTI trace attribution.

Everything here runs on a CPU in seconds; the GPU paths are exercised by bench/gpu_timing_check.py.
"""

from __future__ import annotations

import json
import random
import time

import pytest
import torch

from harness.timing import clocks, engine
from harness.timing.clocks import PROLOGUE_TAG, SAMPLE_TAG, is_throttled, sample_spans
from harness.timing.engine import Measurement, TimingConfig, measure
from harness.timing.environment import llc_bytes

STOPS = {"rsd", "noise-stable", "timeout", "max-samples"}


def _work():
    return sum(i * i for i in range(3000))  # deterministic, sleep-free, tens of microseconds


def test_host_path_measures_a_workload():
    cfg = TimingConfig(min_samples=10, max_samples=400, timeout_s=3.0)
    m = measure(_work, device="cpu", config=cfg)
    assert isinstance(m, Measurement) and m.method == "host-perf-counter"
    assert len(m.samples_us) >= cfg.min_samples and m.stop_reason in STOPS
    assert all(v > 0 for v in m.samples_us) and m.dropped_us == () and m.sm_clock_mhz == ()
    assert m.warm_us and all(v > 0 for v in m.warm_us)
    assert m.device_time_s == pytest.approx(sum(m.samples_us) * 1e-6)
    assert m.wall_time_s >= m.device_time_s
    p = m.method_params
    assert p["warmup_calls"] >= 5 and p["flush"] == "none" and p["sm_clock"].startswith("unavailable")
    assert p["samples_attempted"] == len(m.samples_us)


def test_host_path_stops_at_max_samples():
    m = measure(_work, device="cpu", config=TimingConfig(min_samples=5, max_samples=20, min_time_s=1e9))
    assert m.stop_reason == "max-samples" and len(m.samples_us) == 20


def test_host_path_times_out():
    def slow():
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass

    cfg = TimingConfig(min_samples=1000, max_samples=2000, timeout_s=0.1)
    m = measure(slow, device="cpu", config=cfg)
    assert m.stop_reason == "timeout" and 1 <= len(m.samples_us) < 100
    assert all(v >= 2000 for v in m.samples_us)


def test_a_slow_first_call_does_not_eat_the_sampling_time():
    """The first call compiles (here: sleeps past the whole time box); sampling still gets its samples."""
    calls = []

    def first_slow():
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.3)

    cfg = TimingConfig(min_samples=10, max_samples=10, min_time_s=0.0, max_rsd=1.0, timeout_s=0.2, launch=False)
    m = measure(first_slow, device="cpu", config=cfg)
    assert len(m.samples_us) == 10 and m.stop_reason != "timeout"
    assert m.wall_time_s >= 0.3  # the case's wall time still counts the warm-up


def test_cpu_flush_reads_twice_the_llc_before_every_sample(monkeypatch):
    buffers = []

    class Counting:  # the flush buffer, counting its reads
        def __init__(self, tensor):
            self.tensor, self.reads = tensor, 0

        def sum(self):
            self.reads += 1
            return self.tensor.sum()

    real_ones = torch.ones

    def ones(*args, **kwargs):
        buffers.append(Counting(real_ones(*args, **kwargs)))
        return buffers[-1]

    monkeypatch.setattr(torch, "ones", ones)
    m = measure(_work, device="cpu", config=TimingConfig(min_samples=3, max_samples=3, cpu_flush=True))
    (buf,) = buffers
    assert buf.tensor.numel() * buf.tensor.element_size() == 2 * llc_bytes() == m.method_params["flush_bytes"]
    assert len(m.samples_us) == 3 and buf.reads == m.method_params["samples_attempted"] == 3


def test_config_and_device_errors():
    with pytest.raises(ValueError, match="method"):
        TimingConfig(method="nvbench")
    with pytest.raises(ValueError, match="min_samples"):
        TimingConfig(min_samples=10, max_samples=5)
    for method in ("cupti", "events"):
        with pytest.raises(ValueError, match="CUDA"):
            measure(_work, device="cpu", config=TimingConfig(method=method))
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            measure(_work, device="cuda")


# ----------------------------------------------------------------------------- throttling

class _Reader:
    available, reason, max_mhz = True, "", 2000.0


def test_sample_loop_drops_throttled_and_discarded_samples():
    stream = iter([(10.0, 1980.0), (11.0, 1000.0), (None, 1980.0), (12.0, None), (13.0, 1600.0)] * 40)

    def batch(count, deadline):
        return [next(stream) for _ in range(count)]

    params: dict = {}
    cfg = TimingConfig(min_samples=5, max_samples=30, min_time_s=1e9, throttle_fraction=0.75)
    t0 = time.perf_counter()
    kept, dropped, got_clocks, reason = engine._sample_loop(batch, cfg, _Reader(), t0, 7, params)
    assert reason == "max-samples" and len(kept) == 30
    assert set(kept) == {10.0, 12.0, 13.0} and set(dropped) == {11.0}  # 1600 >= 0.75 x 2000 is kept
    assert len(got_clocks) == len(kept)  # aligned: NaN for the sample whose reading failed
    assert sum(c != c for c in got_clocks) == kept.count(12.0)
    assert params["dropped_throttled"] == len(dropped) and set(params["dropped_clock_mhz"]) == {1000.0}


def test_throttled_samples_never_feed_the_stopping_rule():
    """Steady samples at full clock, wild ones (1000x) while throttled: the rule sees only the steady ones,
    so it converges on rsd at exactly min_samples kept samples, and params say what was dropped."""
    stream = iter([(10.0, 1980.0), (1e4, 345.0), (2e4, 1400.0)] * 100)

    def batch(count, deadline):
        return [next(stream) for _ in range(count)]

    params: dict = {}
    cfg = TimingConfig(min_samples=8, max_samples=100, min_time_s=0.0, max_rsd=0.005, throttle_fraction=0.75)
    kept, dropped, got_clocks, reason = engine._sample_loop(batch, cfg, _Reader(), time.perf_counter(), 1, params)
    assert reason == "rsd" and kept == [10.0] * 8 and params["rsd"] == 0.0
    assert dropped == [1e4, 2e4] * 7 and got_clocks == [1980.0] * 8  # 1400 < 0.75 x 2000: dropped too
    assert params["samples_attempted"] == 22 and params["dropped_throttled"] == 14
    assert params["dropped_clock_mhz"] == [345.0, 1400.0] * 7


def test_throttle_test_on_synthetic_clocks():
    assert is_throttled(1000.0, 1980.0, 0.75) and not is_throttled(1485.0, 1980.0, 0.75)
    assert not is_throttled(None, 1980.0, 0.75) and not is_throttled(100.0, None, 0.75)
    assert not is_throttled(100.0, 0.0, 0.75)  # a reader that knows no maximum judges nothing


def test_clock_reader_without_a_gpu_says_why():
    reader = clocks.SmClockReader("cpu")
    assert not reader.available and reader.reason and reader.read_mhz() is None
    assert clocks.nvml_snapshot("cpu")["nvml"].startswith("unavailable")


class _FakeNvml:
    """The slice of pynvml the clock reader uses; the handle is found by "GPU-" + torch's UUID."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 1, 2, 0

    def __init__(self):
        self.readings = iter([1980.0, 1410.0, 345.0])

    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid != "GPU-1234-abcd":
            raise RuntimeError("Not Found")
        return "handle"

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return 1980 if kind == self.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetClockInfo(self, handle, kind):
        return next(self.readings) if kind == self.NVML_CLOCK_SM else 3201

    def nvmlSystemGetDriverVersion(self):
        return b"580.159.03"

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 700_000


def test_clock_reader_maps_the_device_by_uuid(monkeypatch):
    fake = _FakeNvml()
    monkeypatch.setattr(clocks, "pynvml", fake)
    monkeypatch.setattr(clocks, "_nvml_ready", None)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: type("P", (), {"uuid": "1234-abcd"}))
    reader = clocks.SmClockReader("cuda:0")
    assert reader.available and reader.max_mhz == 1980.0
    assert [reader.read_mhz(), reader.read_mhz()] == [1410.0, 345.0]  # the probe took the first reading
    assert reader.read_mhz() is None  # a failing reading costs one sample its clock, nothing more
    snap = clocks.nvml_snapshot("cuda:0")
    assert snap["nvml"] == "ok" and snap["driver_version"] == "580.159.03" and snap["power_limit_w"] == 700.0
    assert snap["temperature_c"].startswith("unavailable")  # not in the fake: reported, not raised


# ----------------------------------------------------------------------------- CUPTI trace attribution

def _x(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _synthetic_trace():
    ext = "External id"
    return [
        # sample 0 prologue: the flush (an aten op) and the spin (a bare launch)
        _x("user_annotation", f"{PROLOGUE_TAG}0", 0.0, 20.0, **{ext: 1}),
        _x("cpu_op", "aten::sum", 2.0, 5.0, **{ext: 2}),
        _x("cuda_runtime", "cudaLaunchKernel", 3.0, 2.0, correlation=100),
        _x("cuda_runtime", "cudaLaunchKernel", 10.0, 2.0, correlation=101),
        _x("kernel", "reduce_kernel", 30.0, 40.0, **{ext: 2, "correlation": 100, "device": 0}),
        _x("kernel", "spin_kernel", 70.0, 100.0, correlation=101, device=0),
        _x("gpu_user_annotation", f"{PROLOGUE_TAG}0", 29.999, 140.002),
        # sample 0: eager torch, two ops, two kernels
        _x("user_annotation", f"{SAMPLE_TAG}0", 25.0, 20.0, **{ext: 3}),
        _x("cpu_op", "aten::mul", 26.0, 5.0, **{ext: 4}),
        _x("cuda_runtime", "cudaLaunchKernel", 27.0, 2.0, correlation=102),
        _x("cpu_op", "aten::add", 33.0, 5.0, **{ext: 5}),
        _x("cuda_runtime", "cudaLaunchKernel", 34.0, 2.0, correlation=103),
        _x("kernel", "mul_kernel", 170.5, 3.0, **{ext: 4, "correlation": 102, "device": 0}),
        _x("kernel", "add_kernel", 174.0, 2.5, **{ext: 5, "correlation": 103, "device": 0}),
        _x("kernel", "other_gpu", 171.0, 50.0, **{ext: 4, "correlation": 104, "device": 1}),
        _x("gpu_user_annotation", f"{SAMPLE_TAG}0", 170.499, 6.002),
        # sample 1: a Triton launch with no op around it: only kineto's GPU span knows it
        _x("user_annotation", f"{PROLOGUE_TAG}1", 200.0, 20.0, **{ext: 6}),
        _x("user_annotation", f"{SAMPLE_TAG}1", 225.0, 15.0, **{ext: 7}),
        _x("cuda_driver", "cuLaunchKernelEx", 230.0, 3.0, correlation=110),
        _x("kernel", "_rmsnorm", 500.0, 1.9, correlation=110, device=0),
        _x("gpu_user_annotation", f"{SAMPLE_TAG}1", 499.999, 1.902),
        # sample 2: no op, no GPU span: the launch call's host time decides
        _x("user_annotation", f"{SAMPLE_TAG}2", 300.0, 20.0, **{ext: 8}),
        _x("cuda_driver", "cuLaunchKernel", 305.0, 3.0, correlation=120),
        _x("kernel", "_rmsnorm", 800.0, 4.0, correlation=120, device=0),
        # launched by nobody we know
        _x("kernel", "stray", 900.0, 1.0, correlation=999, device=0),
        {"ph": "f", "cat": "ac2g", "name": "flow", "id": 1, "pid": 0, "tid": 0, "ts": 1.0},
    ]


def test_sample_spans_attributes_every_route():
    events = _synthetic_trace()
    random.Random(0).shuffle(events)  # attribution must not depend on the order events are written in
    spans, info = sample_spans({"traceEvents": events}, 3, device_index=0)
    assert spans == pytest.approx([6.0, 1.9, 4.0])
    assert info["routes"] == {"prologue": 2, "op": 2, "gpu-annotation": 1, "launch-call": 1,
                              "unattributed": 1}
    assert info["events_per_sample"] == {2: 1, 1: 2}
    assert info["gpu_annotation_max_diff_us"] < 1e-6


def test_sample_spans_missing_sample_is_none():
    spans, info = sample_spans({"traceEvents": _synthetic_trace()}, 4, device_index=0)
    assert spans[3] is None and info["events_per_sample"][0] == 1


def test_sample_spans_on_a_real_torch_profiler_trace(tmp_path):
    """torch's own CPU-side events (annotations, ops, External ids) in the format the parser expects."""
    from torch.profiler import ProfilerActivity, profile, record_function

    x = torch.randn(64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for j in range(3):
            with record_function(f"{PROLOGUE_TAG}{j}"):
                x.sum()
            with record_function(f"{SAMPLE_TAG}{j}"):
                torch.add(x.mul(2.0), 1.0)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    ranges = {e["name"]: (e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "user_annotation"}
    assert {f"{SAMPLE_TAG}{j}" for j in range(3)} <= set(ranges)
    # one fake kernel per CPU op, 10 us apart, linked by External id the way kineto links real ones
    fake, expected = [], {}
    for n, op in enumerate(e for e in events if e.get("cat") == "cpu_op"):
        start = 1e6 + 10.0 * n
        fake.append(_x("kernel", "k", start, 2.0, **{"External id": op["args"]["External id"], "device": 0}))
        for j in range(3):
            lo, hi = ranges[f"{SAMPLE_TAG}{j}"]
            if lo <= op["ts"] <= hi:
                first, last = expected.get(j, (start, start + 2.0))
                expected[j] = (min(first, start), max(last, start + 2.0))
    trace["traceEvents"] += fake
    spans, info = sample_spans(trace, 3, device_index=0)
    assert sorted(expected) == [0, 1, 2]
    assert spans == pytest.approx([expected[j][1] - expected[j][0] for j in range(3)])
    assert info["routes"].get("prologue", 0) > 0 and info["routes"].get("unattributed", 0) == 0


def test_the_engine_and_the_gate_take_their_samples_from_one_sampler(monkeypatch):
    """One sampler: a sample means the same in a benchmark and in a merge verdict. Both paths go through
    harness.timing.sampler (here the CPU's HostSampler), and nothing else takes a sample."""
    from harness.gate.interleave import BlockConfig, make_timer
    from harness.timing import sampler as sampler_mod
    from harness.timing.engine import TimingConfig, measure

    calls = []
    real = sampler_mod.HostSampler.sample

    def counted(self, fn, before=None):
        calls.append(fn)
        return real(self, fn, before)

    monkeypatch.setattr(sampler_mod.HostSampler, "sample", counted)
    a, b = (lambda: sum(range(200))), (lambda: sum(range(300)))
    m = measure(a, device="cpu", config=TimingConfig(min_time_s=0.0, timeout_s=1.0, min_samples=10, max_samples=10))
    assert len(m.samples_us) == 10 and calls.count(a) == 10
    timer = make_timer(a, b, "cpu", BlockConfig())
    assert isinstance(timer.sampler, sampler_mod.HostSampler)
    assert len(timer.block(b, 7)) == 7 and calls.count(b) == 7
