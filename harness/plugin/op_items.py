"""The kernel as a PyTorch op: per backend x dtype an ``opcheck`` item, per backend one ``compile`` item.

``rmsnorm[triton-bf16-opcheck]`` runs torch.library.opcheck on the op the spec derives (or the spec's own
``[kernel] op``, then the backend is ``op``); ``rmsnorm[triton-fp32-compile]`` compiles a function calling
it with fullgraph=True at three sizes of a dynamic dimension. Both are checks of the catalogue
(:data:`harness.spec.checks.OP_CHECKS`), so a spec's ``[waive]`` may waive them with a reason.
"""

from __future__ import annotations

import pytest

KINDS = ("opcheck", "compile")


def op_items(parent, spec, statuses, device, opts):
    """The items of one spec; the compile item only at the first dtype selected (compiling is the slow part)."""
    dtypes = [d for d in spec.dtypes if not opts["dtypes"] or d in opts["dtypes"]]
    if spec.op:
        selected = next((s for s in statuses if s.selected), None)
        targets = [("op", selected)]
    else:
        targets = [(s.backend, s) for s in statuses if not opts["backends"] or s.backend in opts["backends"]]
    for backend, status in targets:
        for kind in KINDS:
            for dtype in dtypes[:1] if kind == "compile" else dtypes:
                yield OpCheckItem.from_parent(parent, name=f"{spec.name}[{backend}-{dtype}-{kind}]", kind=kind,
                                              spec=spec, backend=backend, status=status, statuses=statuses,
                                              dtype=dtype, device=device, seed=opts["seed"])


class OpCheckItem(pytest.Item):
    def __init__(self, *, kind, spec, backend, status, statuses, dtype, device, seed, **kw):
        super().__init__(**kw)
        self.kind, self.spec, self.backend, self.status, self.statuses = kind, spec, backend, status, statuses
        self.dtype, self.device, self.seed = dtype, device, seed
        self.user_properties += [("kernel", spec.name), ("check", kind), ("seed", seed), ("arch", device.arch)]

    def _skip_reason(self) -> str | None:
        from harness.correctness.opchecks import op_cases
        from harness.target.resolve import describe

        if self.kind in self.spec.waivers:
            return f"{self.kind} waived: {self.spec.waivers[self.kind]}"
        if self.status is None:
            return f"the kernel's op cannot run here: {describe(self.statuses)}"
        if not self.status.runnable:
            return f"backend {self.backend} cannot run here: {self.status.reason}"
        if not op_cases(self.spec):
            return "no edge or ci case is contiguous with every dimension >= 2"
        return None

    def runtest(self) -> None:
        from harness.correctness.opchecks import run_compile, run_opcheck
        from harness.correctness.ops import OpRegistrationError

        reason = self._skip_reason()
        if reason:
            pytest.skip(reason)
        run = run_opcheck if self.kind == "opcheck" else run_compile
        try:
            notes = run(self.spec, self.backend, self.dtype, self.device.arch, self.device.torch_device, self.seed)
        except OpRegistrationError as exc:  # the spec cannot define the op: its one line, no traceback
            pytest.fail(f"{self.kind}: {exc}", pytrace=False)
        finally:
            if self.device.is_gpu:
                import torch

                torch.cuda.empty_cache()
        for note in notes:
            self.user_properties.append(("note", note))

    def repr_failure(self, excinfo, style=None):
        import traceback

        from harness.correctness.registry import CheckFailure
        from harness.plugin.failures import crash_text, reproduce

        exc = excinfo.value
        if isinstance(exc, CheckFailure):
            return f"{exc}\n{reproduce(self)}"
        if isinstance(exc, pytest.fail.Exception):
            return f"{exc}\n{reproduce(self)}"
        # A crash reads like every other check: its name, the error's line and the context, then the frames.
        text = str(exc).strip().splitlines()
        head = (f"{self.kind}: {type(exc).__name__}: {text[0] if text else ''}\n[{self.spec.name} {self.kind} "
                f"backend={self.backend} dtype={self.dtype} seed={self.seed} arch={self.device.arch} "
                f"spec={self.spec.path}]")
        return crash_text(self, "", tuple(traceback.extract_tb(excinfo.tb)), head=head)

    def reportinfo(self):
        return self.path, None, f"{self.name} seed={self.seed}"
