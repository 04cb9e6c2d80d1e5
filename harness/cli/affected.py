"""``affected``: which kernels a change touches, so the GPU job tests and gates only those.

The rule (``affected``): ``<spec folder>/<k>.toml`` means kernel k; a module in a kernel folder (``<m>.py``, or
``<m>.cu``, its CUDA C++ source) means every kernel that uses it: the modules its spec names (reference,
backends, peers), and what those import from the folder's package, transitively (:func:`kernel_modules`, read
statically, no import). The folders are the project's (``[tool.kernel-harness] specs`` and ``kernels``,
default ``specs/`` and ``kernels/``). Documentation (``docs/``, any ``*.md``, ``reports/``, a few repository
files) means nothing; any other path means every kernel. Unknown paths count as everything on purpose: a module
no kernel uses as far as the static reading sees, or a change to ``harness/``, ``pyproject.toml`` or
``noxfile.py`` (dependencies) can change any kernel's result, and a GPU run too many is cheaper than a
regression let through.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harness.cli.registry import EXIT_OK, BadInput, command, options, specs_option
from harness.config import load_config
from harness.spec.select import spec_folders

# Paths that never change a kernel's correctness or speed.
DOCS_ONLY = ("docs/*", "*.md", "reports/*", "LICENSE*", ".gitignore", ".github/ISSUE_TEMPLATE/*")


@dataclass(frozen=True)
class Affected:
    kernels: tuple[str, ...]      # sorted; every kernel when ``everything``
    everything: bool
    reason: str                   # one line: why these kernels (the first path that decided, when everything)

    @property
    def run(self) -> bool:
        return bool(self.kernels)


def _docs_only(path: str) -> bool:
    return any(fnmatch.fnmatch(path, pat) for pat in DOCS_ONLY)


def _imported_kernels(path: Path, package: str = "kernels") -> set[str]:
    """The ``<package>.<m>`` modules a Python file imports (``import kernels.m``, ``from kernels.m import x``,
    ``from kernels import m``, and relatively, ``from .m import x``, ``from . import m``), anywhere in it."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    found, prefix = set(), package + "."

    def below(name: str) -> str | None:
        return name[len(prefix):].split(".")[0] if name.startswith(prefix) else None

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {m for a in node.names if (m := below(a.name))}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if (node.level == 0 and module == package) or (node.level == 1 and not module):
                found |= {a.name for a in node.names}
            elif node.level == 1:
                found.add(module.split(".")[0])
            elif node.level == 0 and below(module):
                found.add(below(module))
    return found


def _import_paths(package: str) -> re.Pattern:
    """A spec's quoted ``<package>.<m>:attr`` (or ``<package>.<m>.sub:attr``) import paths; group 1 is m."""
    return re.compile(rf"""["']{re.escape(package)}\.([A-Za-z_][A-Za-z0-9_]*)[.:]""")


def kernel_modules(specs_dir, kernels_dir: Path, known: Iterable[str], package: str = "kernels"
                   ) -> dict[str, set[str]]:
    """For each kernel of ``known``: the modules of ``kernels_dir`` (the package ``package``) it runs, i.e.
    those its spec names and, transitively, what they import from the package. ``specs_dir``: a spec folder,
    or several (the first holding ``<k>.toml`` is the kernel's)."""
    folders = [Path(specs_dir)] if isinstance(specs_dir, (str, Path)) else [Path(d) for d in specs_dir]
    named_in = _import_paths(package)
    imports: dict[str, set[str]] = {}

    def closure(mods: set[str]) -> set[str]:
        todo, seen = list(mods), set()
        while todo:
            m = todo.pop()
            if m in seen:
                continue
            seen.add(m)
            if m not in imports:
                imports[m] = _imported_kernels(kernels_dir / f"{m}.py", package)
            todo += imports[m]
        return seen

    out = {}
    for k in known:
        spec = next((f / f"{k}.toml" for f in folders if (f / f"{k}.toml").is_file()), None)
        try:
            named = set(named_in.findall(spec.read_text(encoding="utf-8"))) if spec else set()
        except OSError:
            named = set()
        out[k] = closure(named | {k})
    return out


