"""The command registry (a dict plus a decorator) and exit codes; the steps every command shares are imported
from their homes (harness.spec.select, harness.steps) so a command module needs one import line."""

from __future__ import annotations

import argparse
import sys
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


class _SpecFolders(argparse.Action):
    """``--specs DIR``, repeatable: the folders in order, as a tuple; the old name ``--specs-dir`` still works."""

    def __call__(self, parser, namespace, values, option_string=None):
        if option_string == "--specs-dir":
            print("--specs-dir is deprecated: use --specs (the name pytest's option has)", file=sys.stderr)
        setattr(namespace, self.dest, (*getattr(namespace, self.dest), values))


def specs_option(p: argparse.ArgumentParser, help: str = "a spec folder") -> None:
    """The one spec-folder option of every command, named as in pytest: ``args.specs_dir`` is a tuple, empty
    when none was given (then harness.spec.select takes the project's, ``[tool.kernel-harness] specs``)."""
    p.add_argument("--specs", "--specs-dir", dest="specs_dir", action=_SpecFolders, default=(), metavar="DIR",
                   help=f"{help} (repeatable; default: [tool.kernel-harness] specs of pyproject.toml, else specs/; "
                        "--specs-dir is its deprecated old name)")
