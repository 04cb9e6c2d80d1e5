"""The worker process's side of :mod:`harness.workers`: set up like the parent, then run tasks until told to stop.

Kept apart from the pool so that what a freshly spawned worker imports before its first task is small, and
nothing here imports torch before ``CUDA_VISIBLE_DEVICES`` is set.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
import traceback

from harness.importpath import resolve

# Texts of the CUDA errors that are sticky: once one happened, every later call in the process reports it. Others
# ("CUDA error: operation failed due to a previous error during capture", out of memory, an invalid argument)
# leave the context usable, and retiring the worker for them would cost a fresh process (CUDA, Triton's
# compiles) per failing item; a synchronize that fails after the task (_cuda_poisoned) catches any sticky one
# this list misses.
CUDA_ERROR_MARKERS = ("illegal memory access", "cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS",
                      "device-side assert", "unspecified launch failure", "misaligned address",
                      "illegal instruction", "hardware stack error", "cudaErrorLaunchFailure")
TRACEBACK_MARKER = "\nTraceback (innermost frames):\n"
_retiring = False  # set by a task through retire(): this process runs no further task


def retire() -> None:
    """Called by a task that found this process's state untrustworthy (harness code patched by a kernel, say):
    once the task's result is sent, the pool replaces this worker, as after a CUDA error."""
    global _retiring
    _retiring = True


def mentions_cuda_error(text: str) -> bool:
    return any(m in text for m in CUDA_ERROR_MARKERS)


def worker_main(conn, device: str, env: dict, log_path: str, initializer: str | None) -> None:
    """The worker's life: redirect output to the log, set up, say ready, run tasks until None or EOF."""
    # fd-level redirect, so a segfault's or abort's message (C code, faulthandler) lands in the log too.
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it then stops us
    faulthandler.enable(all_threads=False)  # the task runs on the main thread; the others are ours
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=False)
    os.environ.update(env)  # before CUDA is initialised: it reads CUDA_VISIBLE_DEVICES once
    # spawn copied the parent's sys.path; the import roots (PYTHONPATH from the pool) and the cwd make the
    # project's modules importable even from a parent that found them some other way (pytest's rootdir).
    for root in [*os.environ.get("PYTHONPATH", "").split(os.pathsep), os.getcwd()]:
        if root and root not in sys.path:
            sys.path.append(root)
    exit_with_parent(os.getppid(), log_path)
    try:
        if initializer:
            resolve(initializer)(device)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    conn.send(("ready", os.getpid()))
    for fn, kwargs in tasks(conn):
        start = time.perf_counter()
        try:
            value, status, error = resolve(fn)(**kwargs), "ok", ""
        except BaseException as exc:  # SystemExit/KeyboardInterrupt from a kernel are its failure too
            value, status, error = None, "error", format_exception(exc)
            del exc
        duration = time.perf_counter() - start
        poisoned = _cuda_poisoned(error or _text(value)) or _retiring
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            conn.send(("done", status, value, error, poisoned, duration))
        except Exception as exc:
            conn.send(("done", "error", None, f"the task's result could not be sent back: {type(exc).__name__}: "
                                              f"{exc}", poisoned, duration))


def tasks(conn):
    """(fn, kwargs) of each task the parent sends, until it sends None or goes away."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        yield msg


def format_exception(exc: BaseException) -> str:
    head = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # from the task inward
    frames = "".join(traceback.format_tb(tb or exc.__traceback__, limit=-6)).rstrip()
    return f"{head}{TRACEBACK_MARKER}{frames}"


def _text(value) -> str:
    try:
        return repr(value)[:200_000]
    except Exception:
        return ""


def _cuda_poisoned(text: str) -> bool:
    """Whether this process's CUDA context is unusable: the task said so, or a synchronize fails."""
    if mentions_cuda_error(text):
        return True
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return False
    try:  # errors like an illegal address are sticky: every later call reports them
        torch.cuda.synchronize()
    except Exception:
        return True
    return False


def exit_with_parent(ppid: int, log_path: str | None = None) -> None:
    """A SIGKILLed parent runs no cleanup: the worker notices it is orphaned and exits by itself."""
    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != ppid:
                if log_path is not None:
                    try:
                        os.unlink(log_path)  # the parent would have, after reading it
                    except OSError:
                        pass
                os._exit(70)

    threading.Thread(target=watch, name="harness-parent-watch", daemon=True).start()
