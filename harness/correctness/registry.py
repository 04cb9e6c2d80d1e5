"""The implementations of the generated checks, registered against the catalogue rows of harness.spec.checks.

``@check("poison")`` registers a function ``fn(run) -> None | NOT_APPLICABLE | DONE`` for the row named
``poison``: None when it ran and passed, NOT_APPLICABLE when the case has nothing for it to check, DONE when
the case is finished (a refused layout). A failure raises :class:`CheckFailure`.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.spec.checks import BY_NAME, CHECKS, CheckInfo

NOT_APPLICABLE = "not applicable"
DONE = "done"

_IMPLEMENTATIONS: dict[str, Callable] = {}


class CheckFailure(AssertionError):
    def __init__(self, check: str, message: str):
        self.check = check
        super().__init__(f"{check}: {message}")


def check(name: str) -> Callable[[Callable], Callable]:
    """Register the decorated function as the implementation of the catalogue row ``name``."""
    if name not in BY_NAME:
        raise ValueError(f"no check {name!r} in harness.spec.checks.CHECKS")

    def register(fn: Callable) -> Callable:
        if _IMPLEMENTATIONS.get(name, fn) is not fn:
            raise ValueError(f"check {name!r} is implemented twice: {_IMPLEMENTATIONS[name].__qualname__}, "
                             f"{fn.__qualname__}")
        _IMPLEMENTATIONS[name] = fn
        return fn
    return register


def implementations() -> dict[str, Callable]:
    return dict(_IMPLEMENTATIONS)


def in_order() -> list[tuple[CheckInfo, Callable]]:
    """Every row with its implementation, in the rows' order; a row without one is an error."""
    missing = [c.name for c in CHECKS if c.name not in _IMPLEMENTATIONS]
    if missing:
        raise RuntimeError(f"checks without an implementation: {', '.join(missing)}")
    return [(c, _IMPLEMENTATIONS[c.name]) for c in sorted(CHECKS, key=lambda c: c.order)]
