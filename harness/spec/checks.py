"""The catalogue of generated checks: one row per check (name, what it catches, waivable, order).

It lives with the spec language because a spec's ``[waive]`` keys are check names; the implementations
register against these rows in :mod:`harness.correctness.checks`, and the README's table is rendered from them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckInfo:
    name: str
    catches: str
    waivable: bool
    order: int


CHECKS: tuple[CheckInfo, ...] = (
    CheckInfo("layout", "a non-contiguous input that gives another result than its contiguous copy, or a layout "
                        "the spec does not list that runs instead of raising", True, 10),
    CheckInfo("zero-size", "a 0-size case that launches an empty grid instead of returning early", False, 20),
    CheckInfo("poison", "output elements never written", False, 30),
    CheckInfo("nan_inf", "NaN or Inf where the reference has none, or the reverse", True, 40),
    CheckInfo("numerics", "values outside the tolerance of the higher-precision reference", False, 50),
    CheckInfo("inputs", "inputs not declared inplace that the kernel changed", True, 60),
    CheckInfo("determinism", "two runs on the same inputs that differ bitwise", True, 70),
)
BY_NAME = {c.name: c for c in CHECKS}
WAIVABLE = tuple(c.name for c in CHECKS if c.waivable)
