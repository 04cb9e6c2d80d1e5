"""The command line: a registry of commands (a dict plus a decorator), each a chain of small steps.

Exit codes: 0 success, 1 a run that found failures, 2 bad input (a spec, a results file, an option).
"""

from __future__ import annotations

import argparse
import sys

from harness.cli.registry import COMMANDS, EXIT_BAD_INPUT, BadInput


def _load_plugins() -> None:
    # Commands living in their own modules register themselves on import.
    import importlib

    for mod in ("harness.cli.specs", "harness.cli.bench", "harness.cli.matrix", "harness.cli.sanitize",
                "harness.cli.compare", "harness.cli.new", "harness.cli.profile", "harness.cli.affected",
                "harness.cli.ci", "harness.cli.ci_comment"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise


def main(argv: list[str] | None = None) -> int:
    _load_plugins()
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_fn, add, help_text) in COMMANDS.items():
        add(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command][0](args)
    except BadInput as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
