"""Measured ceilings: bandwidth per traffic pattern, and the memory ceiling a kernel's read share picks."""

from __future__ import annotations

import json
import math

import pytest
import torch

from harness.bench.roofline import roofline
from harness.correctness.args import full_env
from harness.spec.load import load as load_spec
from harness.timing import ceilings as ceil_mod
from harness.timing.ceilings import PATTERNS, Ceilings, measure_ceilings, memory_ceiling
from tests.e2e import write_spec

# SYNTHETIC bandwidths (GB/s), shaped like HBM: reads outrun writes.
BW = {"fill": 3000.0, "copy": 4000.0, "add": 4200.0, "read": 4800.0}


def test_exact_at_each_measured_pattern():
    for name, (fraction, _) in PATTERNS.items():
        assert memory_ceiling(BW, fraction) == pytest.approx(BW[name])


def test_time_per_byte_is_interpolated_between_patterns():
    # Halfway between copy (1/2) and add (2/3) in read share: the mean of their times per byte.
    f = (0.5 + 2 / 3) / 2
    assert memory_ceiling(BW, f) == pytest.approx(1 / ((1 / 4000 + 1 / 4200) / 2))
    values = [memory_ceiling(BW, i / 20) for i in range(21)]
    assert values == sorted(values)  # monotone here, as the patterns are


def test_ends_clamp_and_missing_data_fall_back_to_copy():
    only = {"copy": 4000.0, "read": 4800.0}
    assert memory_ceiling(only, 0.1) == pytest.approx(4000.0)  # below the lowest measured share: clamped
    assert memory_ceiling(BW, None) == 4000.0  # no read/write split in the spec: the copy ceiling
    assert memory_ceiling({}, 0.9, copy_gbps=3900.0) == 3900.0  # an older results file: copy only
    assert memory_ceiling({"copy": math.nan}, 0.7) is None
    assert memory_ceiling({"read": 4800.0}, 0.2) == 4800.0


def test_roofline_uses_the_bandwidth_at_the_kernels_read_share(tmp_path):
    split = ('[roofline]\nread_bytes = "bytes_x + bytes_w"\nwrite_bytes = "bytes_out"\nflops = "2 * numel_x"\n'
             'target = 0.5\n')
    text = write_spec(tmp_path, "scale", "tests.planted.broken_kernels:scale").read_text()
    head, _, _ = text.partition("[roofline]")
    (tmp_path / "scale.toml").write_text(head + split)
    spec = load_spec(tmp_path / "scale.toml")
    env = full_env(spec, spec.cases["ci"][0], "bf16")
    c = Ceilings("synthetic", "n/a", BW["copy"], BW, {"bf16": 700.0}, {}, "synthetic", "now", False)
    nbytes = float(spec.roofline.bytes(env))
    read = float(spec.roofline.read_bytes(env))
    assert nbytes == read + float(spec.roofline.write_bytes(env))
    expected = memory_ceiling(BW, read / nbytes)
    median_us = nbytes / (expected * 1e3)  # exactly at the ceiling
    out = roofline(spec, env, median_us, c, "bf16")
    assert out["ceiling_gbps"] == pytest.approx(expected) and out["pct_roofline"] == pytest.approx(100.0)
    assert expected != pytest.approx(BW["copy"])  # the read-heavy mix is not judged against a copy
    plain = roofline(load_spec(write_spec(tmp_path, "scale", "tests.planted.broken_kernels:scale")), env,
                     median_us, c, "bf16")
    assert plain["ceiling_gbps"] == BW["copy"]


