"""The implementations of the generated checks, registered against the catalogue rows of harness.spec.checks.

``@check("poison")`` registers a function ``fn(run) -> None | NOT_APPLICABLE | DONE`` for the row named
``poison``: None when it ran and passed, NOT_APPLICABLE when the case has nothing for it to check, DONE when
the case is finished (a refused layout). A failure raises :class:`CheckFailure`.

``reads`` names the results of the case's calls (``CaseRun``'s cached ones: ``ref``, ``contiguous``,
``second``, ``second_args``) the check reads: the runner drops each once no later check reads it, so a case at
2**31 elements does not hold every call's tensors until its last check.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.spec.checks import BY_NAME, CHECKS, CheckInfo

NOT_APPLICABLE = "not applicable"
DONE = "done"

_IMPLEMENTATIONS: dict[str, Callable] = {}
_READS: dict[str, frozenset[str]] = {}


class CheckFailure(AssertionError):
    def __init__(self, check: str, message: str):
        self.check = check
        super().__init__(f"{check}: {message}")


def check(name: str, reads: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Register the decorated function as the implementation of the catalogue row ``name``, reading the cached
    results ``reads``."""
    if name not in BY_NAME:
        raise ValueError(f"no check {name!r} in harness.spec.checks.CHECKS")

    def register(fn: Callable) -> Callable:
        # The same function of the same module and source file again is its module imported again (pytest's
        # in-process runs drop the modules they imported, this registry's included only if it came with them): it
        # replaces the first. A function of another file is a second implementation, whatever names it takes.
        old = _IMPLEMENTATIONS.get(name, fn)
        if old is not fn and _origin(old) != _origin(fn):
            raise ValueError(f"check {name!r} is implemented twice: {old.__module__}.{old.__qualname__}, "
                             f"{fn.__module__}.{fn.__qualname__}")
        _IMPLEMENTATIONS[name] = fn
        _READS[name] = frozenset(reads)
        return fn
    return register


def _origin(fn: Callable) -> tuple:
    code = getattr(fn, "__code__", None)
    return fn.__module__, fn.__qualname__, code.co_filename if code else None


def implementations() -> dict[str, Callable]:
    return dict(_IMPLEMENTATIONS)


def reads(name: str) -> frozenset[str]:
    """The cached results of a case's calls that the check ``name`` reads."""
    return _READS[name]


def in_order() -> list[tuple[CheckInfo, Callable]]:
    """Every row with its implementation, in the rows' order; a row without one is an error."""
    missing = [c.name for c in CHECKS if c.name not in _IMPLEMENTATIONS]
    if missing:
        raise RuntimeError(f"checks without an implementation: {', '.join(missing)}")
    return [(c, _IMPLEMENTATIONS[c.name]) for c in sorted(CHECKS, key=lambda c: c.order)]
