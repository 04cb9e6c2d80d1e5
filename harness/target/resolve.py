"""Backend resolution: for a device, which backend of a kernel runs, and why each other one does not."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from harness.spec.archs import parse_rule
from harness.spec.imports import module_available
from harness.spec.model import Backend, Spec
from harness.target.device import Device
from harness.target.tools import tool_available


@dataclass(frozen=True)
class BackendStatus:
    kernel: str
    backend: str
    arch: str
    runnable: bool
    reason: str          # why it cannot run ("" when it can)
    selected: bool = False


def is_cuda_cpp(backend: Backend) -> bool:
    """A backend built from CUDA C++ (a `source` for nvcc, or nvcc among its tools): NVIDIA-only by nature."""
    return backend.source is not None or "nvcc" in backend.tools


def check_backend(spec: Spec, name: str, device: Device) -> tuple[bool, str]:
    if name == "reference":
        return True, ""
    b = spec.backends[name]
    if device.vendor == "amd" and is_cuda_cpp(b):  # said before the arch rules: this is the reason that counts
        return False, f"CUDA C++ backend (nvcc): not applicable on AMD ({device.arch})"
    if b.arch and not any(parse_rule(r).matches(device.arch) for r in b.arch):
        hint = " (AMD GPUs need gfx942, gfx950 or rocm there)" if device.vendor == "amd" else ""
        return False, f"architecture {device.arch} is outside {', '.join(b.arch)}{hint}"
    missing = [m for m in b.requires if not module_available(m)]
    if missing:
        return False, f"module {', '.join(missing)} not importable"
    tools = [t for t in b.tools if not tool_available(t)]
    if tools:
        return False, f"tool {', '.join(tools)} not found"
    if b.build and not device.fake:
        error = _build(b.build, device.torch_device)
        if error:
            return False, f"build failed: {error}"
    return True, ""


@functools.cache
def _build(path: str, torch_device: str) -> str:
    from harness.spec.imports import resolve_import

    try:
        resolve_import(path)()
    except Exception as exc:  # a build that fails makes the backend fall back, it never aborts the run
        text = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {text[-1] if text else ''}"[:300]
    return ""


def resolve(spec: Spec, device: Device) -> list[BackendStatus]:
    """Every backend of the spec (fallback order first), with the one that runs marked ``selected``."""
    order = list(spec.fallback) + [b for b in list(spec.backends) + ["reference"] if b not in spec.fallback]
    statuses, chosen = [], None
    for name in order:
        ok, reason = check_backend(spec, name, device)
        select = ok and chosen is None and name in spec.fallback
        chosen = name if select else chosen
        statuses.append(BackendStatus(spec.name, name, device.arch, ok, reason, select))
    return statuses


def describe(statuses: list[BackendStatus]) -> str:
    """One line: what runs, what fell back and why."""
    ran = next((s for s in statuses if s.selected), None)
    skipped = [f"{s.backend} ({s.reason})" for s in statuses if not s.runnable]
    head = f"{statuses[0].kernel} on {statuses[0].arch}: runs {ran.backend if ran else 'nothing'}"
    return head + (f"; fell back past {', '.join(skipped)}" if skipped else "")