def test_measure_on_cpu_measures_every_pattern_and_caches(tmp_path, monkeypatch):
    monkeypatch.setitem(ceil_mod._CPU, "copy_bytes", 16 << 20)  # small: this checks the plumbing, not the CPU
    monkeypatch.setitem(ceil_mod._CPU, "matmul_n", 128)
    monkeypatch.setitem(ceil_mod._CPU, "slow_matmul_n", 64)
    lines: list[str] = []
    first = measure_ceilings(torch.device("cpu"), cache_dir=tmp_path, progress=lines.append)
    assert set(first.bandwidth_gbps) == set(PATTERNS) and not first.cached
    assert all(math.isfinite(v) and v > 0 for v in first.bandwidth_gbps.values())
    assert first.copy_gbps == first.bandwidth_gbps["copy"]
    for name in PATTERNS:
        assert f"{name} = " in first.method
    # one line per probe while measuring (minutes on a GPU), between a first and a last line
    probes = [ln for ln in lines if " via " in ln]
    assert sum(" via torch.mm" not in ln for ln in probes) == 10  # fill 2, copy 2, add 2, read 4 probes
    assert sum(" via torch.mm" in ln for ln in probes) == len(first.matmul_tflops)
    assert lines[0].startswith("ceilings: measuring") and lines[-1].startswith("ceilings: done")
    # each ceiling keeps its own interval, and the load it was measured under
    for name, (lo, hi) in first.bandwidth_ci_gbps.items():
        assert lo <= first.bandwidth_gbps[name] <= hi
    assert set(first.conditions) == {"start", "end"} and "loadavg_1m" in first.conditions["start"]
    again = measure_ceilings(torch.device("cpu"), cache_dir=tmp_path, progress=lines.append)
    assert again.cached and again.bandwidth_gbps == first.bandwidth_gbps
    assert again.bandwidth_ci_gbps == first.bandwidth_ci_gbps and again.conditions == first.conditions
    n_lines = len(lines)
    measure_ceilings(torch.device("cpu"), cache_dir=tmp_path, progress=lines.append)
    assert len(lines) == n_lines  # a cached read is silent
    fresh = measure_ceilings(torch.device("cpu"), cache_dir=tmp_path, refresh=True, progress=None)
    assert not fresh.cached and fresh.measured_at >= first.measured_at


def test_a_cache_without_intervals_is_measured_again(tmp_path, monkeypatch):
    """A cache written before ceilings kept their spread and load (the one that called a case at 108% a
    model error) is not trusted: it is measured again."""
    monkeypatch.setitem(ceil_mod._CPU, "copy_bytes", 4 << 20)
    monkeypatch.setitem(ceil_mod._CPU, "matmul_n", 64)
    monkeypatch.setitem(ceil_mod._CPU, "slow_matmul_n", 32)
    first = measure_ceilings(torch.device("cpu"), cache_dir=tmp_path, progress=None)
    (path,) = tmp_path.glob("ceilings-*.json")
    data = json.loads(path.read_text())
    for key in ("bandwidth_ci_gbps", "matmul_ci_tflops", "conditions"):
        del data[key]
    path.write_text(json.dumps(data))
    again = measure_ceilings(torch.device("cpu"), cache_dir=tmp_path, progress=None)
    assert not again.cached and again.conditions and first.cached is False


def test_the_compute_ceiling_is_the_best_of_its_shapes(monkeypatch):
    """One square GEMM understates the roof (the H200 ran a long-K GEMM 17% faster than 8192^3): the ceiling is
    the fastest of the shapes tried, and the line says which won and what the others reached."""
    calls = iter([100.0, 50.0, 80.0])  # µs for each shape's median, in order: the second is the fastest
    monkeypatch.setattr(ceil_mod, "_median_us", lambda fn, dev, cfg: (next(calls), [1.0, 1e9], "host"))
    (rate, ci, method, shape), tried = ceil_mod._best_gemm(
        torch.device("cpu"), ((64, 64, 64), (32, 32, 256), (64, 32, 64)), None,
        lambda rows, cols, gen: torch.randn(rows, cols, generator=gen), torch.mm)
    assert shape == (32, 32, 256) and rate == pytest.approx(2 * 32 * 32 * 256 / 50.0 / 1e6)
    assert method == "host" and ci[0] <= rate <= ci[1]
    assert tried.startswith(" (best of 3; 64^3 ") and "64x32x64" in tried
