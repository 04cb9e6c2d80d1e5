"""The command line: a registry of commands (a dict plus a decorator), each a chain of small steps.

Exit codes: 0 success, 1 a run that found failures, 2 bad input (a spec, a results file, an option).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

COMMANDS: dict[str, tuple[Callable, Callable, str]] = {}
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


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


class BadInput(Exception):
    """A one-line problem with the user's input; printed without a traceback, exit code 2."""


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


def load_specs(paths):
    from harness.spec import load_all

    specs, problems = load_all(paths)
    if problems:
        raise BadInput("\n".join(problems))
    return specs


@command("validate", "check spec files; one line per problem, exit 2 on any")
@options(lambda p: (p.add_argument("specs", nargs="*", help="spec files (default: specs/*.toml)"),
                    p.add_argument("--specs-dir", default="specs")))
def cmd_validate(args) -> int:
    specs = load_specs(spec_paths(args.specs, args.specs_dir))
    for s in specs:
        n = sum(len(c) for c in s.cases.values())
        print(f"{s.path}: ok ({len(s.backends)} backend(s), {len(s.dtypes)} dtypes, {n} cases)")
    return EXIT_OK


@command("resolve", "print which backend runs for each kernel on this (or another) architecture")
@options(lambda p: (p.add_argument("--arch", help="pretend to be this architecture: cpu, sm_80, sm_90..."),
                    p.add_argument("--kernel", action="append", default=[]),
                    p.add_argument("--specs-dir", default="specs")))
def cmd_resolve(args) -> int:
    from harness.arch import ArchError, detect, fake_device
    from harness.resolve import resolve

    try:
        device = fake_device(args.arch) if args.arch else detect()
    except ArchError as exc:
        raise BadInput(f"--arch: {exc}") from None
    for spec in load_specs(spec_paths([], args.specs_dir, args.kernel)):
        for s in resolve(spec, device):
            state = "RUNS" if s.selected else ("available" if s.runnable else "skipped")
            print(f"{spec.name:<20} {device.arch:<7} {s.backend:<10} {state:<10} {s.reason}")
    return EXIT_OK


def _load_plugins() -> None:
    # Commands living in their own modules register themselves on import.
    import importlib

    for mod in ("harness.cli_bench", "harness.cli_matrix", "harness.cli_sanitize"):
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
