"""Who gets benchmarked for a kernel on a device: its backends, eager torch, torch.compile and peers.

Each provider is a frozen record saying whether it can run here and, if not, why; the benchmark
reports the ones that cannot with their reason instead of dropping them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.spec.imports import module_available, resolve_import
from harness.spec.model import Spec
from harness.target.device import Device
from harness.target.resolve import BackendStatus


@dataclass(frozen=True)
class Provider:
    name: str          # "triton", "cuda", "reference", "torch.compile", "liger", ...
    backend: str       # backend name, "reference" or "peer"
    role: str          # "candidate" | "baseline" | "peer"
    impl: str          # import path ("" for torch.compile: it wraps the reference)
    runnable: bool
    reason: str = ""

    def load(self, spec: Spec) -> Callable:
        if self.name == "torch.compile":
            return compiled(resolve_import(spec.reference))
        return resolve_import(self.impl)


def compiled(fn: Callable, backend="inductor") -> Callable:
    """torch.compile of ``fn`` for one job, from an empty cache. Dynamo keys its cache by code object and, past
    its recompile limit (8 guards a code object), runs the function eagerly with no more than a warning: one
    process timing a reference at 9 shapes, or the backward's one wrapper (harness.bench.gradspec) of 9 cases,
    reported eager times as torch.compile's (on the H200, examples/liger's rms_norm bwd 1044.0 us against eager's
    1045.8). Reset here, a job compiles its own shape; a limit hit all the same raises instead."""
    import torch

    torch._dynamo.reset()
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    return torch.compile(fn, backend=backend, dynamic=False)


def providers_for(spec: Spec, device: Device, statuses: list[BackendStatus]) -> list[Provider]:
    """The candidate is the first backend in fallback order that can be *timed* here."""
    out, candidate = [], None
    for s in statuses:
        if s.backend == "reference":
            continue
        runnable, reason = s.runnable, s.reason
        # a distributed spec's torch-level backends run on a CPU as anywhere: their figures there are gloo's
        torch_level = spec.distributed is not None and "triton" not in spec.backends[s.backend].requires
        if runnable and device.interpreted and not torch_level:
            runnable, reason = False, "the Triton interpreter is a correctness tool: its timings mean nothing"
        role = "peer"
        if runnable and candidate is None and s.backend in spec.fallback:
            candidate, role = s.backend, "candidate"
        out.append(Provider(s.backend, s.backend, role, spec.backends[s.backend].impl, runnable, reason))
    ref_role = "candidate" if candidate is None else "baseline"
    out.append(Provider("reference", "reference", ref_role, spec.reference, True))
    compile_ok, compile_reason = _compile_available(device)
    if spec.distributed is not None:
        compile_ok, compile_reason = False, "a collective: torch.compile of the reference would time the same call"
    out.append(Provider("torch.compile", "reference", "baseline", "", compile_ok, compile_reason))
    for p in spec.peers.values():
        missing = [m for m in p.requires if not module_available(m)]
        reason = f"module {', '.join(missing)} not importable" if missing else ""
        out.append(Provider(p.name, "peer", "peer", p.impl, not missing, reason))
    return out


def _compile_available(device: Device) -> tuple[bool, str]:
    if device.is_gpu and not module_available("triton"):
        return False, "torch.compile on a GPU needs triton"
    return True, ""
