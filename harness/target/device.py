"""Architectures: detecting the current device, parsing a backend's ``arch`` rules, resolving backends.

An architecture key is ``cpu`` or ``sm_<major><minor>`` (``sm_80``, ``sm_90``, ``sm_100``...). A backend's
rules are a list of ``cpu``, ``sm_90``, ``>=sm_80``, ``<sm_100``, ``sm_80..sm_90``; it may run where any
rule matches.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from harness.spec.archs import arch_number, capability_to_arch


@dataclass(frozen=True)
class Device:
    arch: str                       # "cpu" or "sm_90"
    name: str
    torch_device: str               # "cpu" or "cuda:0"
    capability: tuple[int, int] | None = None
    properties: dict = field(default_factory=dict, compare=False)
    fake: bool = False              # made up for --arch / tests: nothing may run on it

    @property
    def is_gpu(self) -> bool:
        return self.arch != "cpu"

    @property
    def interpreted(self) -> bool:
        return self.arch == "cpu"


def fake_device(arch: str) -> Device:
    if arch != "cpu":
        n = arch_number(arch)
        return Device(arch, f"(pretend {arch})", "cuda:0", (n // 10, n % 10), fake=True)
    return Device("cpu", "(pretend cpu)", "cpu", fake=True)


@functools.cache
def detect() -> Device:
    """The device tests and benchmarks run on: the first CUDA device, else the CPU (Triton interpreter)."""
    import torch

    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        idx = torch.cuda.current_device()
        p = torch.cuda.get_device_properties(idx)
        props = {"sm_count": p.multi_processor_count, "total_memory": p.total_memory,
                 "l2_cache_size": getattr(p, "L2_cache_size", None)}
        return Device(capability_to_arch(p.major, p.minor), p.name, f"cuda:{idx}", (p.major, p.minor), props)
    import platform

    return Device("cpu", platform.processor() or platform.machine(), "cpu")
