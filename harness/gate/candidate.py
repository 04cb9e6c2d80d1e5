"""The GPU gate's candidate tree: the base checkout, with the pull request's spec and kernel folders in it.

The trusted jobs check out the base (its harness, its pyproject.toml and configuration, its tests) and take
from the pull request's head commit only the folders ``[tool.kernel-harness]`` names as ``specs`` and
``kernels``, as data: the candidate side of the gate. The pull request's copy of the harness, of ``affected``,
of the workflows or of pyproject.toml is never on disk where a trusted process would import it.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.config import Config
from harness.steps import BadInput


def folders(config: Config, repo: Path) -> list[str]:
    """The spec and kernel folders, relative to ``repo`` as git names them; never the repository itself."""
    out = []
    for folder in (*config.specs, *config.kernels):
        try:
            rel = Path(folder).resolve().relative_to(repo.resolve()).as_posix()
        except ValueError:
            raise BadInput(f"{config.where('kernels')}: {folder} is outside the repository {repo}") from None
        if rel in ("", ".") or rel.split("/")[0] in (".git", ".github"):
            raise BadInput(f"{config.where('kernels')}: {rel or '.'}: the candidate side must be a subfolder")
        if rel not in out:
            out.append(rel)
    return out


def take(repo: Path, sha: str, paths: list[str], source: Path | None = None) -> list[str]:
    """Fetch ``sha`` from ``source`` (a checkout of the pull request) into ``repo`` and replace ``paths`` in
    ``repo``'s work tree by their version at ``sha`` (files the pull request deleted are deleted)."""
    from harness.gate.basetree import GitError, git

    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise BadInput(f"--head {sha!r}: not a 40-hex commit")
    try:
        if source is not None:
            git(repo, "fetch", "--no-tags", "--quiet", str(source), sha)
        git(repo, "cat-file", "-e", f"{sha}^{{commit}}")
        present = [p for p in paths if git(repo, "ls-tree", "-d", "--name-only", sha, "--", p).strip()]
        missing = sorted(set(paths) - set(present))
        if missing:
            raise BadInput(f"{sha[:12]}: has no {', '.join(missing)}: a pull request may not remove a spec or "
                           "kernel folder")
        git(repo, "restore", f"--source={sha}", "--worktree", "--", *paths)
    except GitError as exc:
        raise BadInput(f"ci-candidate: {exc}") from None
    return paths
