"""Which spec files a command reads, and loading them ready to run: the first steps of every command."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.config import load_config, shown
from harness.steps import BadInput


def spec_folders(specs_dir=None) -> tuple[Path, ...]:
    """The spec folders: the one or several given, else the project's (``[tool.kernel-harness] specs``)."""
    if isinstance(specs_dir, (str, Path)):
        return (Path(specs_dir),)
    if specs_dir:
        return tuple(Path(d) for d in specs_dir)
    return tuple(Path(shown(f)) for f in load_config().specs)  # as typed: the paths runs record stay short


def spec_paths(given, specs_dir=None, kernels=()) -> list[Path]:
    """The files named, else every ``*.toml`` of the spec folders (:func:`spec_folders`; those of ``kernels``
    only, when given)."""
    if given:
        return [Path(p) for p in given]
    folders = spec_folders(specs_dir)
    where = ", ".join(shown(f) for f in folders)
    paths = [p for folder in folders for p in sorted(folder.glob("*.toml"))]
    if kernels:
        wanted = {k.strip() for item in kernels for k in str(item).split(",") if k.strip()}
        missing = wanted - {p.stem for p in paths}
        if missing:
            raise BadInput(f"{where}: no spec for kernel(s) {', '.join(sorted(missing))}")
        paths = [p for p in paths if p.stem in wanted]
    if not paths:
        raise BadInput(f"{where}: no spec files (*.toml)")
    return paths


def load_specs(paths, *, bind: bool = True) -> list:
    """Every spec loaded and (``bind``) its import paths resolved; all their problems as one BadInput."""
    from harness.spec.bind import bind_all
    from harness.spec.load import load_all

    specs, problems = load_all(paths)
    if bind and not problems:
        specs, problems, unchecked = bind_all(specs)
        for line in unchecked:  # said, not fatal: the spec is sound, this Python cannot import its kernel
            print(line, file=sys.stderr)
    if problems:
        raise BadInput("\n".join(problems))
    return specs
