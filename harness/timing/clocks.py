"""What the device itself says about time: SM clock readings (NVML) and kernel timestamps (CUPTI).

- SM clock: one NVML reading per timing sample, and :func:`is_throttled`, the test the engine's sample
  loop applies to each (the one place a sample is judged throttled). Read-only
  by design: nothing here sets clocks, power limits or any other device state. When NVML (the
  ``pynvml`` module of nvidia-ml-py) is missing or cannot see the device, readers say *why* and
  return nothing, and the engine keeps all samples.
- Kernel timestamps: :func:`sample_spans` reads a torch.profiler (kineto) Chrome trace and gives,
  per annotated sample, the span of the GPU activity that sample's ``fn`` launched.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter

try:  # nvidia-ml-py; absent on CPU-only machines
    import pynvml
except Exception as exc:  # any import failure means "no NVML"
    pynvml = None
    _IMPORT_ERROR = f"pynvml not importable ({type(exc).__name__}: {exc})"
else:
    _IMPORT_ERROR = ""

_nvml_ready: bool | None = None
_nvml_error = ""


def _init_nvml() -> str:
    """Initialise NVML once per process; returns "" or the reason it is unusable."""
    global _nvml_ready, _nvml_error
    if pynvml is None:
        return _IMPORT_ERROR
    if _nvml_ready is None:
        try:
            pynvml.nvmlInit()
            _nvml_ready = True
        except Exception as exc:  # NVMLError subclasses vary by version
            _nvml_ready, _nvml_error = False, f"nvmlInit failed ({exc})"
    return "" if _nvml_ready else _nvml_error


def nvml_handle(device) -> tuple[object | None, str]:
    """NVML handle of a torch CUDA device, matched by UUID (survives CUDA_VISIBLE_DEVICES reordering).

    Returns (handle, "") or (None, reason).
    """
    import torch

    err = _init_nvml()
    if err:
        return None, err
    dev = torch.device(device)
    if dev.type != "cuda":
        return None, f"not a CUDA device ({dev})"
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    tried = []
    uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
    if uuid:
        for candidate in dict.fromkeys([uuid, uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"]):
            try:
                return pynvml.nvmlDeviceGetHandleByUUID(candidate), ""
            except Exception as exc:
                tried.append(f"uuid {candidate}: {exc}")
    try:  # torch's own mapping through CUDA_VISIBLE_DEVICES (private, so only a fallback)
        nvml_index = torch.cuda._get_nvml_device_index(index)
        return pynvml.nvmlDeviceGetHandleByIndex(nvml_index), ""
    except Exception as exc:
        tried.append(f"index: {exc}")
    return None, "no NVML handle for the device (" + "; ".join(tried) + ")"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class SmClockReader:
    """Current and maximum SM clock of one device, in MHz; ``available`` says whether it works."""

    def __init__(self, device):
        self.handle, self.reason = nvml_handle(device)
        self.max_mhz: float | None = None
        if self.handle is not None:
            try:
                self.max_mhz = float(pynvml.nvmlDeviceGetMaxClockInfo(self.handle, pynvml.NVML_CLOCK_SM))
                pynvml.nvmlDeviceGetClockInfo(self.handle, pynvml.NVML_CLOCK_SM)
            except Exception as exc:
                self.handle, self.reason = None, f"NVML clock query failed ({exc})"

    @property
    def available(self) -> bool:
        return self.handle is not None

    def read_mhz(self) -> float | None:
        if self.handle is None:
            return None
        try:
            return float(pynvml.nvmlDeviceGetClockInfo(self.handle, pynvml.NVML_CLOCK_SM))
        except Exception:  # one failed reading costs that sample its clock, not the measurement
            return None


class NullClock:
    """Stands in for :class:`SmClockReader` where there is no SM clock to read (a CPU)."""

    available, max_mhz = False, None

    def __init__(self, reason: str):
        self.reason = reason

    def read_mhz(self) -> None:
        return None


def is_throttled(clock_mhz: float | None, max_mhz: float | None, fraction: float) -> bool:
    """True when a reading exists and lies below ``fraction`` of the maximum SM clock."""
    if clock_mhz is None or not max_mhz or max_mhz <= 0:
        return False
    return clock_mhz < fraction * max_mhz


def nvml_snapshot(device) -> dict:
    """Clocks, power limit, temperature and throttle reasons right now, for provenance records."""
    handle, reason = nvml_handle(device)
    if handle is None:
        return {"nvml": f"unavailable: {reason}"}
    out: dict = {"nvml": "ok"}
    queries = {
        "driver_version": lambda: _text(pynvml.nvmlSystemGetDriverVersion()),
        "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "sm_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "mem_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        "mem_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
        "power_draw_w": lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
        "temperature_c": lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        "clock_event_reasons": lambda: hex(_clock_event_reasons(handle)),
    }
    for key, query in queries.items():
        try:
            out[key] = query()
        except Exception as exc:  # a field the driver does not support is left out
            out[key] = f"unavailable: {exc}"
    return out


def _clock_event_reasons(handle) -> int:
    getter = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if getter is None:  # older nvidia-ml-py
        getter = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(getter(handle))


# ----------------------------------------------------------------------------- CUPTI trace spans

SAMPLE_TAG = "kh::sample#"        # record_function around each sample's fn() call
PROLOGUE_TAG = "kh::prologue#"    # ... and around its flush + spin, whose kernels must never count
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_API_CATS = frozenset({"cuda_runtime", "cuda_driver"})


def _span_owner(name: str) -> int | None:
    """Sample index for SAMPLE_TAG names, -1 for prologues, None for anything else."""
    if name.startswith(SAMPLE_TAG) and name[len(SAMPLE_TAG):].isdigit():
        return int(name[len(SAMPLE_TAG):])
    if name.startswith(PROLOGUE_TAG) and name[len(PROLOGUE_TAG):].isdigit():
        return -1
    return None


def _containing(ranges: list, starts: list, t: float, end: float | None = None):
    i = bisect.bisect_right(starts, t) - 1
    if i >= 0 and t <= ranges[i][1] and (end is None or end <= ranges[i][1] + 1e-3):
        return ranges[i][2]
    return None


def sample_spans(trace: dict, count: int, device_index: int | None = None) -> tuple[list, dict]:
    """Per sample j, last end minus first start (us) of the GPU activity fn launched, or None.

    A GPU activity (kernel, memcpy, memset) belongs to the annotated range that launched it, found
    by the first of these that answers:
    1. "op": its External id names the CPU op that launched it, and that op's host start lies in a
       sample or prologue range (both torch's host clock, so exact);
    2. "gpu-annotation": it lies inside the GPU span kineto derives for a range (this names only the
       innermost user annotation, so it misses kernels under fn's own record_function; direct
       launches with no op around them, Triton's, are found here);
    3. "launch-call": its correlation id names the runtime/driver launch call, whose host start lies
       in a range (CUPTI's host timestamps, converted to torch's clock: the last resort).
    Prologue ranges (flush and spin) claim their own kernels, so those never count.
    """
    host, gpu_ann, gpu, ext_ts, api_ts = [], [], [], {}, {}
    for e in trace.get("traceEvents", ()):
        if e.get("ph") != "X" or "ts" not in e:
            continue
        cat, args, ts = e.get("cat", ""), e.get("args") or {}, float(e["ts"])
        end = ts + float(e.get("dur", 0.0))
        owner = _span_owner(e.get("name", ""))
        if owner is not None and cat in ("user_annotation", "gpu_user_annotation"):
            (host if cat == "user_annotation" else gpu_ann).append((ts, end, owner))
        if cat in ("cpu_op", "user_annotation") and "External id" in args:
            ext_ts[int(args["External id"])] = ts
        elif cat in _API_CATS and "correlation" in args:
            api_ts[int(args["correlation"])] = ts
        elif cat in _GPU_CATS:
            if device_index is None or int(args.get("device", device_index)) == device_index:
                gpu.append((ts, end, args))
    host.sort()
    gpu_ann.sort()
    host_starts, ann_starts = [h[0] for h in host], [g[0] for g in gpu_ann]
    first, last, n_ev = [math.inf] * count, [-math.inf] * count, [0] * count
    routes: Counter = Counter()
    for ts, end, args in gpu:
        owner, route = None, "unattributed"
        ext, corr = args.get("External id"), args.get("correlation")
        if ext is not None and int(ext) in ext_ts:
            owner, route = _containing(host, host_starts, ext_ts[int(ext)]), "op"
        if owner is None:
            owner, route = _containing(gpu_ann, ann_starts, ts, end), "gpu-annotation"
        if owner is None and corr is not None and int(corr) in api_ts:
            owner, route = _containing(host, host_starts, api_ts[int(corr)]), "launch-call"
        if owner is None:
            routes["unattributed"] += 1
        elif not 0 <= owner < count:
            routes["prologue"] += 1
        else:
            routes[route] += 1
            first[owner], last[owner] = min(first[owner], ts), max(last[owner], end)
            n_ev[owner] += 1
    spans = [last[j] - first[j] if n_ev[j] else None for j in range(count)]
    # kineto's own per-range GPU span (2 ns wider by construction): a cross-check, reported only
    diffs = [abs(end - ts - 0.002 - spans[o]) for ts, end, o in gpu_ann
             if 0 <= o < count and spans[o] is not None]
    return spans, {"routes": dict(routes), "events_per_sample": dict(Counter(n_ev)),
                   "gpu_annotation_max_diff_us": max(diffs, default=0.0)}
