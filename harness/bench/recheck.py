"""The re-check of timed calls, completed: some timed calls get new input values, in the same buffers.

:class:`harness.correctness.checks.TimedCheck` poisons the outputs before every timed call and compares a
sample of the timed calls' outputs with the reference. A launcher that caches its result by buffer (honest
for the checks before timing, then replaying once it is timed, or returning a tensor it kept) passes that:
the inputs never change, so the cached answer stays right. Here some timed calls (the second sample, then
each after a random gap of 1 to max(:data:`MIN_GAP`, calls so far / 2) samples) first get other values written
into their input buffers, outside the timed region; the call's outputs are compared with the reference of
those values before the next sample, and the first values are written back. A result that does not follow
its inputs fails as ``timed outputs``, however fast. The gaps grow with the count, so a run of n samples
holds about log(n) / log(1.25) probes (a dozen in a gate case, some thirty in 2000 samples), and a launcher
that starts replaying after k samples is caught within about k / 2 more: before it could move a median. An
honest kernel's time does not depend on which values it reads (the probe values come from the same
distributions, only another seed).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch

from harness.correctness.args import clone_args, is_zero_size, keep_static, make_args, reference_args
from harness.correctness.checks import TimedCheck, compared, returned_outputs
from harness.correctness.numerics import mismatch
from harness.correctness.registry import CheckFailure

MIN_GAP = 8            # the longest gap between the first probes, in samples
_PROBE_SEED = 0x7E57   # the new values' seed, mixed with the case's


class ProbedCheck:
    """A :class:`TimedCheck` (harness.timing.engine.TimedOutputs) whose probes give timed calls new values."""

    def __init__(self, check: TimedCheck, ref_fn: Callable, device: str, seed: int):
        self.check, self.ref_fn, self.device, self.seed = check, ref_fn, str(device), seed
        self.rng = random.Random(seed ^ _PROBE_SEED)
        inputs = check.args.passed(check.spec.inputs)  # an absent optional input is None: nothing to probe
        self.enabled = not is_zero_size(check.args)
        self.pristine = {t.name: check.args.tensors[t.name].clone() for t in inputs} if self.enabled else {}
        self.fresh = self.fresh_ref = None
        self.probing, self.calls, self.probes, self.next_probe = False, 0, 0, 2

    def wrap(self, call: Callable[[], object]) -> Callable[[], None]:
        return self.check.wrap(call)

    def before(self) -> None:
        if self.probing:
            self._finish()
        self.calls += 1
        if self.enabled and self.calls == self.next_probe:
            self.next_probe += 1 + self.rng.randrange(max(MIN_GAP, self.calls // 2))
            self._start()
        self.check.before()

    def verify(self) -> None:
        if self.probing:
            self._finish()
        else:
            self.check.verify()

    def _start(self) -> None:
        c = self.check
        if self.fresh is None:  # once: the probe values and their reference
            self.fresh = make_args(c.spec, c.case, c.dtype, self.device, (self.seed ^ _PROBE_SEED) & 0x7FFFFFFF)
            keep_static(self.fresh, self.pristine, c.spec)
            ref_args = reference_args(c.spec, clone_args(self.fresh), c.dtype)
            value = self.ref_fn(**ref_args.kwargs())
            self._sync()
            returned = returned_outputs(c.spec, value, ref_args.absent)
            self.fresh_ref = {t.name: returned.get(t.name, ref_args.tensors[t.name])
                              for t in ref_args.passed(c.spec.written)}
        self._write(self.fresh.tensors)
        self.probing = True

    def _finish(self) -> None:
        """The probed call's outputs against the reference of its values, then the first values back."""
        c = self.check
        self.probing = False
        self.probes += 1
        self._sync()
        returned = returned_outputs(c.spec, c.value, c.args.absent)
        for t in compared(c.args.passed(c.spec.written), returned):
            got = returned.get(t.name, c.args.tensors[t.name])
            problem = mismatch(got, self.fresh_ref[t.name], c.spec.tolerance(c.dtype, t.name, c.case),
                               atol_floor=c.spec.atol_floor)
            if problem:
                raise CheckFailure("timed outputs", f"{t.name}: a timed call whose inputs got new values (the same "
                                                    f"buffers, written before the call) does not match their "
                                                    f"reference (a cached or replayed result?): {problem}")
        self._write(self.pristine)

    def _write(self, values: dict) -> None:
        for t in self.check.args.passed(self.check.spec.inputs):
            if not t.static:  # never written, not even with its own values: a write bumps its version counter
                self.check.args.tensors[t.name].copy_(values[t.name])

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
