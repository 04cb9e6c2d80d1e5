"""The benchmark: ``load_specs -> resolve -> plan -> run -> render``, each a small typed step.

Every provider's output is checked against the upcast reference before it is timed: a wrong provider
is reported as wrong, never as the fastest. Each finished case is appended to ``cases.jsonl`` at once,
so an interrupted run leaves a renderable partial result.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable

import torch

from harness.bench.plan import Job
from harness.bench.recheck import ProbedCheck
from harness.bench.roofline import implausible, roofline
from harness.correctness.args import case_seed, make_args
from harness.correctness.checks import (
    CaseContext,
    CheckFailure,
    ReferenceCache,
    TimedCheck,
    checks_for,
    oracle_path,
    reference_key,
    run_checks,
)
from harness.results.model import CaseResult
from harness.spec.imports import resolve_import
from harness.target.device import Device


def verify(job: Job, fn: Callable, device: Device, reference: ReferenceCache, seed: int) -> str:
    """'' when the provider passes the generated tests' checks at its bench case, else the failing check's line.

    The one correctness path (:func:`harness.correctness.checks.run_checks`): guards, poison, layout, NaN/Inf,
    numerics, inputs and determinism, as a generated test runs them, against one reference call shared by the
    case's providers. The eager reference, timed as a baseline, gets the reference backend's checks."""
    ctx = CaseContext(job.spec, job.provider.name, job.dtype, job.case, seed, device.arch, device.torch_device)
    ref_fn = resolve_import(oracle_path(job.spec, job.provider.name))
    try:
        run_checks(ctx, fn, ref_fn, reference=reference, only=checks_for(job.spec, job.provider.name))
    except CheckFailure as exc:
        return str(exc).partition("\n")[0]
    return ""


def timed_check(job: Job, args, device: Device, reference: ReferenceCache, seed: int) -> ProbedCheck | None:
    """The re-check of the calls timed with ``args``, against the reference :func:`verify` computed, some of them
    on new input values (harness.bench.recheck); None where no check needed a reference (the eager reference is
    not compared with itself)."""
    ctx = CaseContext(job.spec, job.provider.name, job.dtype, job.case, seed, device.arch, device.torch_device)
    ref = reference.peek(reference_key(ctx))
    if ref is None:
        return None
    ref_fn = resolve_import(oracle_path(job.spec, job.provider.name))
    return ProbedCheck(TimedCheck(job.spec, job.dtype, job.case, args, ref), ref_fn, device.torch_device, seed)


def forward_job(job: Job, device: Device, reference: ReferenceCache, seed: int):
    """(the timed call, its TimedOutputs, '' or why the provider failed before timing) of a fwd job."""
    fn = job.provider.load(job.spec)
    wrong = verify(job, fn, device, reference, seed)
    if wrong:
        return None, None, wrong
    args = make_args(job.spec, job.case, job.dtype, device.torch_device, seed)
    timed = timed_check(job, args, device, reference, seed)
    call = functools.partial(fn, **args.kwargs())
    return (timed.wrap(call) if timed else call), timed, ""


def run_job(job: Job, device: Device, ceilings, timing, reference: ReferenceCache, seed_base: int = 0) -> CaseResult:
    from harness.bench.backward import backward_job
    from harness.bench.modes import mode_env, mode_spec
    from harness.timing.engine import measure
    from harness.timing.memory import peak_bytes
    from harness.timing.stats import summarize

    spec, case = job.spec, job.case
    base = _base(job, seed_base)
    seed = base["seed"]
    if not job.provider.runnable:
        return _empty(base, "skipped", job.provider.reason)
    try:
        prepare = forward_job if job.mode == "fwd" else backward_job
        call, outputs, wrong = prepare(job, device, reference, seed)
        if wrong:
            return _empty(base, "wrong", f"failed the correctness check before timing: {wrong}")
        m = measure(call, device=device.torch_device, config=timing, outputs=outputs)
        peak = peak_bytes(call, device.torch_device)
    except CheckFailure as exc:  # a timed call's outputs were wrong: the case is, whatever its speed
        return _empty(base, "wrong", str(exc)[:400])
    except Exception as exc:  # one provider's failure never takes the run down
        text = str(exc).strip().splitlines()
        first = f"{type(exc).__name__}: {text[0] if text else ''}"[:400]
        if out_of_memory(exc):  # the shape, not the kernel: it needs more memory than this machine has
            return _empty(base, "skipped", f"does not fit in this machine's memory ({first})"[:400])
        return _empty(base, "error", first)
    st = summarize(m.samples_us, seed=seed)
    # a backward's traffic is over the gradients' tensors too: the grad spec's symbols beside the forward's
    env = mode_env(spec, case, job.dtype, job.mode)
    roof = roofline(mode_spec(spec, job.mode), env, st.median, ceilings, job.dtype, (st.median_ci_lo, st.median_ci_hi))
    if case.tier == "cpu":  # the spec's roofline target is a GPU kernel's: eager torch on a host is not judged by it
        roof = {**roof, "target": None, "verdict": "n/a"}
    why = implausible(st.median, roof, ceilings) if device.is_gpu and timing.cold else ""  # a host: caches
    warm = sorted(m.warm_us)[len(m.warm_us) // 2] if m.warm_us else None
    return CaseResult(**base, status="wrong" if why else "ok", reason=why, method=m.method, stop_reason=m.stop_reason,
                      samples_us=tuple(m.samples_us), dropped_us=tuple(m.dropped_us), warm_us=tuple(m.warm_us),
                      stats=st.as_json(), warm_median_us=warm, speedups={}, peak_mem_bytes=peak, **roof,
                      **launch_fields(m.launch))


def launch_fields(launch) -> dict:
    """The CaseResult fields of a measurement's launch overhead (harness.timing.launch.LaunchTimes, or None)."""
    if launch is None:
        return {}
    return dict(host_us=launch.host_us, host_median_us=launch.host_median_us, wall_us=launch.wall_us,
                wall_median_us=launch.wall_median_us, launch=dict(launch.params))


