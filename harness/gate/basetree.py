"""A git ref's kernels and specs, importable beside the working tree's under a module root of their own.

Both sides' kernel modules are called ``kernels.<name>``; to load both into one process, ``git archive REF``
puts the base's ``kernels/`` and specs folder under ``<tmp>/kh_base_<sha>/``, and every reference to the
``kernels`` package in them is rewritten to ``kh_base_<sha>.kernels``: import statements in the Python files
(found with ``ast``, edited in place so line numbers, which Triton's source lookup relies on, stay put) and
``module:function`` paths in the spec files. An import built from a string at run time
(``importlib.import_module("kernels.x")``) is not rewritten: it would load the PR's module.
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path


class GitError(ValueError):
    """The ref or the repository cannot give a base; the message is one line."""


@dataclass(frozen=True)
class BaseTree:
    ref: str
    sha: str
    package: str                  # the module root: kh_base_<sha12>
    root: str                     # the folder to put on sys.path
    specs_dir: str                # the base's specs, import paths rewritten under ``package``
    aa: bool                      # kernels and specs byte-identical to the working tree's
    spec_sha256: dict = field(default_factory=dict)   # spec file name -> SHA-256 at REF (before rewriting)


def git(repo: Path, *args: str, binary: bool = False):
    try:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"git {args[0]}: {exc}") from None
    if done.returncode != 0:
        text = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git {' '.join(args[:2])}: {text[-1] if text else f'exit code {done.returncode}'}")
    return done.stdout if binary else done.stdout.decode("utf-8", "replace").strip()


def repo_root(start: Path) -> Path:
    return Path(git(start, "rev-parse", "--show-toplevel"))


def rewrite_imports(source: bytes, package: str, prefix: str) -> bytes:
    """``import kernels.x`` / ``from kernels.x import y`` (any depth, in functions too) moved under ``prefix``."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, bytes]] = []  # (line index, byte column, text to insert)

    def ours(name: str | None) -> bool:
        return bool(name) and (name == package or name.startswith(package + "."))

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and ours(node.module):
            line = lines[node.lineno - 1]
            m = re.compile(rb"from\s+").match(line, node.col_offset)
            if m is None:
                raise GitError(f"cannot rewrite the import on line {node.lineno}")
            edits.append((node.lineno - 1, m.end(), prefix.encode() + b"."))
        elif isinstance(node, ast.Import):
            rebind = False
            for alias in node.names:
                if ours(alias.name):
                    edits.append((alias.lineno - 1, alias.col_offset, prefix.encode() + b"."))
                    rebind |= alias.asname is None
            if rebind:  # ``import kernels.x`` binds ``kernels``; after the rewrite it would bind the root
                edits.append((node.end_lineno - 1, node.end_col_offset, f"; {package} = {prefix}.{package}".encode()))
    for i, col, text in sorted(edits, reverse=True):
        lines[i] = lines[i][:col] + text + lines[i][col:]
    return b"".join(lines)


def rewrite_spec(text: str, package: str, prefix: str) -> str:
    """Quoted ``kernels.mod:attr`` import paths moved under ``prefix``; every other string kept."""
    pattern = re.compile(r"""(["'])(""" + re.escape(package) + r"""(?:\.[A-Za-z_]\w*)*:[A-Za-z_][\w.]*)\1""")
    return pattern.sub(lambda m: f"{m.group(1)}{prefix}.{m.group(2)}{m.group(1)}", text)


def _files(folder: Path) -> dict[str, bytes]:
    """A folder's files by relative path, without caches (what a checkout would hold)."""
    if not folder.is_dir():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def _extract(archive: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover  (Python < 3.12 without the filter backport; git archive holds plain files)
            tar.extractall(dest)


def materialize(ref: str, repo: Path, dest: Path, specs_dir: Path, package: str = "kernels") -> BaseTree:
    """``ref``'s ``package`` folder and ``specs_dir`` under ``dest/kh_base_<sha12>``, ready to import."""
    repo = repo.resolve()
    try:
        sha = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}") if ref else ""
    except GitError:
        sha = ""
    if not sha:
        raise GitError(f"--against {ref!r}: not a commit in {repo}")
    try:
        specs_rel = specs_dir.resolve().relative_to(repo).as_posix()
    except ValueError:
        raise GitError(f"--specs-dir {specs_dir}: outside the repository {repo}") from None
    wanted = [package, specs_rel]
    present = git(repo, "ls-tree", "--name-only", sha, "--", *wanted).splitlines()
    if package not in present:
        raise GitError(f"--against {ref}: commit {sha[:12]} has no {package}/ folder")
    root_name = f"kh_base_{sha[:12]}"
    top = dest / root_name
    top.mkdir(parents=True, exist_ok=True)
    _extract(git(repo, "archive", "--format=tar", sha, "--", *present, binary=True), top)
    (top / "__init__.py").write_text('"""A base tree for the merge gate (git archive)."""\n')
    base_kernels, base_specs = _files(top / package), _files(top / specs_rel)
    aa = base_kernels == _files(repo / package) and base_specs == _files(repo / specs_rel)
    for rel, data in base_kernels.items():
        if rel.endswith(".py"):
            try:
                (top / package / rel).write_bytes(rewrite_imports(data, package, root_name))
            except SyntaxError:
                pass  # left as it is: importing it fails the same way on both sides' terms, as that case's error
    hashes = {}
    for rel, data in base_specs.items():
        if rel.endswith(".toml"):
            hashes[Path(rel).name] = hashlib.sha256(data).hexdigest()
            (top / specs_rel / rel).write_text(rewrite_spec(data.decode("utf-8", "replace"), package, root_name),
                                               encoding="utf-8")
    return BaseTree(ref, sha, root_name, str(dest), str(top / specs_rel), aa, hashes)
