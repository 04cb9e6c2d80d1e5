"""``affected``: which kernels a change touches, so the GPU job tests and gates only those.

The rule (``affected``): ``specs/<k>.toml`` means kernel k; a module under ``kernels/`` (``<m>.py``, or
``<m>.cu``, its CUDA C++ source) means every kernel that uses it: the modules its spec names (reference,
backends, peers), and what those import from ``kernels``, transitively (:func:`kernel_modules`, read
statically, no import). Documentation (``docs/``, any ``*.md``, ``reports/``, a few repository files) means
nothing; any other path means every kernel. Unknown paths count as everything on purpose: a module no kernel
uses as far as the static reading sees, or a change to ``harness/``, ``pyproject.toml`` or ``noxfile.py``
(dependencies) can change any kernel's result, and a GPU run too many is cheaper than a regression let through.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from harness.cli.registry import EXIT_OK, BadInput, command, options

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


def _imported_kernels(path: Path) -> set[str]:
    """The ``kernels.<m>`` modules a Python file imports (``import kernels.m``, ``from kernels.m import x``,
    ``from kernels import m``), anywhere in it."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names if a.name.startswith("kernels.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "kernels":
                found |= {a.name for a in node.names}
            elif node.module.startswith("kernels."):
                found.add(node.module.split(".")[1])
    return found


_IMPORT_PATH = re.compile(r"""["']kernels\.([A-Za-z_][A-Za-z0-9_]*)[.:]""")


def kernel_modules(specs_dir: Path, kernels_dir: Path, known: Iterable[str]) -> dict[str, set[str]]:
    """For each kernel of ``known``: the ``kernels/`` modules it runs, i.e. those its spec names and,
    transitively, what they import from ``kernels``."""
    imports: dict[str, set[str]] = {}

    def closure(mods: set[str]) -> set[str]:
        todo, seen = list(mods), set()
        while todo:
            m = todo.pop()
            if m in seen:
                continue
            seen.add(m)
            if m not in imports:
                imports[m] = _imported_kernels(kernels_dir / f"{m}.py")
            todo += imports[m]
        return seen

    out = {}
    for k in known:
        try:
            named = set(_IMPORT_PATH.findall((specs_dir / f"{k}.toml").read_text(encoding="utf-8")))
        except OSError:
            named = set()
        out[k] = closure(named | {k})
    return out


def affected(changed: Iterable[str], known: Iterable[str], uses: Mapping[str, set[str]] | None = None) -> Affected:
    """The kernels that ``changed`` (repository-relative paths, as git prints them) touch, of ``known``;
    ``uses`` maps each kernel to the kernels/ modules it runs (:func:`kernel_modules`; default: its own)."""
    known = tuple(sorted(set(known)))
    uses = uses if uses is not None else {k: {k} for k in known}
    found: set[str] = set()
    paths = sorted({p.strip() for p in changed if p.strip()})
    for path in paths:
        p = PurePosixPath(path)
        if len(p.parts) == 2 and p.parts[0] == "specs" and p.suffix == ".toml":
            found.add(p.stem)  # a spec that was deleted names a kernel no longer here: filtered below
            continue
        users = {k for k in known if p.stem in uses.get(k, ())}
        if len(p.parts) == 2 and p.parts[0] == "kernels" and p.suffix in (".py", ".cu") and users:
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


def output_lines(result: Affected) -> list[str]:
    """``key=value`` lines, the format of ``$GITHUB_OUTPUT`` (values never hold a newline)."""
    return [f"kernels={','.join(result.kernels)}", f"run={'true' if result.run else 'false'}",
            f"all={'true' if result.everything else 'false'}", f"reason={result.reason}"]


def _options(p) -> None:
    p.add_argument("--base", help="the base revision (a pull request's base SHA)")
    p.add_argument("--head", default="HEAD", help="the head revision (default HEAD)")
    p.add_argument("--all", action="store_true", help="every kernel (nightly and manual runs)")
    p.add_argument("--specs-dir", default="specs")
    p.add_argument("--github-output", metavar="FILE", help="also append the key=value lines to FILE ($GITHUB_OUTPUT)")


@command("affected", "the kernels a change touches (git diff BASE...HEAD), for CI: key=value lines")
@options(_options)
def cmd_affected(args) -> int:
    known = [p.stem for p in sorted(Path(args.specs_dir).glob("*.toml"))]
    if not known:
        raise BadInput(f"{args.specs_dir}: no spec files (*.toml)")
    if args.all:
        result = Affected(tuple(known), True, "every kernel requested (--all)")
    elif args.base:
        uses = kernel_modules(Path(args.specs_dir), Path(args.specs_dir).parent / "kernels", known)
        result = affected(changed_files(args.base, args.head, Path.cwd()), known, uses)
    else:
        raise BadInput("affected: give --base REV (or --all)")
    lines = output_lines(result)
    print("\n".join(lines))
    if args.github_output:
        with open(args.github_output, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return EXIT_OK