def affected(changed: Iterable[str], known: Iterable[str], uses: Mapping[str, set[str]] | None = None, *,
             specs: Iterable[str] = ("specs",), kernels: Iterable[str] = ("kernels",)) -> Affected:
    """The kernels that ``changed`` (repository-relative paths, as git prints them) touch, of ``known``;
    ``uses`` maps each kernel to the kernel-folder modules it runs (:func:`kernel_modules`; default: its own);
    ``specs`` and ``kernels``: the spec and kernel folders, repository-relative. With several kernel folders a
    module is known by its name alone, so a change to one of two same-named modules counts for both."""
    known = tuple(sorted(set(known)))
    uses = uses if uses is not None else {k: {k} for k in known}
    spec_folders, kernel_folders = set(specs), set(kernels)
    found: set[str] = set()
    paths = sorted({p.strip() for p in changed if p.strip()})
    for path in paths:
        p = PurePosixPath(path)
        if p.parent.as_posix() in spec_folders and p.suffix == ".toml":
            found.add(p.stem)  # a spec that was deleted names a kernel no longer here: filtered below
            continue
        users = {k for k in known if p.stem in uses.get(k, ())}
        if p.parent.as_posix() in kernel_folders and p.suffix in (".py", ".cu") and users:
            found |= users
            continue
        if _docs_only(path):
            continue
        return Affected(known, True, f"{path} may change every kernel")
    gone = sorted(found - set(known))
    kernels = tuple(sorted(found & set(known)))
    if not paths:
        reason = "no file changed"
    elif not kernels:
        reason = "documentation only" if not gone else f"only removed kernels ({', '.join(gone)})"
    else:
        reason = f"{len(kernels)} of {len(known)} kernels changed"
    return Affected(kernels, False, reason)


def changed_files(base: str, head: str, repo: Path) -> list[str]:
    """``git diff --name-only base...head``: the pull request's own changes, from the merge base."""
    from harness.gate.basetree import GitError, git

    for ref in (base, head):
        if ref.startswith("-"):
            raise BadInput(f"affected: {ref!r} is not a git revision")
        try:
            git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        except GitError:
            raise BadInput(f"affected: {ref}: no such commit here (a shallow clone? check out with fetch-depth: 0)"
                           ) from None
    try:
        return git(repo, "diff", "--name-only", "--no-renames", f"{base}...{head}").splitlines()
    except GitError as exc:
        raise BadInput(f"affected: {exc}") from None


def _repo() -> Path:
    from harness.gate.basetree import GitError, repo_root

    try:
        return repo_root(Path.cwd())
    except GitError as exc:
        raise BadInput(f"affected: not in a git repository ({exc})") from None


def _relative(folder: Path, repo: Path) -> str:
    """A folder as git names paths: relative to the repository's top, with slashes."""
    try:
        return Path(folder).resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:
        raise BadInput(f"affected: {folder} is outside the repository {repo}") from None


def output_lines(result: Affected) -> list[str]:
    """``key=value`` lines, the format of ``$GITHUB_OUTPUT`` (values never hold a newline)."""
    return [f"kernels={','.join(result.kernels)}", f"run={'true' if result.run else 'false'}",
            f"all={'true' if result.everything else 'false'}", f"reason={result.reason}"]


def _options(p) -> None:
    p.add_argument("--base", help="the base revision (a pull request's base SHA)")
    p.add_argument("--head", default="HEAD", help="the head revision (default HEAD)")
    p.add_argument("--all", action="store_true", help="every kernel (nightly and manual runs)")
    specs_option(p)
    p.add_argument("--github-output", metavar="FILE", help="also append the key=value lines to FILE ($GITHUB_OUTPUT)")


@command("affected", "the kernels a change touches (git diff BASE...HEAD), for CI: key=value lines")
@options(_options)
def cmd_affected(args) -> int:
    folders = spec_folders(args.specs_dir)
    known = sorted({p.stem for f in folders for p in f.glob("*.toml")})
    if not known:
        raise BadInput(f"{', '.join(map(str, folders))}: no spec files (*.toml)")
    if args.all:
        result = Affected(tuple(known), True, "every kernel requested (--all)")
    elif args.base:
        config, repo = load_config(), _repo()
        uses: dict[str, set[str]] = {}
        for folder in config.kernels:
            for k, mods in kernel_modules(folders, folder, known, config.package(folder)).items():
                uses.setdefault(k, set()).update(mods)
        result = affected(changed_files(args.base, args.head, repo), known, uses,
                          specs=[_relative(f, repo) for f in folders],
                          kernels=[_relative(f, repo) for f in config.kernels])
    else:
        raise BadInput("affected: give --base REV (or --all)")
    lines = output_lines(result)
    print("\n".join(lines))
    if args.github_output:
        with open(args.github_output, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return EXIT_OK
