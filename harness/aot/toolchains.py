"""An environment per Triton (or torch) release, built once and cached: the release's wheel unpacked into a
folder of its own, put first on the ``PYTHONPATH`` of a child process of this very interpreter.

Everything else (torch, the harness, pytest, the project) comes from the running environment, so a release
costs one ``pip install --no-deps --target`` of its wheel (docs/architectures.md has the measured cost). A folder on
``PYTHONPATH`` comes ahead of site-packages, so the child imports the release's ``triton`` (and reads its
``triton-*.dist-info``) and never the one installed. A torch release is installed with its dependencies
(a CUDA build of torch cannot import without its nvidia-* libraries), which can be several GB: the size is
printed once it is built.

The cache folder: ``--cache DIR``, else ``$KH_TOOLCHAINS_CACHE``, else ``$XDG_CACHE_HOME/kernel-harness/toolchains``
(``~/.cache/kernel-harness/toolchains``). One folder per package, release and Python version
(``triton-3.6-cp311``), with a stamp of what pip installed; delete a folder to build it again.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.config import RELEASE
from harness.steps import BadInput

PACKAGES = ("triton", "torch")
CACHE_ENV = "KH_TOOLCHAINS_CACHE"
STAMP = ".kh-release.json"


@dataclass(frozen=True)
class Release:
    package: str        # "triton" or "torch"
    requested: str      # as written: "3.6" (the newest 3.6.x) or "3.6.0"

    @property
    def requirement(self) -> str:
        exact = self.requested.count(".") >= 2 or "+" in self.requested
        return f"{self.package}=={self.requested}" + ("" if exact else ".*")

    def __str__(self) -> str:
        return f"{self.package} {self.requested}"


@dataclass(frozen=True)
class Overlay:
    """A built release: the folder to put first on PYTHONPATH and the version pip installed there; no folder
    when the running environment has the release already."""
    release: Release
    path: Path | None
    version: str


def parse_releases(package: str, values, where: str) -> tuple[Release, ...]:
    """Releases from ``values`` (strings, each possibly comma-separated), in order, each once; ``where`` names
    the option or key in the one-line error."""
    out: list[Release] = []
    for item in values or ():
        for text in str(item).split(","):
            text = text.strip()
            if not text:
                continue
            if not RELEASE.match(text):
                raise BadInput(f"{where}: {text!r} is not a {package} release (expected e.g. 3.6 or 3.6.0)")
            if all(r.requested != text for r in out):
                out.append(Release(package, text))
    return tuple(out)


def cache_root(option: str | None = None) -> Path:
    if option:
        return Path(option).expanduser().resolve()
    if env := os.environ.get(CACHE_ENV, "").strip():
        return Path(env).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or Path.home() / ".cache"
    return Path(base) / "kernel-harness" / "toolchains"


def python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def _installed_version(folder: Path, package: str) -> str | None:
    for meta in sorted(folder.glob(f"{package}-*.dist-info/METADATA")):
        for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Version:"):
                return line.split(":", 1)[1].strip()
    return None


def _stamped(folder: Path, release: Release) -> Overlay | None:
    try:
        stamp = json.loads((folder / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict) or stamp.get("requirement") != release.requirement:
        return None
    version = _installed_version(folder, release.package)
    return Overlay(release, folder, version) if version and version == stamp.get("version") else None


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def _base(version: str) -> str:
    return version.split("+", 1)[0]


def same_release(a: str, b: str) -> bool:
    """Whether two version strings name one release: equal, or equal but for a local label only one has
    (a wheel's METADATA says 2.11.0 where torch.__version__ says 2.11.0+cu130)."""
    return a == b or (("+" not in a or "+" not in b) and _base(a) == _base(b))


def running(release: Release) -> Overlay | None:
    """The running environment's own install of the package, where it is the release asked for ("3.9"
    matches 3.9.0; "2.13.0" matches 2.13.0+cpu, as pip's == does): no overlay needed."""
    try:
        have = metadata.version(release.package)
    except metadata.PackageNotFoundError:
        return None
    want = release.requested
    if "+" in want:
        return Overlay(release, None, have) if have == want else None
    return Overlay(release, None, have) if _base(have) == want or _base(have).startswith(want + ".") else None


def ensure(release: Release, root: Path, *, run: Callable = subprocess.run, log: Callable[[str], None] = print
           ) -> Overlay:
    """The release: the running environment's when it has it, else its overlay under ``root``, installed with
    pip the first time (BadInput when pip cannot)."""
    if (here := running(release)) is not None:
        return here
    folder = root / f"{release.package}-{release.requested}-{python_tag()}"
    if (built := _stamped(folder, release)) is not None:
        return built
    root.mkdir(parents=True, exist_ok=True)
    partial = root / f".{folder.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-compile",
           "--target", str(partial), release.requirement]
    if release.package == "triton":
        cmd.insert(-1, "--no-deps")  # triton needs nothing the running environment lacks
    log(f"toolchains: installing {release.requirement} into {folder} (once)")
    proc = run(cmd, capture_output=True, text=True)
    version = _installed_version(partial, release.package) if proc.returncode == 0 else None
    if version is None:
        shutil.rmtree(partial, ignore_errors=True)
        lines = [ln for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
        why = next((ln for ln in lines if ln.startswith("ERROR")), lines[-1] if lines else "no output")
        raise BadInput(f"{release}: pip could not install {release.requirement}: {why.strip()}")
    if release.package == "torch":  # torch's pinned triton would shadow the one the run asks for
        for path in [*partial.glob("triton"), *partial.glob("triton-*.dist-info")]:
            shutil.rmtree(path)
    (partial / STAMP).write_text(json.dumps({"requirement": release.requirement, "version": version}) + "\n",
                                 encoding="utf-8")
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)
    log(f"toolchains: {release.package} {version}: {_size(folder) / 1e9:.1f} GB in {folder}")
    return Overlay(release, folder, version)


def child_env(overlays, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child process that imports the overlays' packages (the first one listed wins)."""
    env = dict(os.environ if base is None else base)
    paths = [str(o.path) for o in overlays if o.path is not None]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def probe_versions(env: dict[str, str], cwd: Path, *, run: Callable = subprocess.run) -> dict[str, str]:
    """What a child with ``env`` imports: {"triton": ..., "torch": ...}, read from the modules themselves."""
    code = ("import json, torch, triton; "
            "print(json.dumps({'triton': triton.__version__, 'torch': torch.__version__}))")
    proc = run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        raise BadInput(f"toolchains: the environment does not import: {lines[-1] if lines else 'no output'}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
