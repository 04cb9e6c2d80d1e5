"""``new``: write the skeletons of a new kernel, ``specs/NAME.toml`` and ``kernels/NAME.py``.

The skeleton is an elementwise kernel (``out = x * scale``): the spec validates as written, the reference is
real, and the launcher raises ``NotImplementedError("TODO: write the kernel in kernels/NAME.py")``, so the
generated tests collect and run and every Triton case fails with that message until the kernel is written.
The templates are package data (harness/cli/templates), filled in with ``string.Template``: no dependency
beyond the standard library, so the command runs where torch is not installed.
"""

from __future__ import annotations

import keyword
import re
from importlib.resources import files
from pathlib import Path
from string import Template

from harness.cli.registry import EXIT_OK, BadInput, command, options

# Lower snake case starting with a letter: a module name, a function name and a spec file name at once.
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def _options(p) -> None:
    p.add_argument("name", help="the kernel's name, lower snake case: specs/NAME.toml, kernels/NAME.py")
    p.add_argument("--root", default=".", help="the project root holding specs/ and kernels/ (default: .)")
    p.add_argument("--force", action="store_true", help="overwrite the kernel's files if they exist")


def check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise BadInput(f"new: {name!r} is not a kernel name: use lower snake case (a-z, 0-9, _), "
                       "starting with a letter")
    if keyword.iskeyword(name):
        raise BadInput(f"new: {name!r} is a Python keyword: kernels/{name}.py could not be imported by name")


def targets(root: Path, name: str) -> dict[str, Path]:
    """Template file -> the path it is written to."""
    return {"spec.toml.tmpl": root / "specs" / f"{name}.toml", "kernel.py.tmpl": root / "kernels" / f"{name}.py"}


def render(template: str, name: str) -> str:
    config = "".join(part.capitalize() for part in name.split("_")) + "Config"
    text = (files("harness.cli") / "templates" / template).read_text(encoding="utf-8")
    return Template(text).substitute(name=name, config=config)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


@command("new", "write the skeletons of a new kernel: specs/NAME.toml and kernels/NAME.py")
@options(_options)
def cmd_new(args) -> int:
    name, root = args.name, Path(args.root)
    check_name(name)
    if not (root / "kernels").is_dir():  # the spec imports kernels.NAME: a stray copy elsewhere would not import
        raise BadInput(f"new: {root / 'kernels'}: no such directory: run it in the project's root (which holds "
                       "kernels/ and specs/), or pass --root")
    paths = targets(root, name)
    existing = [p for p in paths.values() if p.exists()]
    if existing and not args.force:  # checked for both files before either is written
        raise BadInput(f"new: {_shown(existing[0])} already exists: choose another name, or pass --force "
                       "to overwrite it")
    rendered = {path: render(template, name) for template, path in paths.items()}
    for path, text in rendered.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {_shown(path)}")
    spec = _shown(paths["spec.toml.tmpl"])
    print(f"next: python -m harness validate {spec}, then nox -s test -- --kernel {name}: every triton case "
          f"fails with \"TODO: write the kernel in kernels/{name}.py\" until it is written (docs/contributing.md)")
    return EXIT_OK
