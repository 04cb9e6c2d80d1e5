"""Measured ceilings of the machine a run is on: copy bandwidth and dense matmul rate.

Rooflines are built on these, never on datasheet figures; the datasheet figure, where known, is
shown beside as a reference (``Ceilings.datasheet``, the same keys as the measured ones). Results
are cached as JSON per device name + driver + torch version, so a run measures them once.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.clocks import nvml_snapshot
from harness.engine import TimingConfig, measure
from harness.environment import cpu_model, driver_version, resolve_device
from harness.stats import summarize

# Vendor datasheet figures (dense, no sparsity), keyed by torch's device name. References only.
DATASHEET = {
    "NVIDIA H200": {"copy_gbps": 4800.0,
                    "matmul_tflops": {"bf16": 989.0, "fp16": 989.0, "tf32": 494.7, "fp32": 67.0}},
    "NVIDIA H100 80GB HBM3": {"copy_gbps": 3350.0},
    "NVIDIA A100-SXM4-80GB": {"copy_gbps": 2040.0, "matmul_tflops": {"bf16": 312.0}},
}
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}
_GPU = {"copy_bytes": 1 << 30, "matmul_n": 8192,
        "copy_cfg": TimingConfig(min_samples=10, max_samples=200, min_time_s=0.05, timeout_s=5.0),
        "matmul_cfg": TimingConfig(min_samples=5, max_samples=50, min_time_s=0.1, timeout_s=6.0)}
_CPU = {"copy_bytes": 256 << 20, "matmul_n": 2048, "slow_matmul_n": 512, "slow_call_limit_s": 0.5,
        "copy_cfg": TimingConfig(min_samples=5, max_samples=20, min_time_s=0.1, timeout_s=3.0),
        "matmul_cfg": TimingConfig(min_samples=3, max_samples=10, min_time_s=0.1, timeout_s=3.0)}


@dataclass(frozen=True)
class Ceilings:
    device: str
    driver: str
    copy_gbps: float                 # device-to-device copy, bytes read + bytes written
    matmul_tflops: dict              # dtype -> TFLOP/s ("bf16", "fp16", "tf32", "fp32")
    datasheet: dict                  # datasheet figures, same keys ({} when the device is not listed)
    method: str
    measured_at: str
    cached: bool


def _driver(dev: torch.device) -> str:
    if dev.type != "cuda":
        return "n/a (cpu)"
    return driver_version(nvml_snapshot(dev)) or "unknown"


def _cache_path(cache_dir, key: dict) -> Path:
    root = Path(cache_dir) if cache_dir is not None else Path.home() / ".cache" / "kernel-harness"
    slug = re.sub(r"[^A-Za-z0-9]+", "-", key["device"]).strip("-").lower()[:40]
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return root / f"ceilings-{slug}-{digest}.json"


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


def _median_us(fn, dev, cfg) -> tuple[float, str]:
    m = measure(fn, device=dev, config=cfg)
    return summarize(m.samples_us).median, m.method


def _copy_gbps(dev, sizes) -> tuple[float, str]:
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    n = sizes["copy_bytes"] // torch.empty((), dtype=dtype).element_size()
    src = torch.randn(n, dtype=dtype, device=dev)
    dst = torch.empty_like(src)
    median, method = _median_us(lambda: dst.copy_(src), dev, sizes["copy_cfg"])
    nbytes = 2 * src.numel() * src.element_size()
    note = f"copy: {nbytes // 2} bytes of {str(dtype)[6:]}, GB/s = (read + written) / median ({method})"
    return nbytes / median / 1e3, note


def _matmul_tflops(dev, sizes) -> tuple[dict, list[str]]:
    out, notes = {}, []
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
                        continue
            gen = torch.Generator(device=dev).manual_seed(0)
            a = torch.randn(n, n, dtype=dtype, device=dev, generator=gen)  # random: zeros run faster
            b = torch.randn(n, n, dtype=dtype, device=dev, generator=gen)
            c = torch.empty(n, n, dtype=dtype, device=dev)
            median, method = _median_us(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), dev, sizes["matmul_cfg"])
            out[name] = 2.0 * n ** 3 / median / 1e6
            notes.append(f"{name}: {n}^3 torch.mm on random normal data ({method})")
            del a, b, c  # free before the next dtype's buffers
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    finally:
        torch.set_float32_matmul_precision(previous)
    return out, notes


def measure_ceilings(device=None, *, cache_dir=None, refresh: bool = False) -> Ceilings:
    """Copy bandwidth and matmul TFLOP/s of ``device`` (default: the current GPU, else the CPU)."""
    dev = resolve_device(device)
    name = torch.cuda.get_device_properties(dev).name if dev.type == "cuda" else cpu_model()
    key = {"device": name, "driver": _driver(dev), "torch": torch.__version__}
    path = _cache_path(cache_dir, key)
    if not refresh and (hit := _load(path, key)) is not None:
        return hit
    sizes = _GPU if dev.type == "cuda" else _CPU
    copy_gbps, copy_note = _copy_gbps(dev, sizes)
    if not math.isfinite(copy_gbps):
        # An idle GPU ramps its clock during the first copies; those samples are dropped as throttled
        # and can leave none. Measure again, now that the clock is up.
        copy_gbps, copy_note = _copy_gbps(dev, sizes)
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    tflops, notes = _matmul_tflops(dev, sizes)
    ceilings = Ceilings(
        device=name, driver=key["driver"], copy_gbps=copy_gbps, matmul_tflops=tflops,
        datasheet=DATASHEET.get(name, {}),
        method="; ".join([f"median of the timing engine's cold samples; {copy_note}", *notes,
                          "datasheet figures are vendor references, not measurements"]),
        measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        cached=False,
    )
    if math.isfinite(copy_gbps) and all(math.isfinite(v) for v in tflops.values()):
        _save(path, key, ceilings)  # never cache a failed measurement
    return ceilings
