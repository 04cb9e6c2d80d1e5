"""What the worker processes of :mod:`harness.workers` run, and the parent's side of it.

Only plain data crosses the process boundary (spec path, names, case id, seed, dicts): the worker
reloads the spec and rebuilds the case or job itself, so no spec, tensor or callable is ever pickled,
and a result comes back as JSON-ready dicts.
"""

from __future__ import annotations

import os

from harness.workers.pool import Task, TaskOutcome, split_error

DEVICE = "cpu"  # the torch device this worker owns; set by init_worker


def init_worker(device: str) -> None:
    """Worker initialiser: claim the device and pay for the imports before any task's clock starts."""
    global DEVICE
    from harness.spec.imports import module_available, use_interpreter_if_no_gpu

    use_interpreter_if_no_gpu()
    import torch

    if device.startswith("cuda") and os.environ.get("TRITON_INTERPRET") != "1":
        torch.cuda.set_device(0)  # the pool narrowed CUDA_VISIBLE_DEVICES to this worker's one GPU
        torch.zeros(1, device="cuda:0")  # create the context now, off the first task's clock
        DEVICE = "cuda:0"
    import harness.correctness.checks  # noqa: F401

    if module_available("triton"):
        import triton  # noqa: F401


def _spec(spec_path: str):
    from harness.spec.load import load_cached

    return load_cached(spec_path)


def _find(items, key: str, what: str, attr: str = "id"):
    for item in items:
        if getattr(item, attr) == key:
            return item
    raise LookupError(f"no {what} {key!r}")


def run_case(spec_path: str, backend: str, dtype: str, tier: str, case_id: str, seed: int) -> dict:
    """One generated test item, in the worker: the same checks the in-process path runs."""
    from harness.correctness.checks import CaseContext, CheckFailure, callables, checks_for, run_checks
    from harness.target.device import detect

    spec = _spec(spec_path)
    case = _find(spec.cases.get(tier, ()), case_id, f"{tier} case")
    ctx = CaseContext(spec, backend, dtype, case, seed, detect().arch, DEVICE)
    try:
        outcome = run_checks(ctx, *callables(spec, backend), only=checks_for(spec, backend))
    except CheckFailure as exc:
        return {"status": "failed", "check": exc.check, "message": str(exc), "checks": [], "notes": []}
    finally:
        if DEVICE.startswith("cuda"):
            import torch

            try:
                torch.cuda.empty_cache()
            except Exception:  # a poisoned context fails here too; the kernel's own error is the one to report
                pass
    return {"status": "passed", "check": "", "message": "", "checks": list(outcome.checks),
            "notes": list(outcome.notes)}


def case_task(spec, backend: str, dtype: str, case, seed: int) -> Task:
    return Task("harness.correctness.tasks:run_case",
                dict(spec_path=spec.path, backend=backend, dtype=dtype, tier=case.tier, case_id=case.id, seed=seed),
                f"{spec.name} {backend} {dtype} {case.id}", spec.timeout_s)


def failure_text(outcome: TaskOutcome, context: str) -> str:
    """A failed outcome as a test failure: what happened, the case, then the details."""
    if outcome.status == "error":
        head, frames = split_error(outcome.error)
        return f"{head}\n{context}" + (f"\nin the worker (innermost frames):\n{frames}" if frames else "")
    summary, _, details = outcome.error.partition("\n")
    return f"kernel {summary}\n{context}" + (f"\n{details}" if details else "")
