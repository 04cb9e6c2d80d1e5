"""nox sessions: thin wrappers over ``python -m harness ...`` and pytest, so a machine without nox
(a GPU runner, say) runs the same commands directly. Arguments after ``--`` go to the command.

Every session that needs torch (test, validate, bench, profile, compare, matrix) runs in one shared virtualenv,
``.nox/kh``, set up once: torch is installed there only when the machine has none (``KH_TORCH_SPEC``,
default ``torch==2.13.0``), then the project in editable mode. It sees the system's site packages, so a GPU
runner's CUDA build of torch is used, never replaced. ``report``, ``new`` and ``lint`` need no torch and
never install it: each has a small env of its own. Every process a torch session starts caches its bytecode in
``.nox/pycache`` (``_bytecode_env``). ``rm -rf .nox`` starts over; ``nox --no-venv -s NAME`` runs a
session in the current environment and installs nothing.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import nox

nox.options.sessions = ["test", "lint"]
nox.options.reuse_existing_virtualenvs = True
ROOT = Path(__file__).resolve().parent
TORCH_SPEC = os.environ.get("KH_TORCH_SPEC", "torch==2.13.0")
SHARED = ROOT / ".nox" / "kh"  # the one env of the torch sessions
NO_VENV = "--no-venv" in sys.argv  # nox's own flag: then every session runs where nox runs
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")["project"]
LIGHT = {"venv_params": ["--system-site-packages"]}  # what the machine has already need not be installed


def _pip(session: nox.Session, *args: str, python: str = "python") -> None:
    # --no-compile: pip byte-compiles every module it installs, torch's and triton's thousands of them, of which a
    # run imports a fraction (compiled then, once). A fresh venv's torch==2.13.0 on the shared 2-core machine:
    # 24.4 s with pip's compile, 7.1 s without.
    session.run(python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-compile", *args,
                external=True)


def _extra(name: str) -> list[str]:
    return list(PYPROJECT["optional-dependencies"][name])


def _shared_python(session: nox.Session) -> str:
    """The shared env's interpreter, creating and filling the env on first use (or when pyproject.toml or
    KH_TORCH_SPEC changed since)."""
    if NO_VENV:
        return "python"
    python = SHARED / "bin" / "python"
    stamp = SHARED / ".kh-installed"
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + TORCH_SPEC.encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return str(python)
    if not python.exists():
        session.log(f"creating the shared env {SHARED.relative_to(ROOT)} (once, for every session that needs torch)")
        session.run(sys.executable, "-m", "venv", "--system-site-packages", str(SHARED), external=True)
    probe = "import importlib.util; print(importlib.util.find_spec('torch') is not None)"
    has_torch = subprocess.run([str(python), "-c", probe], capture_output=True, text=True).stdout.strip()
    if has_torch != "True":
        _pip(session, TORCH_SPEC, python=str(python))  # first, so nothing below pulls a CUDA build of torch
    _pip(session, "-e", f"{ROOT}[dev]", python=str(python))
    stamp.write_text(wanted)
    return str(python)


def _bytecode_env() -> dict[str, str | None]:
    """Python's bytecode cache for every process a shared-env session starts, in .nox/pycache (the caller's
    PYTHONPYCACHEPREFIX wins). PYTHONDONTWRITEBYTECODE is dropped: it keeps __pycache__ out of source trees,
    which the prefix does too, and with no cache at all every process compiles what it imports from source.
    pip installs without byte-compiling (``_pip``), so pandas, matplotlib and the harness itself were compiled
    again in each of the hundreds of processes the suite starts: on the shared 2-core machine the suite took
    387 s of pytest with no cache and 349 s with this one."""
    return {"PYTHONDONTWRITEBYTECODE": None,
            "PYTHONPYCACHEPREFIX": os.environ.get("PYTHONPYCACHEPREFIX") or str(ROOT / ".nox" / "pycache")}


def _in_shared(session: nox.Session, *args: str) -> None:
    session.run(_shared_python(session), *args, external=True, env=_bytecode_env())


@nox.session(venv_backend="none")
def test(session: nox.Session) -> None:
    """The harness's own tests plus every generated kernel test (ci tier); args after -- go to pytest.
    Spread over the machine's cores with pytest-xdist (``KH_TEST_WORKERS``: a count, ``auto``, or 0 for one
    process), unless the arguments pick the worker count themselves."""
    workers = os.environ.get("KH_TEST_WORKERS", "auto")
    picked = any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in session.posargs)
    spread = [] if picked or workers == "0" else ["-n", workers]
    # Inductor's pool of compile workers (one process per core, each importing torch) in every test process
    # that calls torch.compile: on a 2-core machine the pool cost more than it saved (the compile items of two
    # specs: 37 s of CPU with it, 26 s without). The caller's setting wins.
    env = _bytecode_env()
    if "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    # One intra-op thread per worker: pytest-xdist's workers already fill the cores, and torch's default (a
    # thread per core in every worker, and in every process a test starts) oversubscribes them. On the shared
    # 2-core machine, two workers over the ceilings, backward-kernel, TMA matmul tests and the layernorm spec's
    # items: 146 s of wall time with the default, 94 s with one thread. The caller's setting wins.
    if (spread or picked) and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"
    session.run(_shared_python(session), "-m", "pytest", *spread, *session.posargs, external=True, env=env)


@nox.session(venv_backend="none")
def validate(session: nox.Session) -> None:
    """Check every spec (or the spec files given after --): one line per problem, exit 2."""
    _in_shared(session, "-m", "harness", "validate", *session.posargs)


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Benchmark every kernel (or --kernel NAME) and write a report (default build/reports/<device>/)."""
    _in_shared(session, "-m", "harness", "bench", *session.posargs)