_OOM_TEXT = ("out of memory", "can't allocate memory", "cannot allocate memory")


def out_of_memory(exc: BaseException) -> bool:
    """An allocation the machine could not satisfy: torch's OutOfMemoryError (CUDA), MemoryError, or the CPU
    allocator's RuntimeError once the address-space cap (:func:`cap_address_space`) refuses the request."""
    oom = getattr(torch, "OutOfMemoryError", ())
    if isinstance(exc, MemoryError) or (oom and isinstance(exc, oom)):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OOM_TEXT)


def cap_address_space(fraction: float = 0.85) -> int | None:
    """On a CPU run, limit this process's address space to what it has now plus ``fraction`` of the memory
    available, so a case too large for the machine fails its allocation (a skip, :func:`out_of_memory`) instead
    of waking the kernel's OOM killer, which kills the whole run (a [4, 32, 4096, 4096] fp32 attention score
    matrix is 8.6 GB). Returns the cap in bytes, or None where it cannot be read or set (not Linux)."""
    import resource

    try:
        with open("/proc/self/status") as f:
            vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))
        with open("/proc/meminfo") as f:
            avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = vm + int(fraction * avail)
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        if soft == resource.RLIM_INFINITY or cap < soft:
            resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
        return cap
    except (OSError, ValueError, StopIteration):
        return None


def _base(job: Job, seed_base: int) -> dict:
    spec, case, p = job.spec, job.case, job.provider
    return dict(kernel=spec.name, provider=p.name, backend=p.backend, role=p.role, dtype=job.dtype, case_id=case.id,
                shape=case.values, headline=case.headline, seed=case_seed(spec, job.dtype, case, seed_base),
                mode=job.mode)


def _empty(base: dict, status: str, reason: str) -> CaseResult:
    return CaseResult(**base, status=status, reason=reason, method="", stop_reason="", samples_us=(), dropped_us=(),
                      warm_us=(), stats=None, warm_median_us=None, bytes=None, flops=None, gbps=None, tflops=None,
                      pct_roofline=None, bound=None, ceiling_gbps=None, target=None, verdict="n/a", speedups={})


class Progress:
    """One line per finished case with an ETA from the mean time per case so far."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.start, self.stream = total, 0, time.monotonic(), stream

    def step(self, job: Job, result: CaseResult) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        if result.status == "ok":
            cv = result.stats["cv"]
            spread = f"cv {100 * cv:.2f}%" if cv is not None else "cv n/a"
            what = f"{result.stats['median']:.2f} us (n={result.stats['n']}, {spread}, stop: {result.stop_reason})"
        else:
            what = f"{result.status}: {result.reason[:100]}"
        print(f"[{self.done}/{self.total} eta {eta:5.0f}s] {job.label}: {what}", file=self.stream, flush=True)
