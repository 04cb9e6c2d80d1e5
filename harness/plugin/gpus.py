"""``--gpus N|all``: the generated tests over every GPU of a host, one pytest-xdist worker per GPU.

pytest-xdist does the distributing (its load scheduler hands each idle worker the next items); this module
only gives each worker its GPU. Each worker is an execnet gateway whose ``env:`` sets ``CUDA_VISIBLE_DEVICES``
to one GPU before the worker imports pytest, torch or a kernel, so the kernel sees one device, ``cuda:0``, and
nothing in a test needs to know it is sharded. The GPUs are those ``CUDA_VISIBLE_DEVICES`` names when it is
set (so a runner that was handed GPUs 4-7 uses those four), else every GPU torch counts.

Each item's report carries the GPU that ran it, as the ``gpu`` property (in ``--junitxml`` per test case), a
failing item's reproduce line names it, and the summary gives each GPU's items and test time: a card that
fails or runs slow shows up as that card.
"""

from __future__ import annotations

import os
import time

import pytest

from harness.workers.pool import VISIBLE_ENV as ENV
from harness.workers.pool import visible_gpus

NAME = "kernel-harness-gpus"
PROPERTY = "gpu"


def choose(text: str, visible: list[str]) -> list[str]:
    """``all`` or a count N -> the first N visible GPUs; anything else a UsageError naming the option."""
    if not visible:
        raise pytest.UsageError(f"--gpus {text}: no GPU is visible ({ENV} is empty or torch sees no GPU)")
    if text == "all":
        return visible
    n = int(text) if text.isdigit() else 0
    if n < 1:
        raise pytest.UsageError(f"--gpus {text}: expected a number of GPUs or 'all' (e.g. --gpus 4)")
    if n > len(visible):
        raise pytest.UsageError(f"--gpus {text}: only {len(visible)} GPU(s) visible ({', '.join(visible)})")
    return visible[:n]


def enable(config: pytest.Config, text: str | None) -> None:
    if text is None:
        return
    if hasattr(config, "workerinput"):  # an xdist worker: its gateway already set its one GPU
        config.pluginmanager.register(WorkerGpu(), NAME)
        return
    if not config.pluginmanager.hasplugin("xdist"):
        raise pytest.UsageError(f"--gpus {text}: needs pytest-xdist (pip install pytest-xdist)")
    if config.getoption("numprocesses", None) or config.getoption("tx", None):
        raise pytest.UsageError(f"--gpus {text}: give --gpus or -n/--tx, not both (--gpus starts one worker per GPU)")
    gpus = choose(text, visible_gpus())
    config.option.tx = [f"popen//env:{ENV}={g}" for g in gpus]
    if config.option.dist == "no":
        config.option.dist = "load"
    config.pluginmanager.register(GpuSummary(gpus), NAME)


def gpu_of(config: pytest.Config) -> str | None:
    """The GPU this worker runs on, when --gpus gave it one (for the reproduce line)."""
    return os.environ.get(ENV) if config.pluginmanager.has_plugin(NAME) and hasattr(config, "workerinput") else None


class WorkerGpu:
    """In a worker: every report names the GPU it ran on, as ``GPU <id> (<name>)``."""

    def __init__(self):
        self._label: str | None = None

    def label(self) -> str:
        if self._label is None:  # asked after the first test, so CUDA is not initialised by the plugin
            import torch

            name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device: interpreter"
            self._label = f"GPU {os.environ.get(ENV, '?')} ({name})"
        return self._label

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if report.when == "setup":  # the item's, so the later reports carry it (--junitxml writes teardown's)
            item.user_properties.append((PROPERTY, self.label()))
            report.user_properties.append((PROPERTY, self.label()))
        return report


class GpuSummary:
    """On the controller: each GPU's items, outcomes and test time, from its workers' reports."""

    def __init__(self, gpus: list[str]):
        self.gpus, self.started = gpus, time.monotonic()
        self.seen: dict[str, dict] = {}

    def pytest_runtest_logreport(self, report) -> None:
        gpu = next((v for k, v in getattr(report, "user_properties", ()) if k == PROPERTY), None)
        if gpu is None:
            return
        row = self.seen.setdefault(gpu, {"items": set(), "failed": 0, "seconds": 0.0})
        row["items"].add(report.nodeid)
        row["seconds"] += report.duration
        row["failed"] += report.failed

    def pytest_report_header(self, config) -> str:
        return f"kernel-harness: --gpus: one pytest-xdist worker per GPU: {', '.join(self.gpus)}"

    def pytest_terminal_summary(self, terminalreporter) -> None:
        tr = terminalreporter
        tr.section("kernel-harness: GPUs")
        for gpu, row in sorted(self.seen.items()):
            failed = f", {row['failed']} failed" if row["failed"] else ""
            tr.write_line(f"{gpu}: {len(row['items'])} items{failed}, {row['seconds']:.1f} s of test time")
        idle = [g for g in self.gpus if not any(k.startswith(f"GPU {g} ") for k in self.seen)]
        if idle:
            tr.write_line(f"ran nothing: GPU {', GPU '.join(idle)}", yellow=True)
        tr.write_line(f"wall time: {time.monotonic() - self.started:.1f} s")
