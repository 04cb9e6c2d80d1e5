"""The device tests and benchmarks run on: an NVIDIA GPU (``sm_90``), an AMD GPU under a ROCm build of torch
(``gfx942``), or the CPU (Triton's interpreter); and pretend devices for ``--arch`` and tests.

The architecture grammar (``cpu``, ``sm_90``, ``gfx942``, rules such as ``>=sm_80`` or ``rocm``) lives in
harness.spec.archs.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

from harness.spec.archs import capability_to_arch, parse_arch, vendor_of


@dataclass(frozen=True)
class Device:
    arch: str                       # "cpu", "sm_90" or "gfx942"
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

    @property
    def vendor(self) -> str:
        """"cpu", "nvidia" or "amd"."""
        return vendor_of(self.arch)


def fake_device(arch: str) -> Device:
    """A pretend device: "sm_90", "gfx942" (also as ROCm names it, "gfx942:sramecc+:xnack-") or "cpu"."""
    if arch == "cpu":
        return Device("cpu", "(pretend cpu)", "cpu", fake=True)
    a = parse_arch(arch)
    if a.vendor == "amd":  # a ROCm build of torch still calls its devices "cuda:N"
        return Device(a.name, f"(pretend {a.name})", "cuda:0", fake=True)
    return Device(a.name, f"(pretend {a.name})", "cuda:0", (a.number // 10, a.number % 10), fake=True)


def rocm_arch(gcn_arch_name: str) -> str:
    """torch's gcnArchName ("gfx942:sramecc+:xnack-") -> the target the matrix and rules use ("gfx942")."""
    return parse_arch(gcn_arch_name).name


@functools.cache
def detect() -> Device:
    """The device tests and benchmarks run on: the first GPU (CUDA, or ROCm where torch.version.hip is set),
    else the CPU (Triton interpreter)."""
    import torch

    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        idx = torch.cuda.current_device()
        p = torch.cuda.get_device_properties(idx)
        props = {"sm_count": p.multi_processor_count, "total_memory": p.total_memory,
                 "l2_cache_size": getattr(p, "L2_cache_size", None)}
        if getattr(torch.version, "hip", None):  # major/minor are ROCm's gfx version, not a CUDA capability
            return Device(rocm_arch(p.gcnArchName), p.name, f"cuda:{idx}", None,
                          {**props, "gcn_arch_name": p.gcnArchName})
        return Device(capability_to_arch(p.major, p.minor), p.name, f"cuda:{idx}", (p.major, p.minor), props)
    import platform

    return Device("cpu", platform.processor() or platform.machine(), "cpu")
