"""``sanitize``: run kernels' generated tests under NVIDIA compute-sanitizer (memcheck, racecheck).

Each kernel runs in its own sanitizer process, so one kernel's report never mixes with another's; the
sanitizer's error summary is parsed and printed per kernel and tool.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from harness.cli import EXIT_FAILED, EXIT_OK, BadInput, command, options, spec_paths

_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


def _options(p) -> None:
    p.add_argument("--kernel", action="append", default=[])
    p.add_argument("--tool", action="append", default=[], help="memcheck (default), racecheck, initcheck, synccheck")
    p.add_argument("--dtype", default="bf16", help="dtypes to run (default bf16: the sanitizer is slow)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per kernel and tool")
    p.add_argument("--specs-dir", default="specs")
    p.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")


def sanitizer() -> str | None:
    fallback = "/usr/local/cuda/bin/compute-sanitizer"
    return shutil.which("compute-sanitizer") or (fallback if os.path.exists(fallback) else None)


@command("sanitize", "run each kernel's generated tests (ci tier) under compute-sanitizer; GPU only")
@options(_options)
def cmd_sanitize(args) -> int:
    tool_path = sanitizer()
    if tool_path is None:
        raise BadInput("sanitize: compute-sanitizer not found (it ships with the CUDA toolkit; a GPU is needed)")
    tools = [t for item in args.tool for t in item.split(",")] or ["memcheck"]
    failed = False
    for path in spec_paths([], args.specs_dir, args.kernel):
        for tool in tools:
            cmd = [tool_path, "--tool", tool, "--error-exitcode", "97", "--target-processes", "all",
                   sys.executable, "-m", "pytest", "--specs", args.specs_dir, "--kernel", path.stem,
                   "--dtype", args.dtype, "--tier", "ci", "-q", "-p", "no:cacheprovider", "--no-isolate",
                   *args.pytest_args]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                text = proc.stdout + proc.stderr
                code = proc.returncode
            except subprocess.TimeoutExpired as exc:
                text, code = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else "", -1
            found = [int(n) for n in _SUMMARY.findall(text)]
            tests = next((line for line in reversed(text.splitlines()) if " passed" in line or " failed" in line),
                         "no pytest summary")
            verdict = ("TIMEOUT" if code == -1 else "ERRORS" if code == 97 or any(found)
                       else "FAILED" if code else "clean")
            failed |= verdict != "clean"
            print(f"{path.stem:<20} {tool:<10} {verdict:<7} sanitizer errors: {sum(found)}; tests: {tests.strip()}")
            if verdict != "clean":
                for line in [ln for ln in text.splitlines() if ln.startswith("=========")][:20]:
                    print(f"    {line}")
    return EXIT_FAILED if failed else EXIT_OK
