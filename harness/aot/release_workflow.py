"""``matrix --triton 3.5,3.6,3.9`` as a chain of steps (:func:`harness.steps.execute`): the matrix compiled once
per Triton release, each in its own cached environment (harness.aot.toolchains), one release at a time, then
compared kernel by kernel (harness.aot.releases) into ``toolchains.json`` and ``toolchains.md``.

``STEPS``: pick the releases (the option's, else ``[tool.kernel-harness.toolchains] triton``), build or find
their environments, run each release's ``python -m harness matrix --out`` in a child process with the
release's overlay first on its path (its output to ``<out>/triton-<version>/matrix.log``), load the documents
(checking that each child compiled with the release asked for), compare them, write the page and the JSON,
print the flagged findings and decide the outcome: a release whose matrix wrote nothing fails the run (bad
input, exit code 2 of the child, stops it at once: it is the same for every release), and so does a flagged
finding when ``--fail-on-regression`` or the configuration's ``regressions = "fail"`` says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from harness.aot import release_report, releases, toolchains
from harness.steps import BadInput

MATRIX_FILE, LOG_FILE, PAGE, DOC = "matrix.json", "matrix.log", "toolchains.md", "toolchains.json"


@dataclass(frozen=True)
class ReleaseMatrix:
    write_text: Callable[[Path, str], None]         # (path, text), atomically
    out: str                                        # the folder the documents go to
    releases: tuple[str, ...] = ()                  # --triton, each item comma-separated
    configured: tuple[str, ...] = ()                # [tool.kernel-harness.toolchains] triton
    where: str = "tool.kernel-harness.toolchains"   # the configuration's key, for its errors
    policy: str = "report"                          # the configuration's `regressions`
    fail_on_regression: bool = False                # --fail-on-regression
    matrix_args: tuple[str, ...] = ()               # what every release's `matrix` gets (--kernel, --arch, ...)
    cache: str | None = None                        # --cache
    command: str = ""                               # the command line, as the page quotes it
    cwd: Path = Path(".")
    build: Callable = toolchains.ensure             # (release, root) -> Overlay; tests replace it
    run_child: Callable = subprocess.run
    # filled by the steps
    wanted: tuple[toolchains.Release, ...] = ()
    overlays: tuple[toolchains.Overlay, ...] = ()
    failures: tuple[str, ...] = ()                  # releases whose matrix wrote no document, one line each
    runs: tuple[releases.ReleaseRun, ...] = ()
    diff: releases.ReleaseDiff | None = None
    failed: bool = False


def pick_releases(run: ReleaseMatrix) -> ReleaseMatrix:
    if run.releases:
        wanted = toolchains.parse_releases("triton", run.releases, "--triton")
    else:
        wanted = toolchains.parse_releases("triton", run.configured, f"{run.where}.triton")
    if not wanted:
        raise BadInput(f"--triton: no releases given, and {run.where}.triton names none")
    if Path(run.out).is_file():
        raise BadInput(f"--out {run.out}: is a file; with --triton it names the folder the documents go to")
    return replace(run, wanted=wanted)


def build_environments(run: ReleaseMatrix) -> ReleaseMatrix:
    root = toolchains.cache_root(run.cache)
    overlays = tuple(run.build(r, root) for r in run.wanted)
    versions = [o.version for o in overlays]
    if len(set(versions)) < len(versions):
        raise BadInput(f"--triton: {', '.join(run.releases or run.configured)} name the same release twice "
                       f"({', '.join(versions)})")
    return replace(run, overlays=overlays)


def _folder(run: ReleaseMatrix, overlay: toolchains.Overlay) -> Path:
    return Path(run.out) / f"triton-{overlay.version}"


def compile_each(run: ReleaseMatrix) -> ReleaseMatrix:
    """Each release's matrix, one after the other (each child uses the cores its --jobs allows)."""
    failures = []
    for overlay in run.overlays:
        folder = _folder(run, overlay)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / MATRIX_FILE).unlink(missing_ok=True)  # a document left from an earlier run is not this one's
        cmd = [sys.executable, "-m", "harness", "matrix", *run.matrix_args, "--out", str(folder / MATRIX_FILE)]
        print(f"toolchains: triton {overlay.version}: compiling (log: {folder / LOG_FILE})", flush=True)
        t0 = time.perf_counter()
        with open(folder / LOG_FILE, "w", encoding="utf-8") as log:
            proc = run.run_child(cmd, env=toolchains.child_env([overlay]), cwd=run.cwd, stdout=log,
                                 stderr=subprocess.STDOUT)
        lines = [ln for ln in (folder / LOG_FILE).read_text(encoding="utf-8").splitlines() if ln.strip()]
        last = lines[-1] if lines else "no output"
        print(f"toolchains: triton {overlay.version}: {last} ({time.perf_counter() - t0:.0f} s)", flush=True)
        if not (folder / MATRIX_FILE).is_file():
            if proc.returncode == 2:  # bad input (a spec, an option): the same for every release
                raise BadInput(f"triton {overlay.version}: {last}")
            failures.append(f"triton {overlay.version}: the matrix wrote no document (exit code "
                            f"{proc.returncode}): {last}")
    return replace(run, failures=tuple(failures))


def load_runs(run: ReleaseMatrix) -> ReleaseMatrix:
    loaded = []
    for overlay in run.overlays:
        path = _folder(run, overlay) / MATRIX_FILE
        if not path.is_file():
            continue
        doc = releases.load_run(path)
        if not toolchains.same_release(doc.versions.get("triton", ""), overlay.version):  # it imported another
            home = overlay.path or "the running environment"
            raise BadInput(f"{path}: toolchain.triton: {doc.versions.get('triton')}, not the triton "
                           f"{overlay.version} of {home}: something ahead of it on the path shadows it")
        loaded.append(doc)
    return replace(run, runs=tuple(releases.ordered(loaded)))


def compare(run: ReleaseMatrix) -> ReleaseMatrix:
    return replace(run, diff=releases.diff(list(run.runs)))


def write(run: ReleaseMatrix) -> ReleaseMatrix:
    if not run.runs:  # nothing to compare: the failures say why, and no empty page stands in for a result
        return run
    out = Path(run.out)
    out.mkdir(parents=True, exist_ok=True)
    sources = {f"triton {o.version}": f"{_folder(run, o).name}/{MATRIX_FILE}" for o in run.overlays}
    doc = release_report.document(run.diff, list(run.runs), run.command, sources)
    run.write_text(out / DOC, json.dumps(doc, indent=1) + "\n")
    run.write_text(out / PAGE, release_report.render(run.diff, list(run.runs), run.command))
    print(f"wrote {out / PAGE} and {out / DOC}")
    return run


def verdict(run: ReleaseMatrix) -> ReleaseMatrix:
    for f in run.diff.findings:
        print(f"FLAGGED: {f.message}")
    for line in run.failures:
        print(f"FAILED: {line}")
    strict = run.fail_on_regression or run.policy == "fail"
    failed = bool(run.failures) or (strict and bool(run.diff.findings))
    why = "" if not run.diff.findings or strict else \
        " (reported only: --fail-on-regression or regressions = \"fail\" fails the run on them)"
    print(f"toolchains: {len(run.runs)} release(s) compared ({', '.join(run.diff.releases)}), "
          f"{len(run.diff.findings)} flagged{why}, {len(run.failures)} failed")
    return replace(run, failed=failed)


STEPS = (pick_releases, build_environments, compile_each, load_runs, compare, write, verdict)
