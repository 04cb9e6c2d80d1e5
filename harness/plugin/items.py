"""The test items a spec becomes: one per kernel x backend x dtype x case, a failing one for a broken spec, and
the op items of :mod:`harness.plugin.op_items` (opcheck per backend x dtype, compile per backend).

A kernel case runs in this process or, with ``--isolate``, in a worker process of the session's pool, so a
crash or hang fails that case only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.plugin.failures import crash_text, reproduce
from harness.plugin.options import KEY as _KEY
from harness.spec.model import RUN_TIERS
from harness.spec.schema import SpecError


class SpecFile(pytest.File):
    def collect(self):
        from harness.correctness.args import case_seed
        from harness.correctness.checks import REFERENCE, reference_can_fail
        from harness.spec.bind import bind
        from harness.spec.load import load as load_spec
        from harness.target.device import detect
        from harness.target.resolve import resolve

        opts = self.config.stash[_KEY]
        rel = _relative(self.path, Path.cwd())
        try:
            spec = bind(load_spec(rel))
        except SpecError as exc:
            yield SpecErrorItem.from_parent(self, name=f"{self.path.stem}[spec]", problems=exc.problems)
            return
        device = detect()
        statuses = {s.backend: s for s in resolve(spec, device)}
        opts["specs"].append((spec, list(statuses.values())))
        from harness.plugin.bench_items import bench_items, wants_bench_items

        if spec.distributed is not None:  # every rank of a process group: items of their own, no op items
            from harness.plugin.distributed_items import distributed_items

            yield from distributed_items(self, spec, _selected(spec, statuses, opts), device, opts["seed"])
            return
        if wants_bench_items(self.config):
            yield from bench_items(self, spec, list(statuses.values()), device, opts["dtypes"])
            return
        for backend, status, dtype, case, name in _selected(spec, statuses, opts):
            if backend == REFERENCE and not reference_can_fail(spec, case):
                continue
            yield KernelCaseItem.from_parent(
                self, name=name, spec=spec, backend=backend, status=status, dtype=dtype, case=case,
                seed=case_seed(spec, dtype, case, opts["seed"]), device=device)
        from harness.plugin.backward_items import backward_items
        from harness.plugin.op_items import op_items

        yield from backward_items(self, spec, statuses, device, opts)
        yield from op_items(self, spec, list(statuses.values()), device, opts)


def _selected(spec, statuses: dict, opts: dict):
    """(backend, status, dtype, case, item name) of every case the options select, in collection order."""
    for backend, status in statuses.items():
        if opts["backends"] and backend not in opts["backends"]:
            continue
        for dtype in spec.dtypes:
            if opts["dtypes"] and dtype not in opts["dtypes"]:
                continue
            for tier in RUN_TIERS[opts["tier"]]:
                for case in spec.cases.get(tier, ()):
                    where = f"{tier}-" if tier in ("full", "huge") else ""
                    yield backend, status, dtype, case, f"{spec.name}[{backend}-{dtype}-{where}{case.id}]"


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


class KernelError(Exception):
    """A kernel (or its reference) raised: the message and the case, without the tensors' frames. ``frames``
    is the traceback as text, whole; :func:`kernel_frames` trims it to the kernel's own code."""

    def __init__(self, message: str, frames: tuple = ()):
        super().__init__(message)
        self.frames = frames


class SpecErrorItem(pytest.Item):
    def __init__(self, *, problems: list[str], **kw):
        super().__init__(**kw)
        self.problems = problems

    def runtest(self) -> None:
        raise SpecError(self.problems)

    def repr_failure(self, excinfo, style=None):
        return "invalid spec:\n" + "\n".join(self.problems)

    def reportinfo(self):
        return self.path, None, self.name


