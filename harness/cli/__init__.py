"""The command line, ``python -m harness <command>``: a registry of commands, each in its own module."""


def main(argv: list[str] | None = None) -> int:
    from harness.cli.main import main as _main

    return _main(argv)
