"""Commands as chains of small typed steps, as nox's ``workflow.execute`` runs its tasks.

A command's workflow is a list of functions ``step(state) -> state`` over one frozen dataclass: each step
reads the fields earlier steps filled and returns a copy with its own (``dataclasses.replace``). The list is
the command's whole story, each step has its own unit test, and the CLI module only parses arguments into
the first state and maps the outcome to an exit code.

A root module: it imports nothing of the harness, so every package's workflow may use it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

S = TypeVar("S")
Step = Callable[[S], S]


class BadInput(Exception):
    """A one-line problem with the user's input (a spec, a results file, an option): printed without a
    traceback, exit code 2. Raised by any step; the CLI maps it."""


def execute(steps: Sequence[Step], state: S, *, trace: bool = False, stream=sys.stderr) -> S:
    """Run ``steps`` in order, each on the state the previous one returned; ``trace`` prints each step's
    name and wall time (``KH_TRACE_STEPS=1`` from the CLI)."""
    for step in steps:
        t0 = time.perf_counter()
        state = step(state)
        if trace:
            print(f"step {step.__name__}: {time.perf_counter() - t0:.2f} s", file=stream, flush=True)
    return state


def comma_list(values) -> tuple[str, ...]:
    """Repeatable, comma-separated option values (``--kernel a,b --kernel c``) as one tuple, blanks dropped."""
    return tuple(v.strip() for item in values or () for v in str(item).split(",") if v.strip())
