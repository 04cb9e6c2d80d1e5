"""``pytest --benchmark-only``: the spec's bench cases as pytest items timed by the harness's engine.

The samples come from :func:`harness.engine.measure` (device events, cold L2, launch overhead hidden), and
are handed to pytest-benchmark as its raw data, so ``--benchmark-json``, ``--benchmark-autosave``,
``--benchmark-compare`` and ``--benchmark-histogram`` work on device-accurate times instead of a CPU timer.
"""

from __future__ import annotations

import functools

import pytest


def wants_bench_items(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "benchmark_only", False))


def bench_items(parent, spec, statuses, device, dtypes):
    from harness.bench.plan import plan

    jobs, _rows, _waivers = plan([spec], device, tuple(dtypes) or ("bf16",))
    for job in jobs:
        name = f"{spec.name}[bench-{job.provider.name}-{job.dtype}-{job.case.id}]"
        yield BenchCaseItem.from_parent(parent, name=name, job=job, device=device)


@functools.cache
def _ceilings(torch_device: str):
    from harness.timing.ceilings import measure_ceilings

    return measure_ceilings(torch_device)


class BenchCaseItem(pytest.Item):
    def __init__(self, *, job, device, **kw):
        super().__init__(**kw)
        self.job, self.device = job, device
        self.fixturenames = ["benchmark"]  # pytest-benchmark keeps items that use its fixture
        self.add_marker(pytest.mark.benchmark(group=f"{job.spec.name} {job.dtype} {job.case.id}"))

    def runtest(self) -> None:
        from pytest_benchmark.fixture import BenchmarkFixture

        from harness.bench.run import run_job
        from harness.correctness.checks import ReferenceCache
        from harness.timing.engine import TimingConfig

        bs = self.config._benchmarksession
        if bs.disabled:
            pytest.skip("benchmarks are disabled (--benchmark-disable)")
        if not self.job.provider.runnable:
            pytest.skip(f"provider {self.job.provider.name}: {self.job.provider.reason}")
        timing = TimingConfig(timeout_s=15.0 if self.device.is_gpu else 3.0,
                              min_time_s=0.5 if self.device.is_gpu else 0.2)
        result = run_job(self.job, self.device, _ceilings(self.device.torch_device), timing, ReferenceCache(),
                         self.config.getoption("seed"))
        if result.status != "ok":
            pytest.fail(f"{result.status}: {result.reason}", pytrace=False)
        marker = self.get_closest_marker("benchmark")
        fixture = BenchmarkFixture(self, add_stats=bs.benchmarks.append, logger=bs.logger, warner=self.warn,
                                   disabled=bs.disabled, **dict(bs.options, **marker.kwargs))
        fixture.extra_info.update(
            timing_method=result.method, stop_reason=result.stop_reason, provider=result.provider,
            backend=result.backend, role=result.role, gbps=result.gbps, tflops=result.tflops,
            pct_roofline=result.pct_roofline, warm_median_us=result.warm_median_us, seed=result.seed,
            arch=self.device.arch, throttled_dropped=len(result.dropped_us))
        stats = fixture._make_stats(1)
        for sample_us in result.samples_us:
            stats.update(sample_us * 1e-6)  # pytest-benchmark keeps seconds

    def reportinfo(self):
        return self.path, None, self.name
