"""``new``: write the skeletons of a new kernel, ``specs/NAME.toml`` and ``kernels/NAME.py``.

The folders are the project's first spec folder and first kernel folder (``[tool.kernel-harness] specs`` and
``kernels``, default ``specs/`` and ``kernels/``), and the spec names the module by the kernel folder's
package (``kernels.NAME``, or ``liger_kernel.ops.NAME`` for ``src/liger_kernel/ops`` under the import root
``src``). The skeleton is an elementwise kernel (``out = x * scale``): the spec validates as written, the
reference is real, and the launcher raises ``NotImplementedError("TODO: write the kernel in kernels/NAME.py")``,
so the generated tests collect and run and every Triton case fails with that message until the kernel is
written. The module imports only torch and triton, nothing of this repository or the project, so it works
wherever it is written. The templates are package data (harness/cli/templates), filled in with
``string.Template``: no dependency beyond the standard library, so the command runs where torch is not
installed.
"""

from __future__ import annotations

import keyword
import re
from importlib.resources import files
from pathlib import Path
from string import Template

from harness.cli.registry import EXIT_OK, BadInput, command, options
from harness.config import Config, load_config, shown

# Lower snake case starting with a letter: a module name, a function name and a spec file name at once.
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def _options(p) -> None:
    p.add_argument("name", help="the kernel's name, lower snake case: specs/NAME.toml, kernels/NAME.py")
    p.add_argument("--root", default=".", help="a folder of the project: its pyproject.toml's [tool.kernel-harness] "
                                               "names the spec and kernel folders (default: .)")
    p.add_argument("--force", action="store_true", help="overwrite the kernel's files if they exist")


def check_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise BadInput(f"new: {name!r} is not a kernel name: use lower snake case (a-z, 0-9, _), "
                       "starting with a letter")
    if keyword.iskeyword(name):
        raise BadInput(f"new: {name!r} is a Python keyword: kernels/{name}.py could not be imported by name")


def targets(config: Config, name: str) -> dict[str, Path]:
    """Template file -> the path it is written to: the first spec folder, the first kernel folder."""
    return {"spec.toml.tmpl": config.specs[0] / f"{name}.toml", "kernel.py.tmpl": config.kernels[0] / f"{name}.py"}


def render(template: str, name: str, config: Config | None = None) -> str:
    config = config or load_config()
    paths = targets(config, name)
    text = (files("harness.cli") / "templates" / template).read_text(encoding="utf-8")
    return Template(text).substitute(
        name=name, config="".join(part.capitalize() for part in name.split("_")) + "Config",
        module=f"{config.package(config.kernels[0])}.{name}",
        kernel_file=_in_project(paths["kernel.py.tmpl"], config),
        spec_file=_in_project(paths["spec.toml.tmpl"], config))


def _in_project(path: Path, config: Config) -> str:
    return path.relative_to(config.root).as_posix() if config.root in path.parents else str(path)


@command("new", "write the skeletons of a new kernel: specs/NAME.toml and kernels/NAME.py")
@options(_options)
def cmd_new(args) -> int:
    name = args.name
    check_name(name)
    config = load_config(Path(args.root))
    folder = config.kernels[0]
    if not folder.is_dir():  # the spec imports the folder's package: a stray copy elsewhere would not import
        raise BadInput(f"new: {shown(folder)}: no such directory: run it in the project (its pyproject.toml's "
                       "[tool.kernel-harness] kernels names the folder, default kernels/), or pass --root")
    paths = targets(config, name)
    existing = [p for p in paths.values() if p.exists()]
    if existing and not args.force:  # checked for both files before either is written
        raise BadInput(f"new: {shown(existing[0])} already exists: choose another name, or pass --force "
                       "to overwrite it")
    rendered = {path: render(template, name, config) for template, path in paths.items()}
    for path, text in rendered.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {shown(path)}")
    spec = shown(paths["spec.toml.tmpl"])
    print(f"next: python -m harness validate {spec}, then pytest --kernel {name}: every triton case fails with "
          f"\"TODO: write the kernel in {_in_project(paths['kernel.py.tmpl'], config)}\" until it is written "
          "(docs/contributing.md)")
    return EXIT_OK
