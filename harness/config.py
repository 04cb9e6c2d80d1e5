"""The project's settings: the ``[tool.kernel-harness]`` table of its pyproject.toml, read into one frozen Config.

The table is found by walking up from the start folder (the cwd) to the first pyproject.toml that has it; its
paths are relative to that file's folder. Without one every key takes its default, relative to the start
folder, which is how this repository ran before the table existed. Command-line options override the table
(``--specs DIR`` in pytest and the CLI alike, ``--tier``, ``--calibration``, ``--min-effect``).

A root module at the bottom of the layering: it imports nothing of the harness but harness.steps, so the
plugin, the CLI, spec selection, the gate and the worker pool all read the same Config. Every problem is one
line naming the file and the key, raised as BadInput (exit code 2).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.steps import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

TABLE = "tool.kernel-harness"
FOLDER_LISTS = {"specs": ("specs",), "import-roots": (".",), "kernels": ("kernels",)}  # key -> default
REPORTS = "build/reports"  # git-ignored scratch output: a plain `bench` leaves the checkout clean
KEYS = (*FOLDER_LISTS, "reports", "tier", "gate", "toolchains", "known-defects")
GATE_KEYS = ("min-effect", "calibration")
TOOLCHAIN_KEYS = ("triton", "torch", "regressions")
REGRESSION_POLICIES = ("report", "fail")
RELEASE = re.compile(r"^\d+\.\d+(\.\d+)?(\+[A-Za-z0-9.]+)?$")  # "3.6" (the newest 3.6.x), "3.6.0", "2.13.0+cpu"


@dataclass(frozen=True)
class GatePolicy:
    min_effect: float | None = None     # the project's smallest change worth blocking a merge for; None: the harness's
    calibration: Path | None = None     # a calibration.json measured on the project's runners; None: the shipped one


@dataclass(frozen=True)
class Toolchains:
    triton: tuple[str, ...] = ()        # the Triton releases the project supports: `matrix --triton`, `test-releases`
    torch: tuple[str, ...] = ()         # the torch releases its CPU tests run under (`test-releases`)
    regressions: str = "report"         # "fail": a difference flagged between releases fails `matrix --triton`


@dataclass(frozen=True)
class Config:
    root: Path                          # the pyproject.toml's folder (the start folder when none has the table)
    source: Path | None                 # the pyproject.toml read; None: every key is its default
    specs: tuple[Path, ...]             # spec folders: their *.toml files are the kernels
    import_roots: tuple[Path, ...]      # put first on sys.path before a kernel module is imported
    kernels: tuple[Path, ...]           # the kernel modules' folders (what `affected` watches, the gate takes)
    reports: Path                       # where `bench` writes without --out
    tier: str = "ci"                    # pytest's default --tier
    gate: GatePolicy = field(default_factory=GatePolicy)
    toolchains: Toolchains = field(default_factory=Toolchains)
    known_defects: Path | None = None   # the recorded upstream defects (harness.plugin.known_defects)

    def where(self, key: str) -> str:
        """``pyproject.toml: tool.kernel-harness.<key>``, the prefix of a problem with that key's value."""
        return f"{_where(self.source)}.{key}"

    def package(self, folder: Path) -> str:
        """The dotted module name of a kernel folder: its path below the import root that holds it."""
        for root in self.import_roots:
            try:
                rel = Path(folder).relative_to(root)
            except ValueError:
                continue
            if rel.parts and all(p.isidentifier() for p in rel.parts):
                return ".".join(rel.parts)
        raise BadInput(f"{self.where('kernels')}: {shown(folder)} is not an importable package below one of the "
                       f"import roots ({', '.join(shown(r) for r in self.import_roots)})")

    def pythonpath(self, existing: str | None = None) -> str:
        """PYTHONPATH for a child process: the import roots, then what was there."""
        return os.pathsep.join([str(r) for r in self.import_roots] + ([existing] if existing else []))


def shown(path: Path) -> str:
    """``path`` relative to the cwd where it is below it (as a user typed it), else absolute."""
    try:
        return Path(path).relative_to(Path.cwd()).as_posix() or "."
    except ValueError:
        return str(path)


