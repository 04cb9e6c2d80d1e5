"""What every gap module shares: the patch record, applying a patch once and only where its target exists, the
limitation exception, and the per-launch scope that undoes what a launch patched.

Triton is imported lazily (by each gap module's ``install``), so importing this package costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PREFIX = "interpreter limitation: "
MARK = "_kh_interpreter_compat"  # set on every replacement, so a second install sees its own work


class InterpreterLimitation(Exception):
    """A result Triton's interpreter cannot produce the way a GPU would: a gap of the CPU run, not a kernel bug.

    Its message starts with ``interpreter limitation: ``, the marker the harness reports as a skip."""


def limitation(what: str) -> BaseException:
    """The exception for a result the layer cannot correct. Inside a pytest test it is pytest's own skip
    exception (a BaseException), so no ``except Exception`` between the kernel and the test (the interpreter's
    InterpreterError wrapper, a harness KernelError) turns it into a failure; elsewhere (bench, the gate) it is
    an InterpreterLimitation whose message carries the marker."""
    message = what if what.startswith(PREFIX) else PREFIX + what
    if os.environ.get("PYTEST_CURRENT_TEST"):  # set by pytest for the duration of each test only
        try:
            from _pytest.outcomes import Skipped
        except ImportError:  # pragma: no cover - the variable without pytest
            return InterpreterLimitation(message)
        return Skipped(message)
    return InterpreterLimitation(message)


def is_limitation(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it wraps: the interpreter re-raises kernel errors as InterpreterError) is one."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, InterpreterLimitation) or str(exc).startswith(PREFIX):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


@dataclass(frozen=True)
class Patch:
    """One hook point of one gap: applied, or skipped with the reason (a target this Triton lacks)."""

    gap: str
    target: str
    applied: bool
    reason: str = ""

    def line(self) -> str:
        return f"{self.gap}: {self.target}: " + ("patched" if self.applied else f"skipped ({self.reason})")


def replace(gap: str, owner: Any, name: str, make: Callable[[Any], Any], *, where: str = "") -> Patch:
    """Set ``owner.name = make(original)`` unless the target is absent (recorded, not raised: a Triton release
    that lacks it has nothing to fix there) or already ours. The replacement keeps the original reachable as
    ``__wrapped__`` so a test can run the raw interpreter side by side."""
    target = f"{where or getattr(owner, '__name__', type(owner).__name__)}.{name}"
    original = getattr(owner, name, None)
    if original is None:
        return Patch(gap, target, False, "not in this Triton release")
    if getattr(original, MARK, False):
        return Patch(gap, target, True, "already installed")
    new = make(original)
    setattr(new, MARK, True)
    new.__wrapped__ = original
    setattr(owner, name, new)
    return Patch(gap, target, True)


def missing(gap: str, target: str, why: str) -> Patch:
    return Patch(gap, target, False, why)


class Namespace:
    """A function's globals seen as an object, so the interpreter's patch scope (which sets and restores
    attributes) can swap a global for the length of one launch."""

    def __init__(self, globs: dict) -> None:
        object.__setattr__(self, "_globs", globs)

    def __getattr__(self, name: str):
        try:
            return self._globs[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value) -> None:
        self._globs[name] = value

    def __delattr__(self, name: str) -> None:
        del self._globs[name]


def _language_owners() -> list[Any]:
    """The namespaces Triton's interpreter patches: triton.language, its core module, math, the tensor classes."""
    import triton.language as tl

    return [tl, tl.core, tl.math, tl.core.tensor, tl.core.tensor_descriptor_base]


def _snapshot() -> list[tuple[Any, dict]]:
    return [(owner, dict(vars(owner))) for owner in _language_owners()]


@dataclass
class Launch:
    """One kernel launch in progress: the scopes of the layer's own per-launch patches, undone when it ends (a
    device function's call patches again, and Triton drops that scope: registered here, nothing the layer
    patched outlives the launch), and what was patched already, so a device call does not patch it twice.

    ``language``: triton.language's namespaces as they were when the launch began. A call of one of Triton's
    own @jit library functions (triton.language.standard's, whose globals hold ``core``) patches the builtins
    of ``triton.language.core`` and drops that scope too, which the launch's own scope (the kernel's ``tl``)
    never recorded: ``tl.core.mul`` stayed the interpreter's, and a later ahead-of-time compile in the same
    process built its IR with the interpreter's builder (``'value' object has no attribute 'dtype'``)."""

    scopes: list[Any] = field(default_factory=list)
    done: set[Any] = field(default_factory=set)
    language: list[tuple[Any, dict]] = field(default_factory=_snapshot)

    def restore(self) -> None:
        for scope in reversed(self.scopes):
            scope.restore()
        for owner, before in self.language:
            for name, value in list(vars(owner).items()):
                if name not in before:
                    if callable(value) and not isinstance(value, type(os)):  # a patch; never a submodule
                        delattr(owner, name)
                elif before[name] is not value:
                    setattr(owner, name, before[name])


RUNS: list[Launch] = []


def current_launch() -> Launch | None:
    return RUNS[-1] if RUNS else None
