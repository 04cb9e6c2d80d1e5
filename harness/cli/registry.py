"""The command registry (a dict plus a decorator) and exit codes; the steps every command shares are imported
from their homes (harness.spec.select, harness.steps) so a command module needs one import line."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from harness.spec.select import load_specs, spec_paths  # noqa: F401 - the first steps of every command
from harness.steps import BadInput, comma_list  # noqa: F401 - one home, every command

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
COMMANDS: dict[str, tuple[Callable, Callable, str]] = {}


def command(name: str, help: str):
    """Register ``fn(args) -> int`` as a subcommand; the decorated function's ``options`` adds arguments."""
    def wrap(fn):
        COMMANDS[name] = (fn, getattr(fn, "options", lambda p: None), help)
        return fn
    return wrap


def options(adder: Callable[[argparse.ArgumentParser], None]):
    def wrap(fn):
        fn.options = adder
        return fn
    return wrap
