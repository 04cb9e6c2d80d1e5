"""Provenance of a run: device, driver, software versions, commit, clocks and power right now.

The bench runner calls :func:`collect_environment` at the start and at the end of a run, so clock
and power readings (NVML, read-only) bracket the measurements. Anything that cannot be read is
recorded as None or "unavailable: why", never guessed.

``git_commit`` and ``git_dirty`` are the repository under test's: the one the command runs in, whose specs
and kernels are measured. The harness itself is a dependency like torch: ``harness_version``, and
``harness_commit`` only where it runs from a git checkout of its own (an editable install of this repository).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import os
import platform
import socket
import subprocess
from collections.abc import Iterable
from pathlib import Path

import torch

import harness
from harness.timing.clocks import nvml_snapshot

_HARNESS_SOURCE = Path(harness.__file__).resolve().parents[1]  # the folder holding the harness package


def llc_bytes() -> int:
    """Size of the CPU's last-level cache from sysfs (32 MiB when it cannot be read)."""
    best_level, best = -1, 32 << 20
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    for entry in sorted(root.glob("index*")) if root.is_dir() else ():
        try:
            level = int((entry / "level").read_text())
            text = (entry / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        digits, scale = text.rstrip("KMG"), {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        if level > best_level and digits.isdigit():
            best_level, best = level, int(digits) * scale
    return best


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(folder: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def repository(folder: Path | None = None) -> dict:
    """The repository under test: ``folder``'s (default: the cwd's) git commit, whether tracked files differ
    from it, and the name of its top folder; None for each where it is not in a git repository."""
    folder = Path.cwd() if folder is None else folder
    commit = _git(folder, "rev-parse", "HEAD")
    status = _git(folder, "status", "--porcelain", "--untracked-files=no") if commit else None
    top = _git(folder, "rev-parse", "--show-toplevel") if commit else None
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status),
            "repository": Path(top).name if top else None}


def harness_provenance() -> dict:
    """The harness's version, and its commit where it runs from a checkout of its own repository: installed
    from a wheel it sits in site-packages, which may be inside another repository, whose commit is not its."""
    out = {"harness_version": harness.__version__}
    top = _git(_HARNESS_SOURCE, "rev-parse", "--show-toplevel")
    if top and Path(top).resolve() == _HARNESS_SOURCE:
        out["harness_commit"] = _git(_HARNESS_SOURCE, "rev-parse", "HEAD")
    return out


def _sha256(path) -> str:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        return f"unavailable: {exc.strerror or exc}"


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:  # absent, or broken on this machine: either way not part of the run
        return None


def _timing_dict(timing) -> dict | None:
    if timing is None:
        return None
    if dataclasses.is_dataclass(timing):
        return dataclasses.asdict(timing)
    return dict(timing)


def _timing_text(t: dict, on_gpu: bool) -> dict:
    """The one-line descriptions the report shows (flush, stopping rule, throttle)."""
    from harness.timing.stats import NOISE_EVERY, NOISE_TOL, NOISE_WINDOW

    if not t.get("cold", True):
        flush = "none: warm caches"
    elif on_gpu:
        flush = "read a buffer of 2x the L2 size before every sample (outside the timed region)"
    else:
        flush = ("read a buffer of 2x the last-level cache before every sample" if t.get("cpu_flush")
                 else "none (CPU host timing)")
    return {
        "flush": flush,
        "stopping_rule": (f">= {t.get('min_samples')} samples; stop at rel. std <= {t.get('max_rsd')} after "
                          f">= {t.get('min_time_s')} s of device time, or when the rel. std (every "
                          f"{NOISE_EVERY} samples) moved <= {NOISE_TOL:.0%} over the last {NOISE_WINDOW} "
                          f"estimates; at most {t.get('max_samples')} samples, {t.get('timeout_s')} s wall"),
        "throttle": (f"samples taken below {t.get('throttle_fraction')} x the maximum SM clock (NVML) are "
                     "dropped and counted"),
    }


def resolve_device(device) -> torch.device:
    """None: the current GPU when there is one, else the CPU; a bare "cuda" gets its index."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def collect_environment(*, device=None, spec_paths: Iterable = (), seed: int = 0, timing=None) -> dict:
    dev = resolve_device(device)
    env: dict = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "numpy": _version("numpy"),
        **harness_provenance(),
        "cuda_runtime": torch.version.cuda,
        **repository(),
        "seed": seed,
        "spec_sha256": {str(p): _sha256(p) for p in spec_paths},
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_llc_bytes": llc_bytes(),
    }
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        nvml = nvml_snapshot(dev)
        env.update(
            device=props.name, device_index=dev.index, arch=f"sm_{props.major}{props.minor}",
            compute_capability=f"{props.major}.{props.minor}", sm_count=props.multi_processor_count,
            l2_bytes=int(props.L2_cache_size), memory_bytes=int(props.total_memory),
            driver=driver_version(nvml),
            nvml=nvml,
        )
    else:
        env.update(device=env["cpu_model"], device_index=None, arch="cpu", driver=None)
    timing_dict = _timing_dict(timing)
    env["timing"] = timing_dict
    if timing_dict is not None:
        env.update(_timing_text(timing_dict, dev.type == "cuda"))
    return env


def driver_version(snapshot: dict | None = None) -> str | None:
    """NVIDIA driver release: NVML's, from ``snapshot`` (see nvml_snapshot), else /proc's."""
    version = str((snapshot or {}).get("driver_version", "unavailable"))
    if (snapshot or {}).get("nvml") == "ok" and not version.startswith("unavailable"):
        return version
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    for word in text.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word
    return None
