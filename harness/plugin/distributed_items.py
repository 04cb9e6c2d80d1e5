"""The items of a ``[distributed]`` spec: one per backend x dtype x case x world size, each run on every rank of
a process group (gloo on the CPU, NCCL with one GPU per rank) and checked on every rank.

``all_reduce[two_shot-bf16-tokens=16,hidden=4096,world=4]``. The session keeps one group per world size, so
the ranks start once; a case whose kernel raises, crashes or hangs on any rank fails alone, naming the ranks,
and the next case gets a fresh group. The reference backend is the collective itself, so it is not an item.
"""

from __future__ import annotations

import pytest

from harness.distributed.tasks import RANK_SEED
from harness.plugin.failures import reproduce
from harness.plugin.options import KEY as _KEY
from harness.spec.model import WORLD

GROUPS = "distributed-groups"


def distributed_items(parent, spec, selected, device, seed_base: int):
    """``selected``: (backend, status, dtype, case, name) as harness.plugin.items picks them."""
    from harness.correctness.args import case_seed
    from harness.correctness.checks import REFERENCE

    for backend, status, dtype, case, name in selected:
        if backend != REFERENCE:  # the collective itself: nothing to compare it with
            yield DistributedCaseItem.from_parent(parent, name=name, spec=spec, backend=backend, status=status,
                                                  dtype=dtype, case=case, seed=case_seed(spec, dtype, case, seed_base),
                                                  device=device)


class DistributedCaseItem(pytest.Item):
    def __init__(self, *, spec, backend, status, dtype, case, seed, device, **kw):
        super().__init__(**kw)
        self.spec, self.backend, self.status, self.dtype = spec, backend, status, dtype
        self.case, self.seed, self.device = case, seed, device
        self.world = int(case.values[WORLD])
        self.user_properties += [("kernel", spec.name), ("seed", seed), ("arch", device.arch), ("world", self.world)]

    def _skip_reason(self) -> str | None:
        if not self.status.runnable:
            return f"backend {self.backend} cannot run here: {self.status.reason}"
        from harness.distributed.group import missing_gpus

        return missing_gpus(self.world, self.device) or None

    def _group(self):
        from harness.distributed.group import project_group

        groups = self.config.stash[_KEY].setdefault(GROUPS, {})
        if self.world not in groups:
            groups[self.world] = project_group(self.world, self.device.torch_device)
        return groups[self.world]

    def runtest(self) -> None:
        reason = self._skip_reason()
        if reason:
            pytest.skip(reason)
        kwargs = dict(spec_path=self.spec.path, impl=self.spec.backends[self.backend].impl, dtype=self.dtype,
                      tier=self.case.tier, case_id=self.case.id, seed=self.seed, device=self.device.torch_device)
        out = self._group().run("harness.distributed.tasks:check_case", kwargs, self.spec.timeout_s)
        if out.status != "ok":
            raise DistributedFailure(out.error)
        bad = [f"rank {v['rank']}: {p}" for v in out.values for p in v["problems"]]
        if bad:  # the first rank's first problem on the summary line, then every rank's
            ranks = sorted({v["rank"] for v in out.values if v["problems"]})
            raise DistributedFailure(f"wrong on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} "
                                     f"of {self.world}: {bad[0]}" + "".join(f"\n{b}" for b in bad[1:]))

    def context(self) -> str:
        return (f"[{self.spec.name} backend={self.backend} dtype={self.dtype} case={self.case.tier}:{self.case.id} "
                f"seed={self.seed} (rank r: seed + r * {RANK_SEED}) arch={self.device.arch} spec={self.spec.path}]")

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, DistributedFailure):
            return f"{excinfo.value}\n{self.context()}\n{reproduce(self)}"
        return f"{super().repr_failure(excinfo, style='short')}\n{self.context()}\n{reproduce(self)}"

    def reportinfo(self):
        return self.path, None, f"{self.name} seed={self.seed}"


class DistributedFailure(Exception):
    """A rank's wrong output, or a group that raised, crashed or hung: the ranks and what."""


def close_groups(opts: dict) -> None:
    for group in opts.pop(GROUPS, {}).values():
        group.close()
