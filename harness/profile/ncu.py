"""Running Nsight Compute: finding ``ncu``, the one builder of its command line, and reading its failures.

Every profiling command line comes from :func:`profile_argv`, and :func:`run` refuses any that does not
carry ``--clock-control none``: ncu locks the clocks to base by default, which makes its durations
incomparable with the benchmark's (taken at the clocks the card runs at) and changes the card's state for
everyone else on the machine.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass

from harness.profile.metrics import SECTIONS, metric_names
from harness.target.tools import find_tool

CLOCK_CONTROL = ("--clock-control", "none")
# Where NVIDIA's standalone installer puts ncu when it is not on PATH nor in the CUDA toolkit.
NCU_GLOBS = ("/opt/nvidia/nsight-compute/*/ncu",)
WHERE_LOOKED = "not on PATH, in CUDA_HOME/bin, /usr/local/cuda/bin or /opt/nvidia/nsight-compute/*/"
NOT_FOUND = (f"ncu not found: {WHERE_LOOKED}; profiling needs NVIDIA Nsight Compute on a machine with an "
             f"NVIDIA GPU")

# ncu's messages that mean this machine cannot profile, not that the kernel failed: (marker, explanation).
NOT_PROFILABLE = (
    ("ERR_NVGPUCTRPERM", "the GPU's performance counters are not readable by this user (ERR_NVGPUCTRPERM): "
                         "profiling needs root or the driver option NVreg_RestrictProfilingToAdminUsers=0"),
    ("LibraryNotLoaded", "ncu could not load its measurement library on this machine (LibraryNotLoaded)"),
    ("Profiling is not supported on this device", "ncu does not support profiling this device"),
    ("ERR_NVGPUCTRBUSY", "the GPU's performance counters are in use by another profiler (ERR_NVGPUCTRBUSY)"),
)


def find_ncu(explicit: str | None = None) -> str | None:
    if explicit:
        return explicit if os.path.isfile(explicit) and os.access(explicit, os.X_OK) else None
    found = shutil.which("ncu") or find_tool("ncu")
    if found:
        return found
    installed = sorted(glob.glob(NCU_GLOBS[0]), key=_version_key)
    return installed[-1] if installed else None


def _version_key(path: str) -> tuple:
    version = os.path.basename(os.path.dirname(path))
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def profile_argv(ncu: str, report: str, target: list[str], *, metrics: bool = True, extra=()) -> list[str]:
    """The ncu command that profiles ``target`` into ``report`` (.ncu-rep).

    Only the launches between cudaProfilerStart and cudaProfilerStop are profiled (the target warms up
    outside them), caches are flushed before each replay pass as the benchmark flushes L2, and the clocks
    are never touched. ``extra``: more ncu options, never one about the clocks."""
    for option in extra:
        if str(option).startswith("--clock-control"):
            raise ValueError(f"ncu option {option!r}: the clocks are never changed; --clock-control none is fixed")
    argv = [ncu, *CLOCK_CONTROL, "--profile-from-start", "off", "--cache-control", "all",
            "--target-processes", "all"]
    for section in SECTIONS:
        argv += ["--section", section]
    if metrics:
        argv += ["--metrics", ",".join(metric_names())]
    argv += [*map(str, extra), "--export", report, "--force-overwrite", *target]
    return argv


def import_argv(ncu: str, report: str) -> list[str]:
    """Read a report back as the raw page: one row per launch, one column per metric, a units row."""
    return [ncu, "--import", report, "--csv", "--page", "raw"]


def has_clock_control(argv: list[str]) -> bool:
    """Exactly one clock option, and it is ``--clock-control none``."""
    at = [i for i, a in enumerate(argv) if str(a).startswith("--clock-control")]
    return len(at) == 1 and tuple(argv[at[0]:at[0] + 2]) == CLOCK_CONTROL


@dataclass(frozen=True)
class Outcome:
    rc: int | None            # None: timed out
    output: str               # stdout and stderr, interleaved as ncu wrote them


def run(argv: list[str], timeout: float) -> Outcome:
    if argv[1:2] != ["--import"] and not has_clock_control(argv):  # reading a report back profiles nothing
        raise ValueError("refusing to run ncu without exactly one --clock-control none")
    # A process group of its own: on a timeout the profiled Python process ends with ncu, not left on the GPU.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return Outcome(None, out)
    return Outcome(proc.returncode, out)


def failure(outcome: Outcome, report_exists: bool) -> tuple[str, str] | None:
    """(status, one-line reason) when the profiled run failed, else None. ncu may exit 0 after an error that
    stopped it from collecting anything, so its messages are read whatever the exit code."""
    text = outcome.output
    for marker, why in NOT_PROFILABLE:
        if marker in text:
            return "not-profiled", why
    if outcome.rc is None:
        return "error", "ncu timed out"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("==ERROR==")]
    if outcome.rc != 0 or errors or not report_exists:
        # ncu's error first, then its note that nothing was profiled, then the target's own last word.
        said = errors or [ln for ln in lines if "No kernels were profiled" in ln] or \
            [ln for ln in lines if not ln.startswith("==")][-1:] or ["no output"]
        return "error", f"ncu exited {outcome.rc}: {said[0]}"[:400]
    return None


def unknown_metric(outcome: Outcome) -> bool:
    """ncu refused a metric name this chip or version does not have: worth a retry with the sections only."""
    text = outcome.output.lower()
    return "==error==" in text and "metric" in text and ("failed to find" in text or "not found" in text
                                                          or "invalid" in text)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return _last_line(out) or "unknown"


def target_argv(spec_path: str, case_id: str, dtype: str, provider: str, seed: int) -> list[str]:
    return [sys.executable, "-m", "harness.profile.target", "--spec", spec_path, "--case", case_id,
            "--dtype", dtype, "--provider", provider, "--seed", str(seed)]
