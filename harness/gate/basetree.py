"""A git ref's kernels and specs, importable beside the working tree's under a module root of their own.

Both sides' kernel modules have one name (``kernels.<name>``, or ``liger_kernel.ops.<name>``); to load both
into one process, ``git archive REF`` puts the base's kernel folders (the project's ``[tool.kernel-harness]
kernels``, each at its package's path below its import root) and its spec files under ``<tmp>/kh_base_<sha>/``,
and every reference to a kernel folder's package in them is rewritten to ``kh_base_<sha>.<package>``: import
statements in the Python files (found with ``ast``, edited in place so line numbers, which Triton's source
lookup relies on, stay put) and ``module:function`` paths in the spec files. What the kernels import from
outside their folders (``liger_kernel.utils``), and an import built from a string at run time
(``importlib.import_module("kernels.x")``), is not rewritten: it loads the PR's module.
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.config import Config, load_config


class GitError(ValueError):
    """The ref or the repository cannot give a base; the message is one line."""


@dataclass(frozen=True)
class BaseTree:
    ref: str
    sha: str
    package: str                  # the module root: kh_base_<sha12>
    root: str                     # the folder to put on sys.path
    specs_dir: str                # the base's spec files (of every spec folder), import paths rewritten
    aa: bool                      # kernels and specs byte-identical to the working tree's
    spec_sha256: dict = field(default_factory=dict)   # spec file name -> SHA-256 at REF (before rewriting)
    digest: str = ""              # SHA-256 over every kernel and spec file at REF: equal digests, an A/A pair
    packages: tuple[str, ...] = ()   # the kernel folders' packages, each below ``root/package``

    def kernel_folders(self) -> tuple[Path, ...]:
        return tuple(Path(self.root, self.package, *p.split(".")) for p in self.packages)


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
                top = package.split(".")[0]
                edits.append((node.end_lineno - 1, node.end_col_offset, f"; {top} = {prefix}.{top}".encode()))
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


def _extract(archive: bytes, dest: Path, moves: dict[str, str]) -> None:
    """The archive's files below each key of ``moves`` (a repository-relative folder) extracted below its value
    (a folder relative to ``dest``); every other member is skipped."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = []
        for m in tar.getmembers():
            for src, dst in sorted(moves.items(), key=lambda kv: -len(kv[0])):  # a folder inside another first
                if m.name == src or m.name.startswith(src + "/"):
                    m.name = dst + m.name[len(src):]
                    members.append(m)
                    break
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, members=members, filter="data")
        else:  # pragma: no cover  (Python < 3.12 without the filter backport; git archive holds plain files)
            tar.extractall(dest, members=members)


def _relative(folder: Path, repo: Path, what: str) -> str:
    try:
        return Path(folder).resolve().relative_to(repo).as_posix()
    except ValueError:
        raise GitError(f"{what} {folder}: outside the repository {repo}") from None


def _spec_files(folders) -> dict[str, bytes]:
    """The spec files of every folder by file name (a kernel's name is its spec file's, so names are unique)."""
    out: dict[str, bytes] = {}
    for folder in folders:
        for rel, data in _files(Path(folder)).items():
            out.setdefault(rel, data)
    return out


def _digest(top: Path, folders) -> str:
    h = hashlib.sha256()
    for folder in folders:
        for rel, data in _files(top / folder).items():
            h.update(f"{folder}/{rel}\0{len(data)}\0".encode())
            h.update(data)
    return h.hexdigest()


def materialize(ref: str, repo: Path, dest: Path, specs_dir: Path | Sequence[Path],
                config: Config | None = None, *, prefix: str = "kh_base", option: str = "--against") -> BaseTree:
    """``ref``'s kernel folders and spec folders under ``dest/<prefix>_<sha12>``, ready to import: each kernel
    folder at its package's path (``kh_base_<sha12>/liger_kernel/ops``), the spec files of every spec folder in
    one folder. ``config``: the project's folders (default: the configuration ``repo`` is in). ``prefix``
    tells two trees of one commit apart (the base and a pull request's candidate side); ``option`` is the
    command-line option errors name."""
    repo = repo.resolve()
    config = config or load_config(repo)
    try:
        sha = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}") if ref else ""
    except GitError:
        sha = ""
    if not sha:
        raise GitError(f"{option} {ref!r}: not a commit in {repo}")
    spec_folders = [Path(specs_dir)] if isinstance(specs_dir, (str, Path)) else [Path(d) for d in specs_dir]
    specs_rel = [_relative(d, repo, "--specs") for d in spec_folders]
    packages = {_relative(k, repo, f"{config.where('kernels')}:"): config.package(k) for k in config.kernels}
    present = set(git(repo, "ls-tree", "-d", "--name-only", sha, "--", *packages, *specs_rel).splitlines())
    missing = [k for k in packages if k not in present]
    if missing:
        raise GitError(f"{option} {ref}: commit {sha[:12]} has no {missing[0]}/ folder")
    root_name = f"{prefix}_{sha[:12]}"
    top = dest / root_name
    top.mkdir(parents=True, exist_ok=True)
    moves = {rel: package.replace(".", "/") for rel, package in packages.items()}
    moves.update({rel: specs_rel[0] for rel in specs_rel if rel in present})
    _extract(git(repo, "archive", "--format=tar", sha, "--", *sorted(set(moves)), binary=True), top, moves)
    (top / "__init__.py").write_text('"""A tree of one commit for the merge gate (git archive)."""\n')
    digest = _digest(top, sorted({*moves.values()}))
    base_specs = _files(top / specs_rel[0])
    aa = base_specs == _spec_files(spec_folders) and all(
        _files(top / moves[rel]) == _files(repo / rel) for rel in packages)
    for package in packages.values():
        for rel, data in _files(top / package.replace(".", "/")).items():
            if rel.endswith(".py"):
                path = top / package.replace(".", "/") / rel
                try:
                    for other in packages.values():
                        data = rewrite_imports(data, other, root_name)
                    path.write_bytes(data)
                except SyntaxError:
                    pass  # left as it is: importing it fails the same way on both sides' terms, as that case's error
    hashes = {}
    for rel, data in base_specs.items():
        if rel.endswith(".toml"):
            hashes[Path(rel).name] = hashlib.sha256(data).hexdigest()
            text = data.decode("utf-8", "replace")
            for package in packages.values():
                text = rewrite_spec(text, package, root_name)
            (top / specs_rel[0] / rel).write_text(text, encoding="utf-8")
    return BaseTree(ref, sha, root_name, str(dest), str(top / specs_rel[0]), aa, hashes, digest,
                    tuple(packages.values()))
