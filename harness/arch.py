"""Architectures: detecting the current device, parsing a backend's ``arch`` rules, resolving backends.

An architecture key is ``cpu`` or ``sm_<major><minor>`` (``sm_80``, ``sm_90``, ``sm_100``...). A backend's
rules are a list of ``cpu``, ``sm_90``, ``>=sm_80``, ``<sm_100``, ``sm_80..sm_90``; it may run where any
rule matches.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
from dataclasses import dataclass, field

_ARCH = re.compile(r"^sm_(\d+)$")
_RULE = re.compile(r"^(>=|<=|>|<)?\s*(cpu|sm_\d+)$")
_RANGE = re.compile(r"^(sm_\d+)\s*\.\.\s*(sm_\d+)$")


class ArchError(ValueError):
    pass


def arch_number(arch: str) -> int:
    m = _ARCH.match(arch)
    if not m:
        raise ArchError(f"not an architecture: {arch!r} (expected cpu or sm_NN, e.g. sm_90)")
    return int(m.group(1))


def capability_to_arch(major: int, minor: int) -> str:
    return f"sm_{major}{minor}"


@dataclass(frozen=True)
class ArchRule:
    text: str

    def matches(self, arch: str) -> bool:
        rng = _RANGE.match(self.text)
        if rng:
            if arch == "cpu":
                return False
            return arch_number(rng.group(1)) <= arch_number(arch) <= arch_number(rng.group(2))
        op, target = _RULE.match(self.text).groups()
        if target == "cpu" or arch == "cpu":
            return op is None and target == arch
        a, b = arch_number(arch), arch_number(target)
        return {None: a == b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]


def parse_rule(text: str) -> ArchRule:
    text = text.strip()
    if _RANGE.match(text) or _RULE.match(text):
        return ArchRule(text)
    raise ArchError(f"bad architecture rule {text!r} (expected cpu, sm_90, >=sm_80, <sm_100 or sm_80..sm_90)")


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


def use_interpreter_if_no_gpu() -> None:
    """Set TRITON_INTERPRET=1 before any kernel module is imported when there is no GPU."""
    if "TRITON_INTERPRET" in os.environ:
        return
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def tool_available(name: str) -> bool:
    if shutil.which(name):
        return True
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    return os.path.exists(os.path.join(cuda_home, "bin", name))
