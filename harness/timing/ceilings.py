"""Measured ceilings of the machine a run is on: memory bandwidth by traffic mix, and dense matmul rate.

Memory bandwidth depends on the mix of reads and writes (HBM streams a write-only fill slower than a
copy, and a read-heavy mix faster), so it is measured for four patterns (write only, 1:1 copy, 2 reads :
1 write, read only) and a kernel's roofline uses the bandwidth at its own read fraction
(`memory_ceiling`). Rooflines are built on these, never on datasheet figures; the datasheet figure, where
known, is shown beside as a reference (``Ceilings.datasheet``, the same keys as the measured ones).
Results are cached as JSON per device name + driver + torch version (``~/.cache/kernel-harness``), so a
run measures them once; ``refresh=True`` (``bench --refresh-ceilings``) measures again. Each ceiling keeps
its own spread (the bootstrap 95% interval of the winning probe's median) and the load the device was
under while it was measured (NVML utilisation, other processes and clocks on a GPU; the load average on a
CPU), so a report can say how far to trust it and a roofline verdict can allow for its noise.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.timing import clocks
from harness.timing.clocks import nvml_snapshot
from harness.timing.engine import TimingConfig, measure
from harness.timing.environment import cpu_model, driver_version, resolve_device
from harness.timing.stats import summarize

# Vendor datasheet figures (dense, no sparsity), keyed by torch's device name. References only.
DATASHEET = {
    "NVIDIA H200": {"copy_gbps": 4800.0,
                    "matmul_tflops": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.7, "fp32": 67.0, "fp8": 1979.0}},
    "NVIDIA H100 80GB HBM3": {"copy_gbps": 3350.0},
    "NVIDIA A100-SXM4-80GB": {"copy_gbps": 2040.0, "matmul_tflops": {"bf16": 312.0}},
}
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}
# The compute ceiling is the best of a few dense GEMM shapes (M, N, K), as each bandwidth pattern is the best
# of several probes: one square shape alone understates it (the H200 ran 8192^3 at 710 TFLOP/s in bf16 and
# 4096 x 4096 x 14336 at 830 in the same run, reports/h200/experiments/ceilings/), and a kernel measured above
# its roof reads as a model error. Under a power cap the long GEMMs run at a lower clock than a short one: on the
# H200 cuBLAS ran 4096^3 at 776 TFLOP/s in bf16 where the three longer shapes made 718-737 (reports/h200/, 2026-12-06).
_GPU = {"copy_bytes": 1 << 30, "matmul_n": 8192,
        "matmul_shapes": ((8192, 8192, 8192), (4096, 4096, 16384), (4096, 16384, 4096), (4096, 4096, 4096)),
        "copy_cfg": TimingConfig(min_samples=10, max_samples=200, min_time_s=0.05, timeout_s=5.0),
        "matmul_cfg": TimingConfig(min_samples=5, max_samples=50, min_time_s=0.1, timeout_s=6.0)}
_CPU = {"copy_bytes": 256 << 20, "matmul_n": 2048, "slow_matmul_n": 512, "slow_call_limit_s": 0.5,
        "copy_cfg": TimingConfig(min_samples=5, max_samples=20, min_time_s=0.1, timeout_s=3.0),
        "matmul_cfg": TimingConfig(min_samples=3, max_samples=10, min_time_s=0.1, timeout_s=3.0)}


# Traffic patterns: name -> (fraction of the bytes moved that are reads, the mix). Each pattern is timed
# with several probes (_bandwidth_gbps) and the fastest counts: a measured ceiling is the best this machine
# was seen to do, and no single library op is the fastest way to stream every mix.
PATTERNS = {
    "fill": (0.0, "write only"),
    "copy": (0.5, "1 read : 1 write"),
    "add": (2 / 3, "2 reads : 1 write"),
    "read": (1.0, "read only"),
}


@dataclass(frozen=True)
class Ceilings:
    device: str
    driver: str
    copy_gbps: float                 # device-to-device copy, bytes read + bytes written
    bandwidth_gbps: dict             # PATTERNS name -> GB/s (bytes read + bytes written)
    matmul_tflops: dict              # dtype -> TFLOP/s ("bf16", "fp16", "tf32", "fp32"; "fp8" where it exists)
    datasheet: dict                  # datasheet figures, same keys ({} when the device is not listed)
    method: str
    measured_at: str
    cached: bool
    bandwidth_ci_gbps: dict = field(default_factory=dict)  # PATTERNS name -> [lo, hi]: 95% CI of the median
    matmul_ci_tflops: dict = field(default_factory=dict)   # dtype -> [lo, hi]
    conditions: dict = field(default_factory=dict)         # "start" / "end" -> load_snapshot() while measuring


Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _driver(dev: torch.device) -> str:
    if dev.type != "cuda":
        return "n/a (cpu)"
    return driver_version(nvml_snapshot(dev)) or "unknown"


def cache_path(cache_dir, key: dict, kind: str = "ceilings") -> Path:
    """Where a measurement keyed by ``key`` (its ``device`` among the fields) is cached: one file per key."""
    root = Path(cache_dir) if cache_dir is not None else Path.home() / ".cache" / "kernel-harness"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", key["device"]).strip("-").lower()[:40]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return root / f"{kind}-{slug}-{digest}.json"


def _load(path: Path, key: dict) -> Ceilings | None:
    try:
        data = json.loads(path.read_text())
        if data.get("key") != key:
            return None
        fields = {f.name for f in dataclasses.fields(Ceilings)} - {"cached"}
        return Ceilings(**{k: data[k] for k in fields}, cached=True)
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable or from another schema: measure again


def _save(path: Path, key: dict, ceilings: Ceilings) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"key": key, **{k: v for k, v in dataclasses.asdict(ceilings).items() if k != "cached"}}
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


def load_snapshot(dev: torch.device) -> dict:
    """How busy the machine is right now: on a GPU, NVML utilisation, the other processes on the device and
    the clocks; everywhere, the host's load average. A ceiling measured under load is too low, and every
    kernel judged against it looks better than it is."""
    out: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        out["loadavg_1m"], out["loadavg_5m"], _ = (round(v, 2) for v in os.getloadavg())
    except (AttributeError, OSError):
        out["loadavg_1m"] = None
    out["cpu_cores_usable"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if dev.type != "cuda":
        return out
    snap = nvml_snapshot(dev)
    out.update({k: snap[k] for k in ("nvml", "sm_clock_mhz", "sm_clock_max_mhz", "mem_clock_mhz",
                                     "power_draw_w", "temperature_c", "clock_event_reasons") if k in snap})
    handle, _ = clocks.nvml_handle(dev)
    if handle is None:
        return out
    try:
        rates = clocks.pynvml.nvmlDeviceGetUtilizationRates(handle)
        out["gpu_util_pct"], out["mem_util_pct"] = int(rates.gpu), int(rates.memory)
    except Exception as exc:  # NVMLError subclasses vary by version; a missing field is recorded as such
        out["gpu_util_pct"] = f"unavailable: {exc}"
    try:
        procs = clocks.pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        out["other_processes"] = sorted({int(p.pid) for p in procs} - {os.getpid()})
    except Exception as exc:
        out["other_processes"] = f"unavailable: {exc}"
    return out


def _ci(lo: float, hi: float) -> list | None:
    return [lo, hi] if math.isfinite(lo) and math.isfinite(hi) and lo > 0 and hi > 0 else None


def _median_us(fn, dev, cfg) -> tuple[float, list | None, str]:
    """Median µs of ``fn``, the 95% interval of that median (None when it has none), and the timing method."""
    m = measure(fn, device=dev, config=cfg)
    st = summarize(m.samples_us)
    return st.median, _ci(st.median_ci_lo, st.median_ci_hi), m.method


def _bandwidth_gbps(dev, sizes, progress: Progress | None = None) -> tuple[dict, dict, str]:
    """GB/s of each traffic pattern (its fastest probe) and that probe's interval, over buffers of
    sizes["copy_bytes"] each."""
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    n = sizes["copy_bytes"] // torch.empty((), dtype=dtype).element_size()
    gen = torch.Generator(device=dev).manual_seed(0)
    a = torch.randn(n, dtype=dtype, device=dev, generator=gen)
    b = torch.randn(n, dtype=dtype, device=dev, generator=gen)
    c = torch.empty_like(a)
    rows = a.view(-1, 4096)  # n is a multiple of 4096: copy_bytes is a power of two
    vec = b[:4096]
    nbytes = n * a.element_size()
    probes = {
        "fill": {"fill_": lambda: c.fill_(1.0), "zero_": lambda: c.zero_()},
        "copy": {"copy_": lambda: c.copy_(a), "neg": lambda: torch.neg(a, out=c)},
        "add": {"add": lambda: torch.add(a, b, out=c), "maximum": lambda: torch.maximum(a, b, out=c)},
        # torch's reductions read at 4.27 TB/s on the H200 where attention's decode streamed its KV cache at 4.5
        # (reports/h200/, 2026-12-06); cuBLAS's GEMV is another streaming read
        "read": {"sum": lambda: torch.sum(a), "amax": lambda: torch.amax(a), "row sums": lambda: rows.sum(dim=1),
                 "gemv": lambda: torch.mv(rows, vec)},
    }
    moved = {"fill": nbytes, "copy": 2 * nbytes, "add": 3 * nbytes, "read": nbytes}
    out, spread, won, method = {}, {}, [], ""
    for name, fns in probes.items():
        best = None
        for label, fn in fns.items():
            t0 = time.monotonic()
            median, ci, method = _median_us(fn, dev, sizes["copy_cfg"])
            if not math.isfinite(median):
                # An idle GPU ramps its clock during the first runs; those samples are dropped as throttled
                # and can leave none. Measure again, now that the clock is up.
                median, ci, method = _median_us(fn, dev, sizes["copy_cfg"])
            gbps = moved[name] / median / 1e3
            ci_gbps = [moved[name] / ci[1] / 1e3, moved[name] / ci[0] / 1e3] if ci else None
            if progress:
                progress(f"ceilings: {name} ({PATTERNS[name][1]}) via {label}: {_rate(gbps, ci_gbps, 'GB/s')} "
                         f"({time.monotonic() - t0:.1f} s)")
            if math.isfinite(gbps) and (best is None or gbps > best[0]):
                best = (gbps, label, ci_gbps)
        out[name] = best[0] if best else math.nan
        if best and best[2]:
            spread[name] = best[2]
        won.append(f"{name} = {PATTERNS[name][1]}: {', '.join(fns)} (fastest: {best[1] if best else 'none'})")
    note = (f"bandwidth: {nbytes} bytes of {str(dtype)[6:]} per buffer, GB/s = (read + written) / median "
            f"({method}), the fastest probe of each pattern; " + ", ".join(won))
    return out, spread, note


def _rate(value: float, ci: list | None, unit: str) -> str:
    if not math.isfinite(value):
        return f"no valid samples ({unit})"
    return f"{value:,.4g} {unit}" + (f" [{ci[0]:,.4g}, {ci[1]:,.4g}]" if ci else "")


def memory_ceiling(bandwidth: dict, read_fraction: float | None, copy_gbps: float | None = None) -> float | None:
    """The bandwidth (GB/s) a kernel whose traffic is `read_fraction` reads can reach.

    Time per byte is interpolated linearly in the read fraction between the measured patterns (exact at
    each of them; between two, what a kernel mixing their traffic in proportion would take), clamped at
    the ends. Without a read fraction, or without pattern measurements, the copy bandwidth.
    """
    points = sorted((PATTERNS[k][0], v) for k, v in (bandwidth or {}).items()
                    if k in PATTERNS and v and math.isfinite(v) and v > 0)
    if read_fraction is None or not points:
        copy = copy_gbps if copy_gbps is not None else (bandwidth or {}).get("copy")
        return copy if copy and math.isfinite(copy) else None
    f = min(max(read_fraction, points[0][0]), points[-1][0])
    for (f0, g0), (f1, g1) in zip(points, points[1:], strict=False):
        if f0 <= f <= f1:
            w = (f - f0) / (f1 - f0)
            return 1.0 / ((1 - w) / g0 + w / g1)
    return points[0][1]  # a single measured pattern


def _matmul_tflops(dev, sizes, progress: Progress | None = None) -> tuple[dict, dict, list[str]]:
    out, spread, notes = {}, {}, []
    previous = torch.get_float32_matmul_precision()
    try:
        for name, dtype in _DTYPES.items():
            n = sizes["matmul_n"]
            torch.set_float32_matmul_precision("high" if name == "tf32" else "highest")
            if dev.type == "cpu":
                if name == "tf32":
                    continue  # no TF32 on a CPU
                if dtype != torch.float32:
                    n = sizes["slow_matmul_n"]  # CPU half-precision matmul is slow (no AMX/AVX512-BF16)
                    a = torch.randn(n, n, dtype=dtype)
                    t = time.perf_counter()
                    torch.mm(a, a)
                    if time.perf_counter() - t > sizes["slow_call_limit_s"]:
                        notes.append(f"{name}: skipped, one {n}^3 product took over "
                                     f"{sizes['slow_call_limit_s']} s")
                        if progress:
                            progress(f"ceilings: matmul {name}: {notes[-1].split(': ', 1)[1]}")
                        continue
            t0 = time.monotonic()
            shapes = (sizes.get("matmul_shapes") if n == sizes["matmul_n"] else None) or ((n, n, n),)
            (out[name], ci, method, shape), tried = _best_gemm(
                dev, shapes, sizes["matmul_cfg"],
                lambda rows, cols, gen, dtype=dtype: torch.randn(rows, cols, dtype=dtype, device=dev, generator=gen),
                torch.mm)
            if ci:
                spread[name] = ci
            if progress:
                progress(f"ceilings: matmul {name} via torch.mm {_shape(shape)}: "
                         f"{_rate(out[name], ci, 'TFLOP/s')}{tried} ({time.monotonic() - t0:.1f} s)")
            notes.append(f"{name}: torch.mm on random normal data, the best of {', '.join(map(_shape, shapes))} "
                         f"({method})")
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    finally:
        torch.set_float32_matmul_precision(previous)
    if dev.type == "cuda" and torch.cuda.get_device_capability(dev) >= (8, 9):
        _fp8_tflops(dev, sizes, out, spread, notes, progress)
    return out, spread, notes


def _shape(mnk) -> str:
    m, n, k = mnk
    return f"{m}^3" if m == n == k else f"{m}x{n}x{k}"


def _best_gemm(dev, shapes, cfg, make, run, make_b=None) -> tuple[tuple, str]:
    """The fastest of ``run(a [M, K], b [K, N])`` over ``shapes``: ((TFLOP/s, its 95% interval or None,
    the timing method, the shape), a note on the others tried). Operands come from ``make(rows, cols, gen)``
    (b from ``make_b(K, N, gen)`` if given), random: zeros run faster."""
    rates = []
    for m, n, k in shapes:
        gen = torch.Generator(device=dev).manual_seed(0)
        a, b = make(m, k, gen), (make_b or make)(k, n, gen)
        median, ci, method = _median_us(lambda a=a, b=b: run(a, b), dev, cfg)
        flops = 2.0 * m * n * k
        rates.append((flops / median / 1e6, [flops / ci[1] / 1e6, flops / ci[0] / 1e6] if ci else None, method,
                      (m, n, k)))
        del a, b
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    best = max(rates, key=lambda r: r[0])
    others = [f"{_shape(r[3])} {r[0]:,.4g}" for r in rates if r is not best]
    return best, (f" (best of {len(rates)}; {', '.join(others)})" if others else "")


def _fp8_tflops(dev, sizes, out: dict, spread: dict, notes: list, progress: Progress | None) -> None:
    """FP8 (e4m3) dense rate through ``torch._scaled_mm`` (cuBLASLt), per-tensor scales, bf16 output, the
    default (exact, not fast) accumulation: the ceiling an FP8 GEMM's roofline (``compute = "fp8"``) uses."""
    shapes = sizes.get("matmul_shapes") or ((sizes["matmul_n"],) * 3,)
    one = torch.ones((), device=dev)
    t0 = time.monotonic()

    def make(rows, cols, gen):
        return torch.randn(rows, cols, device=dev, generator=gen).to(torch.float8_e4m3fn)

    def make_b(k, n, gen):  # [K, N] column-major, as cuBLASLt wants: made [N, K] and transposed (a view)
        return make(n, k, gen).t()
    try:
        best, tried = _best_gemm(dev, shapes, sizes["matmul_cfg"], make, lambda a, b: torch._scaled_mm(
            a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16), make_b)
    except (RuntimeError, AttributeError) as exc:  # a torch without _scaled_mm, or a cuBLASLt that refuses it
        notes.append(f"fp8: not measured ({str(exc).splitlines()[0][:120]})")
        return
    out["fp8"], ci, method, shape = best
    if ci:
        spread["fp8"] = ci
    if progress:
        progress(f"ceilings: matmul fp8 (e4m3) via torch._scaled_mm {_shape(shape)}: "
                 f"{_rate(out['fp8'], spread.get('fp8'), 'TFLOP/s')}{tried} ({time.monotonic() - t0:.1f} s)")
    notes.append(f"fp8: torch._scaled_mm, e4m3 inputs, per-tensor scales, bf16 output, the best of "
                 f"{', '.join(map(_shape, shapes))} ({method})")


