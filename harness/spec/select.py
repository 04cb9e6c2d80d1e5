"""Which spec files a command reads, and loading them ready to run: the first steps of every command."""

from __future__ import annotations

from pathlib import Path

from harness.steps import BadInput


def spec_paths(given, specs_dir: str | Path = "specs", kernels=()) -> list[Path]:
    """The files named, else every ``*.toml`` of ``specs_dir`` (those of ``kernels`` only, when given)."""
    if given:
        return [Path(p) for p in given]
    specs_dir = Path(specs_dir)
    paths = sorted(specs_dir.glob("*.toml"))
    if kernels:
        wanted = {k.strip() for item in kernels for k in str(item).split(",") if k.strip()}
        missing = wanted - {p.stem for p in paths}
        if missing:
            raise BadInput(f"{specs_dir}: no spec for kernel(s) {', '.join(sorted(missing))}")
        paths = [p for p in paths if p.stem in wanted]
    if not paths:
        raise BadInput(f"{specs_dir}: no spec files (*.toml)")
    return paths


def load_specs(paths, *, bind: bool = True) -> list:
    """Every spec loaded and (``bind``) its import paths resolved; all their problems as one BadInput."""
    from harness.spec.bind import bind_all
    from harness.spec.load import load_all

    specs, problems = load_all(paths)
    if bind and not problems:
        specs, problems = bind_all(specs)
    if problems:
        raise BadInput("\n".join(problems))
    return specs
