"""The command registry (a dict plus a decorator), exit codes, and the steps every command shares."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from harness.steps import BadInput, comma_list  # noqa: F401 - re-exported: one home, every command

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


def spec_paths(given: list[str], specs_dir: str = "specs", kernels=()) -> list[Path]:
    if given:
        return [Path(p) for p in given]
    paths = sorted(Path(specs_dir).glob("*.toml"))
    if kernels:
        wanted = {k for item in kernels for k in item.split(",")}
        missing = wanted - {p.stem for p in paths}
        if missing:
            raise BadInput(f"{specs_dir}: no spec for kernel(s) {', '.join(sorted(missing))}")
        paths = [p for p in paths if p.stem in wanted]
    if not paths:
        raise BadInput(f"{specs_dir}: no spec files (*.toml)")
    return paths


def load_specs(paths, *, bind: bool = True):
    """Every spec loaded and (``bind``) its import paths resolved; all their problems as one BadInput."""
    from harness.spec.bind import bind_all
    from harness.spec.load import load_all

    specs, problems = load_all(paths)
    if bind and not problems:
        specs, problems = bind_all(specs)
    if problems:
        raise BadInput("\n".join(problems))
    return specs