def measure_ceilings(device=None, *, cache_dir=None, refresh: bool = False,
                     progress: Progress | None = _stderr) -> Ceilings:
    """Bandwidth per traffic pattern and matmul TFLOP/s of ``device`` (default: the current GPU, else the CPU).

    A cached measurement is returned unless ``refresh``; a new one reports each probe through ``progress``
    (a line each, to stderr by default: measuring takes minutes)."""
    dev = resolve_device(device)
    name = torch.cuda.get_device_properties(dev).name if dev.type == "cuda" else cpu_model()
    # "probes" names the set measured: a cache from before a probe changed (2: the FP8 rate; 3: the best of
    # several GEMM shapes) is measured again
    key = {"device": name, "driver": _driver(dev), "torch": torch.__version__, "probes": 3}
    path = cache_path(cache_dir, key)
    if not refresh and (hit := _load(path, key)) is not None:
        return hit
    if progress:
        progress(f"ceilings: measuring {name} ({'asked to refresh' if refresh else 'none cached'}); "
                 f"cached in {path} for later runs (bench --refresh-ceilings measures again)")
    t0 = time.monotonic()
    start = load_snapshot(dev)
    sizes = _GPU if dev.type == "cuda" else _CPU
    bandwidth, bandwidth_ci, copy_note = _bandwidth_gbps(dev, sizes, progress)
    copy_gbps = bandwidth["copy"]
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    tflops, tflops_ci, notes = _matmul_tflops(dev, sizes, progress)
    ceilings = Ceilings(
        device=name, driver=key["driver"], copy_gbps=copy_gbps, bandwidth_gbps=bandwidth, matmul_tflops=tflops,
        datasheet=DATASHEET.get(name, {}),
        method="; ".join([f"median of the timing engine's cold samples; {copy_note}", *notes,
                          "datasheet figures are vendor references, not measurements"]),
        measured_at=start["date"],
        cached=False,
        bandwidth_ci_gbps=bandwidth_ci, matmul_ci_tflops=tflops_ci,
        conditions={"start": start, "end": load_snapshot(dev)},
    )
    if progress:
        progress(f"ceilings: done in {time.monotonic() - t0:.0f} s")
    if all(math.isfinite(v) for v in [*bandwidth.values(), *tflops.values()]):
        _save(path, key, ceilings)  # never cache a failed measurement
    return ceilings
