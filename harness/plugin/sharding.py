"""``--shard i/n``: this runner's share of the items, so that a CI matrix over n runners runs each item once.

An item's shard is a hash of its node id, not its place in the collection: the split is the same from run to
run and on every runner, whatever else was collected, and an item added or removed moves no other item. It
applies after every other selection (``--kernel``, the affected kernels a CI job passes, ``-k``), so the n
shards of a selection are that selection, each item in exactly one. Under pytest-xdist each worker computes the
same split. The summary says which shard ran and how many items it kept.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pytest

NAME = "kernel-harness-shard"


@dataclass(frozen=True)
class Shard:
    index: int   # 1-based, as CI matrices count
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``i/n`` with 1 <= i <= n; anything else a UsageError naming the option."""
        left, sep, right = text.partition("/")
        try:
            index, count = int(left), int(right)
        except ValueError:
            index = count = 0
        if not sep or count < 1 or not 1 <= index <= count:
            raise pytest.UsageError(f"--shard {text}: expected i/n with 1 <= i <= n (e.g. --shard 2/4)")
        return cls(index, count)

    def holds(self, nodeid: str) -> bool:
        digest = hashlib.sha256(nodeid.encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index - 1


def enable(config: pytest.Config, text: str | None) -> None:
    if text is not None:
        config.pluginmanager.register(Sharding(Shard.parse(text)), NAME)


class Sharding:
    def __init__(self, shard: Shard):
        self.shard, self.kept, self.seen = shard, 0, 0

    @pytest.hookimpl(trylast=True)  # after every other selection: the shards split what is left
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        keep, dropped = [], []
        for item in items:
            (keep if self.shard.holds(item.nodeid) else dropped).append(item)
        self.seen, self.kept = len(items), len(keep)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep

    def pytest_report_collectionfinish(self, config: pytest.Config) -> str | None:
        s = self.shard  # under pytest-xdist the controller collects nothing: its workers' lines say it
        return f"kernel-harness: shard {s.index}/{s.count}: {self.kept} of {self.seen} items" if self.seen else None
