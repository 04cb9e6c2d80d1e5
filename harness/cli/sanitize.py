"""``sanitize``: run kernels' generated tests under NVIDIA compute-sanitizer (memcheck, racecheck, ...).

Each kernel and tool runs in its own sanitizer process, so one kernel's report never mixes with another's;
the sanitizer's summaries are parsed and printed per kernel and tool, and the whole output can be kept
per kernel and tool (``--log-dir``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.cli.registry import EXIT_FAILED, EXIT_OK, BadInput, command, options, spec_paths, specs_option
from harness.spec.model import RUN_TIERS
from harness.target.tools import sanitizer

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")


_ERRORS = re.compile(r"ERROR SUMMARY: (\d+) error")


# racecheck's own summary: "RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)"
_HAZARDS = re.compile(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?, (\d+) warnings?\)")


_EXIT_SANITIZER = 97  # what the sanitizer exits with when it found errors: distinct from pytest's codes


def _options(p) -> None:
    p.add_argument("--kernel", action="append", default=[])
    p.add_argument("--tool", action="append", default=[], help="memcheck (default), racecheck, initcheck, synccheck")
    p.add_argument("--dtype", default="bf16", help="dtypes to run (default bf16: the sanitizer is slow)")
    p.add_argument("--tier", default="ci", choices=sorted(RUN_TIERS), help="case tier (default ci: edge and ci cases)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per kernel and tool")
    p.add_argument("--log-dir", default=None, help="keep each kernel's full sanitizer output as <kernel>.<tool>.log")
    specs_option(p)
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")


@dataclass(frozen=True)
class Verdict:
    kernel: str
    tool: str
    status: str  # clean | ERRORS | FAILED (tests failed, sanitizer quiet) | TIMEOUT
    errors: int
    warnings: int
    tests: str  # pytest's summary line
    findings: tuple[str, ...]  # the sanitizer's "=========" lines, first ones

    def line(self) -> str:
        warned = f", {self.warnings} warning(s)" if self.warnings else ""
        return (f"{self.kernel:<20} {self.tool:<10} {self.status:<7} sanitizer errors: {self.errors}{warned}; "
                f"tests: {self.tests}")


def judge(kernel: str, tool: str, text: str, code: int | None) -> Verdict:
    """`code` None: the run timed out."""
    errors = sum(int(n) for n in _ERRORS.findall(text))
    hazards = [(int(e), int(w)) for e, w in _HAZARDS.findall(text)]
    errors = max(errors, sum(e for e, _ in hazards))
    warnings = sum(w for _, w in hazards)
    tests = next((ln.strip(" =") for ln in reversed(text.splitlines()) if re.search(r" (passed|failed|error)", ln)
                  and " in " in ln), "no pytest summary")
    status = ("TIMEOUT" if code is None else "ERRORS" if code == _EXIT_SANITIZER or errors
              else "FAILED" if code else "clean")
    findings = tuple(ln for ln in text.splitlines() if ln.startswith("=========")
                     and "SUMMARY" not in ln and "COMPUTE-SANITIZER" not in ln)  # not the banner
    return Verdict(kernel, tool, status, errors, warnings, tests, findings[:20])


def run_sanitized(cmd: list[str], timeout: float) -> tuple[str, int | None]:
    """Run in a process group of its own, so a timeout also ends the sanitized pytest, not only the sanitizer."""
    # The caching allocator hands kernels slices of 2 MiB segments, inside which memcheck sees no bounds:
    # with it off every tensor is its own allocation, and a one-element overread is reported.
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return out, proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return out, None


@command("sanitize", "run each kernel's generated tests (ci tier) under compute-sanitizer; GPU only")
@options(_options)
def cmd_sanitize(args) -> int:
    tools = [t.strip() for item in args.tool for t in item.split(",") if t.strip()] or ["memcheck"]
    unknown = [t for t in tools if t not in TOOLS]
    if unknown:
        raise BadInput(f"sanitize: --tool {unknown[0]!r} is not one of {', '.join(TOOLS)}")
    tool_path = sanitizer()
    if tool_path is None:
        raise BadInput("sanitize: compute-sanitizer not found (it ships with the CUDA toolkit; a GPU is needed)")
    log_dir = Path(args.log_dir) if args.log_dir else None
    if log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)
    failed = False
    runs = [(path, tool) for path in spec_paths([], args.specs_dir, args.kernel) for tool in tools]
    start = time.monotonic()
    # One sanitizer run per kernel and tool takes minutes: each says when it starts, and how long it took.
    for i, (path, tool) in enumerate(runs, 1):
        print(f"[{i}/{len(runs)} at {time.monotonic() - start:.0f} s] {path.stem} under {tool}: started "
              f"(timeout {args.timeout:.0f} s)", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        cmd = [tool_path, "--tool", tool, "--error-exitcode", str(_EXIT_SANITIZER), "--target-processes", "all",
               sys.executable, "-m", "pytest", "--specs", str(path.parent), "--kernel", path.stem,
               "--dtype", args.dtype, "--tier", args.tier, "-q", "-p", "no:cacheprovider", "--no-isolate",
               *args.pytest_args]
        text, code = run_sanitized(cmd, args.timeout)
        if log_dir:
            (log_dir / f"{path.stem}.{tool}.log").write_text(text)
        verdict = judge(path.stem, tool, text, code)
        failed |= verdict.status != "clean"
        print(f"{verdict.line()} ({time.monotonic() - t0:.1f} s)", flush=True)
        if verdict.status != "clean":
            for finding in verdict.findings:
                print(f"    {finding}")
    return EXIT_FAILED if failed else EXIT_OK