@nox.session(venv_backend="none")
def profile(session: nox.Session) -> None:
    """Nsight Compute on each kernel's candidate at its headline bench case (or --kernel NAME), with a
    bottleneck diagnosis, into profile.json beside the bench results; needs ncu and an NVIDIA GPU."""
    _in_shared(session, "-m", "harness", "profile", *session.posargs)


@nox.session(venv_backend="none")
def compare(session: nox.Session) -> None:
    """The merge gate on two stored runs: nox -s compare -- BASE/results.json PR/results.json --out DIR."""
    _in_shared(session, "-m", "harness", "compare", *session.posargs)


@nox.session(venv_backend="none")
def matrix(session: nox.Session) -> None:
    """Compile every Triton/CUDA kernel ahead of time for each target architecture; no GPU needed.
    ``-- --triton 3.5,3.6,3.9``: once per Triton release, each in its own cached environment, compared."""
    _in_shared(session, "-m", "harness", "matrix", *session.posargs)


@nox.session(venv_backend="none")
def test_releases(session: nox.Session) -> None:
    """The generated CPU tests under each Triton / torch release (``-- --triton 3.6,3.9``; default: the
    [tool.kernel-harness.toolchains] table), each in its own cached environment; args after a second -- go to pytest."""
    _in_shared(session, "-m", "harness", "test-releases", *session.posargs)


@nox.session(**LIGHT)
def report(session: nox.Session) -> None:
    """Re-render a report from stored results, no torch needed: nox -s report -- DIR/results.json --out DIR2."""
    if not NO_VENV:
        _pip(session, *_extra("report"))
        _pip(session, "--no-deps", "-e", ".")  # the harness without torch and triton: rendering needs neither
    session.run("python", "-m", "harness", "report", *session.posargs)


@nox.session(**LIGHT)
def new(session: nox.Session) -> None:
    """Write the skeletons of a new kernel, no torch needed: nox -s new -- NAME (specs/NAME.toml, kernels/NAME.py)."""
    if not NO_VENV:
        _pip(session, "--no-deps", "-e", ".")  # the templates need only the standard library
    session.run("python", "-m", "harness", "new", *session.posargs)


@nox.session(**LIGHT)
def workflows(session: nox.Session) -> None:
    """Check .github/workflows/ (or the files after --): GitHub's schema, then zizmor --offline at low severity
    and above. tests/test_workflows.py (nox -s test) checks the rules no linter knows: docs/ci.md."""
    files = session.posargs or sorted(str(p.relative_to(ROOT)) for p in (ROOT / ".github" / "workflows").glob("*.y*ml"))
    if not NO_VENV:
        _pip(session, *_extra("workflows"))
    session.run("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *files)
    session.run("zizmor", "--offline", "--min-severity", "low", *files)


@nox.session(**LIGHT)
def lint(session: nox.Session) -> None:
    """ruff over the whole repository; args after -- go to ruff check."""
    if not NO_VENV:
        _pip(session, *[r for r in _extra("dev") if r.startswith("ruff")])
    session.run("python", "-m", "ruff", "check", *(session.posargs or ["."]))
