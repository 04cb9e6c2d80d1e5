"""The command line: a registry of commands (a dict plus a decorator), each a chain of small steps.

Exit codes: 0 success, 1 a run that found failures, 2 bad input (a spec, a results file, an option).
"""

from __future__ import annotations

import argparse
import sys

from harness.cli.registry import COMMANDS, EXIT_BAD_INPUT, BadInput
from harness.config import load_config, use_import_roots


def _load_plugins() -> None:
    # Commands living in their own modules register themselves on import.
    import importlib

    for mod in ("harness.cli.specs", "harness.cli.bench", "harness.cli.matrix", "harness.cli.sanitize",
                "harness.cli.compare", "harness.cli.new", "harness.cli.profile", "harness.cli.affected",
                "harness.cli.ci", "harness.cli.ci_comment", "harness.cli.toolchains"):
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
    saved = list(sys.path)
    try:
        # The project's import roots first on sys.path: `kernel-harness`, unlike `python -m harness`, does not
        # put the cwd there, and a root may be a folder below it (src/).
        use_import_roots(load_config())
        return COMMANDS[args.command][0](args)
    except BadInput as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        sys.path[:] = saved  # main() called in a process that goes on (a test) leaves its sys.path as it was
