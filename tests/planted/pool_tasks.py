"""Tiny worker-pool tasks for tests/test_isolation.py: no torch import, so a worker starts in a blink."""

from __future__ import annotations

import os
import time


def echo(*, value):
    return {"value": value, "pid": os.getpid(), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}


def fail(*, message):
    raise ValueError(message)


def sleep(*, seconds):
    time.sleep(seconds)
    return os.getpid()


def exit_with(*, code):
    os._exit(code)


def say_and_exit(*, words, code):
    """Dying words on stderr at once, as faulthandler writes them for a segfault, then gone."""
    os.write(2, words.encode() + b"\n")
    os._exit(code)


def kill_self():
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def cuda_error():
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def capture_error():
    """A failed CUDA graph capture: torch reports it as a CUDA error, but the context stays usable."""
    raise RuntimeError("CUDA error: operation failed due to a previous error during capture")


def unpicklable_result():
    return lambda: None


def interrupt_parent():
    """Ctrl-C as the user would press it, aimed at the process that owns the pool."""
    import signal

    os.kill(os.getppid(), signal.SIGINT)
    time.sleep(60)