def find_table(start: Path) -> tuple[Path | None, dict]:
    """The first pyproject.toml at or above ``start`` with a ``[tool.kernel-harness]`` table, and the table."""
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        if not path.is_file():
            continue
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise BadInput(f"{shown(path)}: not readable as TOML: {exc}") from None
        tool = doc.get("tool")
        if isinstance(tool, dict) and "kernel-harness" in tool:
            table = tool["kernel-harness"]
            if not isinstance(table, dict):
                raise BadInput(f"{shown(path)}: {TABLE}: expected a table, got {table!r}")
            return path, table
    return None, {}


def load_config(start: Path | None = None) -> Config:
    """The Config of the project that ``start`` (default: the cwd) is in."""
    start = Path.cwd() if start is None else Path(start)
    start = start.resolve()
    source, table = find_table(start)
    root = source.parent if source else start
    where = _where(source)
    unknown = sorted(set(table) - set(KEYS))
    if unknown:
        raise BadInput(f"{where}.{unknown[0]}: unknown key (known: {', '.join(KEYS)})")

    def folders(key: str) -> tuple[Path, ...]:
        value = table.get(key, list(FOLDER_LISTS[key]))
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise BadInput(f"{where}.{key}: expected a list of strings, got {value!r}")
        if not value:
            raise BadInput(f"{where}.{key}: expected at least one folder, got []")
        return tuple(Path(os.path.abspath(root / v)) for v in value)

    reports = Path(os.path.abspath(root / _text(table, "reports", where, REPORTS)))
    config = Config(root=root, source=source, specs=folders("specs"), import_roots=folders("import-roots"),
                    kernels=folders("kernels"), reports=reports, tier=_text(table, "tier", where, "ci"),
                    gate=_gate(table.get("gate", {}), f"{where}.gate", root),
                    toolchains=_toolchains(table.get("toolchains", {}), f"{where}.toolchains"),
                    known_defects=None if "known-defects" not in table else
                    Path(os.path.abspath(root / _text(table, "known-defects", where, ""))))
    for folder in config.kernels:
        config.package(folder)  # a kernel folder the import roots cannot reach is a mistake now, not at the gate
    return config


def _where(source: Path | None) -> str:
    return f"{shown(source)}: {TABLE}" if source else TABLE


def _text(table: dict, key: str, where: str, default: str) -> str:
    value = table.get(key, default)
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{where}.{key}: expected a string, got {value!r}")
    return value


def _subtable(table, where: str, keys: tuple[str, ...]) -> dict:
    """A sub-table of [tool.kernel-harness] with only the keys it may have."""
    if not isinstance(table, dict):
        raise BadInput(f"{where}: expected a table, got {table!r}")
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise BadInput(f"{where}.{unknown[0]}: unknown key (known: {', '.join(keys)})")
    return table


def _gate(table, where: str, root: Path) -> GatePolicy:
    table = _subtable(table, where, GATE_KEYS)
    effect = table.get("min-effect")
    if effect is not None and (isinstance(effect, bool) or not isinstance(effect, (int, float))
                               or not 0 <= effect < 1):  # NaN fails the comparison too
        raise BadInput(f"{where}.min-effect: expected a number in [0, 1), got {effect!r}")
    calibration = table.get("calibration")
    if calibration is not None:
        calibration = Path(os.path.abspath(root / _text(table, "calibration", where, "")))
    return GatePolicy(None if effect is None else float(effect), calibration)


def _toolchains(table, where: str) -> Toolchains:
    table = _subtable(table, where, TOOLCHAIN_KEYS)
    releases = {}
    for key in ("triton", "torch"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and RELEASE.match(v.strip()) for v in value):
            raise BadInput(f"{where}.{key}: expected a list of releases such as [\"3.6\", \"3.9.0\"], got {value!r}")
        releases[key] = tuple(dict.fromkeys(v.strip() for v in value))
    policy = table.get("regressions", "report")
    if policy not in REGRESSION_POLICIES:
        raise BadInput(f"{where}.regressions: expected one of {', '.join(REGRESSION_POLICIES)}, got {policy!r}")
    return Toolchains(releases["triton"], releases["torch"], policy)


def use_import_roots(config: Config) -> None:
    """Put the import roots first on sys.path (in their order), so the project's kernel modules import ahead of
    an installed package of the same name (the package index has a ``kernels``, for one)."""
    for root in reversed(config.import_roots):
        entry = str(root)
        if entry in sys.path:
            sys.path.remove(entry)
        sys.path.insert(0, entry)
