"""``[distributed]``: the world sizes a collective kernel runs at, and the cases multiplied out over them.

Each declared case becomes one case per world size, with ``world`` among its symbols: its id says the world
size (``n=4096,world=2``), and shapes, constraints and the roofline may use it like any other symbol (a
reduce-scatter's output is ``n / world``; an all-reduce's bus bytes are ``2 * (world - 1) / world * bytes_x``).
"""

from __future__ import annotations

from harness.spec.model import WORLD, Case, Distributed
from harness.spec.schema import Reader, describe

MAX_WORLD = 1024


def read_distributed(r: Reader, t: dict) -> Distributed | None:
    r.keys(t, ["world_sizes"], "distributed", required=["world_sizes"])
    sizes = r.get(t, "world_sizes", list, "distributed", default=None)
    if sizes is None:  # absent or not a list: r.keys or r.get said so, once
        return None
    good = []
    for i, w in enumerate(sizes):
        if isinstance(w, bool) or not isinstance(w, int) or not 2 <= w <= MAX_WORLD:
            r.problem(f"distributed.world_sizes[{i}]", f"expected a number of ranks from 2 to {MAX_WORLD}, got "
                                                       f"{describe(w)}")
        elif w in good:
            r.problem(f"distributed.world_sizes[{i}]", f"{w} is listed twice")
        else:
            good.append(w)
    if not sizes:
        r.problem("distributed.world_sizes", "expected at least one world size, e.g. [2, 4]")
    return Distributed(tuple(good)) if good and len(good) == len(sizes) else None


def over_worlds(r: Reader, cases: dict[str, tuple[Case, ...]], dist: Distributed) -> dict[str, tuple[Case, ...]]:
    """Every case once per world size, ``world`` appended to what it gives."""
    out, told = {}, set()
    for tier, tier_cases in cases.items():
        for i, c in enumerate(tier_cases):
            if WORLD in c.values and c.given not in told:  # once: the cpu tier may be the ci cases again
                told.add(c.given)
                r.problem(f"cases.{tier}[{i}].{WORLD}", "is [distributed].world_sizes' to set: each case runs at "
                                                        "every world size")
        out[tier] = tuple(Case(c.tier, c.given + ((WORLD, w),), c.layout, c.headline, c.value_set)
                          for c in tier_cases for w in dist.world_sizes)
    return out
