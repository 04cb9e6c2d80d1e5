"""``test-releases``: the generated CPU tests (``pytest <spec folders> --tier ci``) under each Triton and torch
release asked for, each pair in its own cached environment (harness.aot.toolchains), one after the other.

``STEPS``: pick the releases (the options', else ``[tool.kernel-harness.toolchains]``; a package not named
keeps the running environment's), build or find their environments, pair every Triton release with every
torch release, check what each pair's environment imports and which of the interpreter layer's hook points
(harness.interpreter) that release lacks, run pytest in it, and print one line per pair. Any pair whose
environment does not import, or whose pytest fails, fails the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from harness.aot import toolchains
from harness.steps import BadInput

# What the interpreter layer could not patch on this release: each hook point it looked for and did not find.
_LAYER_PROBE = ("import json, harness.interpreter as i; "
                "print(json.dumps([f'{p.gap}: {p.target} ({p.why})' for p in i.install() if not p.applied]))")


def stream(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run ``cmd`` with its output passed through as it comes; (exit code, its last non-blank line)."""
    last = ""
    with subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc:
        for line in proc.stdout:
            sys.stdout.write(line)
            last = line.strip() or last
    sys.stdout.flush()
    return proc.returncode, last


@dataclass(frozen=True)
class Pair:
    triton: toolchains.Overlay
    torch: toolchains.Overlay
    imports: dict[str, str] | None = None     # what the environment imported, once checked
    missing_hooks: tuple[str, ...] = ()       # the interpreter layer's hook points this release lacks
    problem: str = ""                         # why it did not run
    exit_code: int | None = None
    summary: str = ""                         # pytest's last line
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return f"triton {self.triton.version}, torch {self.torch.version}"


@dataclass(frozen=True)
class ReleaseTests:
    specs: tuple[str, ...]                    # the spec folders pytest collects
    tier: str = "ci"
    pytest_args: tuple[str, ...] = ()
    triton: tuple[str, ...] = ()              # --triton, each item comma-separated
    torch: tuple[str, ...] = ()               # --torch
    configured_triton: tuple[str, ...] = ()   # [tool.kernel-harness.toolchains]
    configured_torch: tuple[str, ...] = ()
    where: str = "tool.kernel-harness.toolchains"
    cache: str | None = None
    cwd: Path = Path(".")
    build: Callable = toolchains.ensure
    run_child: Callable = subprocess.run       # the environment checks
    stream_child: Callable = stream            # pytest: (cmd, env, cwd) -> (exit code, last line)
    # filled by the steps
    wanted: tuple[tuple[toolchains.Release, ...], tuple[toolchains.Release, ...]] = ((), ())
    pairs: tuple[Pair, ...] = ()
    failed: bool = False


def pick_releases(run: ReleaseTests) -> ReleaseTests:
    triton = toolchains.parse_releases("triton", run.triton, "--triton") or \
        toolchains.parse_releases("triton", run.configured_triton, f"{run.where}.triton")
    torch = toolchains.parse_releases("torch", run.torch, "--torch") or \
        toolchains.parse_releases("torch", run.configured_torch, f"{run.where}.torch")
    if not triton and not torch:
        raise BadInput(f"--triton/--torch: no releases given, and {run.where} names none")
    return replace(run, wanted=(triton, torch))


def _this_environment(package: str) -> toolchains.Overlay:
    from importlib import metadata

    try:
        version = metadata.version(package)
    except metadata.PackageNotFoundError:
        raise BadInput(f"{package} is not installed here: name a release with --{package}") from None
    return toolchains.Overlay(toolchains.Release(package, version), None, version)


def build_environments(run: ReleaseTests) -> ReleaseTests:
    root = toolchains.cache_root(run.cache)
    triton = [run.build(r, root) for r in run.wanted[0]] or [_this_environment("triton")]
    torch = [run.build(r, root) for r in run.wanted[1]] or [_this_environment("torch")]
    return replace(run, pairs=tuple(Pair(t, p) for t in triton for p in torch))


def _env(pair: Pair) -> dict[str, str]:
    return toolchains.child_env([pair.triton, pair.torch])  # triton first: a torch overlay carries none anyway


def check_environments(run: ReleaseTests) -> ReleaseTests:
    """What each pair imports (it must be the releases asked for) and what the interpreter layer lacks there."""
    checked = []
    for pair in run.pairs:
        try:
            imports = toolchains.probe_versions(_env(pair), run.cwd, run=run.run_child)
        except BadInput as exc:
            checked.append(replace(pair, problem=str(exc)))
            continue
        asked = (("triton", pair.triton), ("torch", pair.torch))
        wrong = [f"{k} {imports.get(k)} (asked for {o.version})" for k, o in asked
                 if not toolchains.same_release(str(imports.get(k)), o.version)]
        if wrong:
            checked.append(replace(pair, imports=imports, problem=f"the environment imports {', '.join(wrong)}"))
            continue
        proc = run.run_child([sys.executable, "-c", _LAYER_PROBE], env={**_env(pair), "TRITON_INTERPRET": "1"},
                             cwd=run.cwd, capture_output=True, text=True)
        lines = (proc.stdout or "").strip().splitlines()
        missing = tuple(json.loads(lines[-1])) if proc.returncode == 0 and lines else \
            (f"the layer did not install: {(proc.stderr or 'no output').strip().splitlines()[-1]}",)
        for hook in missing:
            print(f"test-releases: {pair.label}: interpreter layer: not applied: {hook}")
        checked.append(replace(pair, imports=imports, missing_hooks=missing))
    return replace(run, pairs=tuple(checked))


def run_tests(run: ReleaseTests) -> ReleaseTests:
    done = []
    for pair in run.pairs:
        if pair.problem:
            done.append(pair)
            continue
        cmd = [sys.executable, "-m", "pytest", *run.specs, "--tier", run.tier, "-p", "no:cacheprovider",
               *run.pytest_args]
        print(f"test-releases: {pair.label}: {' '.join(['pytest', *cmd[3:]])}", flush=True)
        t0 = time.perf_counter()
        code, last = run.stream_child(cmd, _env(pair), run.cwd)
        done.append(replace(pair, exit_code=code, summary=last.strip("= ") or "no output",
                            seconds=time.perf_counter() - t0))
    return replace(run, pairs=tuple(done))


def summarise(run: ReleaseTests) -> ReleaseTests:
    failed = False
    for pair in run.pairs:
        if pair.problem:
            print(f"test-releases: {pair.label}: NOT RUN: {pair.problem}")
            failed = True
            continue
        hooks = f"; interpreter layer: {len(pair.missing_hooks)} hook point(s) missing" if pair.missing_hooks else ""
        print(f"test-releases: {pair.label}: {pair.summary} (pytest exit {pair.exit_code}, "
              f"{pair.seconds:.0f} s{hooks})")
        failed = failed or pair.exit_code != 0
    return replace(run, failed=failed)


STEPS = (pick_releases, build_environments, check_environments, run_tests, summarise)
