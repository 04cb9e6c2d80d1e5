"""The backward's test items: one per backend x mode (autograd, kernel) x dtype x case x grad-output variant,
named ``<kernel>[bwd-<backend>-<mode>-<dtype>-<case>]`` (``...-expanded`` for broadcast grad outputs), so they
never read as a forward item ``<kernel>[<backend>-<dtype>-<case>]``. They run in this process (a crash fails the
session's item, not a worker's) and report like the forward's: the check, the case, the reproduce command."""

from __future__ import annotations

import pytest

from harness.plugin.failures import crash_text, reproduce
from harness.spec.model import RUN_TIERS


class KernelError(Exception):
    """A backward (or the reference's autograd) raised: its message and frames as text, without the tensors.
    Its own class, not plugin.items', which imports this module: no import cycle."""

    def __init__(self, message: str, frames: tuple = ()):
        super().__init__(message)
        self.frames = frames


def backward_items(parent, spec, statuses: dict, device, opts):
    """Every backward item of a spec with ``[backward]``; a layout the backend must refuse has none (its forward
    items check the refusal)."""
    from harness.correctness.args import case_seed

    if spec.backward is None:
        return
    for backend in spec.backward.backends:
        if opts["backends"] and backend not in opts["backends"] or backend not in statuses:
            continue
        for mode in spec.backward.modes(backend):
            for dtype in spec.dtypes:
                if opts["dtypes"] and dtype not in opts["dtypes"]:
                    continue
                for tier in RUN_TIERS[opts["tier"]]:
                    for k, case in enumerate(spec.cases.get(tier, ())):
                        if spec.must_refuse(backend, case.layout):
                            continue
                        variants = ["case"]
                        # broadcast grad outputs once per shape family: the first edge case and the ci cases
                        if (spec.backward.grad_outputs == "random" and case.layout == "contiguous"
                                and (tier != "edge" or k == 0)):
                            variants.append("expanded")
                        for grads in variants:
                            where = f"{tier}-{case.id}" if tier in ("full", "huge") else case.id
                            suffix = "-expanded" if grads == "expanded" else ""
                            yield BackwardCaseItem.from_parent(
                                parent, name=f"{spec.name}[bwd-{backend}-{mode}-{dtype}-{where}{suffix}]", spec=spec,
                                backend=backend, mode=mode, grads=grads, status=statuses[backend], dtype=dtype,
                                case=case, seed=case_seed(spec, dtype, case, opts["seed"]), device=device)


class BackwardCaseItem(pytest.Item):
    def __init__(self, *, spec, backend, mode, grads, status, dtype, case, seed, device, **kw):
        super().__init__(**kw)
        self.spec, self.backend, self.mode, self.grads, self.status = spec, backend, mode, grads, status
        self.dtype, self.case, self.seed, self.device = dtype, case, seed, device
        self.user_properties += [("kernel", spec.name), ("pass", f"backward-{mode}"), ("seed", seed),
                                 ("arch", device.arch)]

    def _context(self):
        from harness.correctness.backward import BackwardContext
        from harness.correctness.checks import CaseContext

        return BackwardContext(CaseContext(self.spec, self.backend, self.dtype, self.case, self.seed,
                                           self.device.arch, self.device.torch_device), self.mode, self.grads)

    def runtest(self) -> None:
        from harness.correctness.backward import run_backward_checks
        from harness.correctness.registry import CheckFailure

        if not self.status.runnable:
            pytest.skip(f"backend {self.backend} cannot run here: {self.status.reason}")
        if self.case.tier in ("full", "huge") and self.device.interpreted:
            pytest.skip(f"{self.case.tier} cases need a GPU: the Triton interpreter on the CPU would take hours")
        if self.case.tier == "huge":
            from harness.correctness.memory import huge_case_fits

            if reason := huge_case_fits(self.spec, self.case, self.dtype, self.device, backward=True):
                pytest.skip(reason)
        bctx = self._context()
        try:
            outcome, error = run_backward_checks(bctx), None
        except CheckFailure:
            raise
        except Exception as exc:  # a crashing backward: its text and frames, without the tensors
            import traceback

            error = KernelError(f"{type(exc).__name__}: {exc}\n{bctx.describe()}",
                                tuple(traceback.extract_tb(exc.__traceback__)))
        finally:  # the allocator's cache back to the device: a huge case's check reads the free memory
            if self.device.is_gpu:
                import torch

                torch.cuda.empty_cache()
        if error is not None:
            raise error
        self.user_properties.append(("checks", ",".join(outcome.checks)))
        for note in outcome.notes:
            self.user_properties.append(("note", note))

    def repr_failure(self, excinfo, style=None):
        from harness.correctness.registry import CheckFailure

        exc = excinfo.value
        if isinstance(exc, KernelError) and exc.frames:
            return crash_text(self, exc, exc.frames)
        if isinstance(exc, (CheckFailure, KernelError)):
            return f"{exc}\n{reproduce(self)}"
        return f"{super().repr_failure(excinfo, style='short')}\n{self._context().describe()}\n{reproduce(self)}"

    def reportinfo(self):
        return self.path, None, f"{self.name} seed={self.seed}"