class KernelCaseItem(pytest.Item):
    def __init__(self, *, spec, backend, status, dtype, case, seed, device, **kw):
        super().__init__(**kw)
        self.spec, self.backend, self.status, self.dtype = spec, backend, status, dtype
        self.case, self.seed, self.device = case, seed, device
        self.user_properties += [("kernel", spec.name), ("seed", seed), ("arch", device.arch)]
        tol = spec.tolerance(dtype)
        if tol.loosened:
            self.user_properties.append(("tolerance", f"rtol={tol.rtol:g} atol={tol.atol:g}: {tol.reason}"))

    def _skip_reason(self) -> str | None:
        if not self.status.runnable:
            return f"backend {self.backend} cannot run here: {self.status.reason}"
        tier = self.case.tier
        if tier in ("full", "huge") and self.device.interpreted:
            return f"{tier} cases need a GPU: the Triton interpreter on the CPU would take hours"
        if tier == "huge":
            from harness.correctness.memory import huge_case_fits

            return huge_case_fits(self.spec, self.case, self.dtype, self.device)
        return None

    def runtest(self) -> None:
        from harness.correctness.checks import CaseContext, CheckFailure, callables, checks_for, run_checks

        reason = self._skip_reason()
        if reason:
            pytest.skip(reason)
        ctx = CaseContext(self.spec, self.backend, self.dtype, self.case, self.seed, self.device.arch,
                          self.device.torch_device)
        if _isolating(self.config):
            return self._runtest_isolated(ctx)
        try:
            outcome = run_checks(ctx, *callables(self.spec, self.backend), only=checks_for(self.spec, self.backend))
            error = None
        except CheckFailure:
            raise
        except Exception as exc:  # a crashing kernel: keep its text and frames as text, drop the tensors
            import traceback

            error = KernelError(f"{type(exc).__name__}: {exc}\n{ctx.describe()}",
                                tuple(traceback.extract_tb(exc.__traceback__)))
        finally:
            if self.device.is_gpu:
                import torch

                torch.cuda.empty_cache()
        if error is not None:
            raise error
        self.user_properties.append(("checks", ",".join(outcome.checks)))
        for note in outcome.notes:
            self.user_properties.append(("note", note))

    def _runtest_isolated(self, ctx) -> None:
        from harness.correctness.checks import CheckFailure
        from harness.correctness.tasks import failure_text

        outcome = _isolated_outcome(self)
        if outcome.status != "ok":  # raised, crashed or timed out: the case's failure, the run goes on
            raise KernelError(failure_text(outcome, ctx.describe()))
        result = outcome.value
        if result["status"] == "failed":
            raise CheckFailure(result["check"], result["message"].removeprefix(f"{result['check']}: "))
        self.user_properties.append(("checks", ",".join(result["checks"])))
        for note in result["notes"]:
            self.user_properties.append(("note", note))

    def repr_failure(self, excinfo, style=None):
        from harness.correctness.checks import CaseContext, CheckFailure

        ctx = CaseContext(self.spec, self.backend, self.dtype, self.case, self.seed, self.device.arch,
                          self.device.torch_device)
        exc = excinfo.value
        if isinstance(exc, KernelError) and exc.frames:
            return crash_text(self, exc, exc.frames)
        if isinstance(exc, (CheckFailure, KernelError)):
            return f"{exc}\n{reproduce(self)}"
        return f"{super().repr_failure(excinfo, style='short')}\n{ctx.describe()}\n{reproduce(self)}"

    def reportinfo(self):
        return self.path, None, f"{self.name} seed={self.seed}"


def _isolating(config: pytest.Config) -> bool:
    opts = config.stash[_KEY]
    if opts.get("isolate") is None:
        from harness.target.device import detect
        from harness.workers.pool import isolating

        opts["isolate"] = isolating(config.getoption("isolate"), detect().is_gpu)
    return opts["isolate"]


def _isolated_outcome(item: KernelCaseItem):
    """Run the item's case in the session's worker pool; with several GPUs the next items go out too."""
    from harness.correctness.tasks import case_task

    opts = item.config.stash[_KEY]
    if opts.get("pool") is None:
        from harness.workers.pool import WorkerPool, default_devices

        opts["pool"] = WorkerPool(default_devices())
    pool, pending = opts["pool"], opts.setdefault("pending", {})
    if pool.size > 1:  # shard across the workers, one per GPU: keep each busy with the items that follow
        items = item.session.items
        position = opts.setdefault("positions", {it.nodeid: k for k, it in enumerate(items)})
        start = position.get(item.nodeid, len(items))
        for other in items[start:start + 4 * pool.size]:
            if len(pending) >= 2 * pool.size:
                break
            if isinstance(other, KernelCaseItem) and other.nodeid not in pending and not other._skip_reason():
                pending[other.nodeid] = pool.submit(case_task(other.spec, other.backend, other.dtype, other.case,
                                                              other.seed))
    ticket = pending.pop(item.nodeid, None)
    if ticket is None:
        ticket = pool.submit(case_task(item.spec, item.backend, item.dtype, item.case, item.seed))
    return pool.wait(ticket)


def _close_pool(config: pytest.Config) -> None:
    opts = config.stash.get(_KEY, None)
    if opts and opts.get("pool") is not None:
        opts.pop("pool").close()
    if opts:
        from harness.plugin.distributed_items import close_groups

        close_groups(opts)
