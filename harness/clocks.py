"""SM clock readings through NVML, one per timing sample, and the throttle filter built on them.

Read-only by design: nothing here sets clocks, power limits or any other device state. When NVML
(the ``pynvml`` module of nvidia-ml-py) is missing or cannot see the device, every reader reports
*why* and returns nothing, and the engine keeps all samples.
"""

from __future__ import annotations

from collections.abc import Sequence

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
                self.read_mhz()
            except Exception as exc:
                self.handle, self.reason = None, f"NVML clock query failed ({exc})"

    @property
    def available(self) -> bool:
        return self.handle is not None

    def read_mhz(self) -> float | None:
        if self.handle is None:
            return None
        return float(pynvml.nvmlDeviceGetClockInfo(self.handle, pynvml.NVML_CLOCK_SM))


def is_throttled(clock_mhz: float | None, max_mhz: float | None, fraction: float) -> bool:
    """True when a reading exists and lies below ``fraction`` of the maximum SM clock."""
    if clock_mhz is None or not max_mhz or max_mhz <= 0:
        return False
    return clock_mhz < fraction * max_mhz


def split_throttled(samples: Sequence[float], clocks: Sequence[float | None], max_mhz: float | None,
                    fraction: float) -> tuple[list[float], list[float], list[float]]:
    """(kept samples, dropped samples, clocks of the kept ones); a missing reading keeps its sample."""
    if len(samples) != len(clocks):
        raise ValueError(f"{len(samples)} samples but {len(clocks)} clock readings")
    kept, dropped, kept_clocks = [], [], []
    for value, clock in zip(samples, clocks):
        if is_throttled(clock, max_mhz, fraction):
            dropped.append(value)
        else:
            kept.append(value)
            if clock is not None:
                kept_clocks.append(clock)
    return kept, dropped, kept_clocks


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
