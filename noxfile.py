"""nox sessions: thin wrappers over ``python -m harness ...`` and pytest, so a machine without nox
(a GPU runner, say) runs the same commands directly.

Sessions use a virtualenv that sees the system's site packages, so a GPU runner's CUDA build of torch is
used, never replaced; on a fresh machine with no torch the session installs one itself
(``KH_TORCH_SPEC``, default ``torch==2.13.0``). ``nox --no-venv -s test`` runs in the current
environment instead.
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["test", "lint"]
nox.options.reuse_existing_virtualenvs = True
VENV = {"venv_params": ["--system-site-packages"]}
TORCH_SPEC = os.environ.get("KH_TORCH_SPEC", "torch==2.13.0")


def _pip(session: nox.Session, *args: str) -> None:
    session.run("python", "-m", "pip", "install", "--disable-pip-version-check", "-q", *args)


def _install(session: nox.Session, extras: str = "dev") -> None:
    """The project in editable mode, plus torch only when none is importable."""
    probe = "import importlib.util; print(importlib.util.find_spec('torch') is not None)"
    if "True" not in (session.run("python", "-c", probe, silent=True) or ""):
        _pip(session, TORCH_SPEC)
    _pip(session, "-e", f".[{extras}]")


@nox.session(**VENV)
def test(session: nox.Session) -> None:
    """The harness's own tests plus every generated kernel test (ci tier); args after -- go to pytest."""
    _install(session)
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(**VENV)
def lint(session: nox.Session) -> None:
    """ruff over the whole repository; args after -- go to ruff check."""
    _pip(session, "ruff")
    session.run("python", "-m", "ruff", "check", *(session.posargs or ["."]))


@nox.session(**VENV)
def validate(session: nox.Session) -> None:
    """Check every spec (or the spec files given after --): one line per problem, exit 2."""
    _install(session)
    session.run("python", "-m", "harness", "validate", *session.posargs)


@nox.session(**VENV)
def bench(session: nox.Session) -> None:
    """Benchmark every kernel (or --kernel NAME) and write a report (default reports/<device>/)."""
    _install(session)
    session.run("python", "-m", "harness", "bench", *session.posargs)


@nox.session(**VENV)
def report(session: nox.Session) -> None:
    """Re-render a report from stored results: nox -s report -- DIR/results.json --out DIR2."""
    _install(session)
    session.run("python", "-m", "harness", "report", *session.posargs)


@nox.session(**VENV)
def matrix(session: nox.Session) -> None:
    """Compile every Triton/CUDA kernel ahead of time for each target architecture; no GPU needed."""
    _install(session)
    session.run("python", "-m", "harness", "matrix", *session.posargs)
