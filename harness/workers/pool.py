"""Crash isolation: kernels run in long-lived worker processes that are replaced when they die or hang.

One worker per device (one per GPU, pinned through ``CUDA_VISIBLE_DEVICES``; one on the CPU). A task is
an import path plus picklable keyword arguments, optionally with an ``affinity``: every task of one affinity
runs on the worker slot (so the GPU) that took the first of them, so numbers that will be divided by each
other (the providers of one benchmark case) never come from two cards. Its outcome is ``ok``, ``error`` (the
task raised), ``timeout`` (killed after its time limit) or ``crashed`` (the process died: segfault, abort,
``os._exit``).
A task that hit a CUDA error retires its worker: an illegal memory access poisons the whole CUDA context,
so every later task in that process would fail too.

The parent drives everything from the calling thread (``run``, ``wait``, ``map_unordered`` pump the
pipes), so there is no background thread to leak and a KeyboardInterrupt lands in the caller, whose
``with`` block (or ``close``) kills every worker.
"""

from __future__ import annotations

import atexit
import math
import multiprocessing
import os
import signal
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_any

from harness.workers.child import TRACEBACK_MARKER, mentions_cuda_error, worker_main

DEFAULT_INITIALIZER = "harness.correctness.tasks:init_worker"
GRACE_S = 2.0            # SIGTERM -> SIGKILL
STARTUP_TIMEOUT_S = 600.0
TASK_TIMEOUT_S = 120.0   # a task that gives none: pytest items and bench jobs alike
MAX_START_FAILURES = 3   # a slot whose worker dies this often before it is ready is given up
TAIL_LINES, TAIL_LINE_CHARS = 30, 300


@dataclass(frozen=True)
class Task:
    fn: str                          # "module:function", resolved in the worker
    kwargs: dict = field(default_factory=dict)
    label: str = ""
    timeout_s: float | None = None   # None: the pool's default
    affinity: str | None = None      # tasks sharing it run on one worker slot (one device); None: any


@dataclass(frozen=True)
class TaskOutcome:
    status: str        # "ok" | "error" | "timeout" | "crashed"
    value: object      # the task's return value when ok, else None
    error: str         # "" when ok; first line is the summary ("crashed (signal 11, SIGSEGV)", "timed out ...")
    duration_s: float
    worker_pid: int
    device: str

    @property
    def summary(self) -> str:
        return self.error.split("\n", 1)[0]


def split_error(error: str) -> tuple[str, str]:
    """An ``error`` outcome's text as (exception line(s), formatted innermost frames)."""
    head, _, frames = error.rpartition(TRACEBACK_MARKER)
    return (head, frames) if head else (error, "")


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"signal {-code}, {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"  # ROCm builds of torch honour it too


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (indices or UUIDs), else every GPU
    torch counts."""
    if VISIBLE_ENV in os.environ:
        return [g.strip() for g in os.environ[VISIBLE_ENV].split(",") if g.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def default_devices() -> list[str]:
    """One entry per worker: every visible GPU, else the CPU (the Triton interpreter)."""
    import torch

    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return ["cpu"]


def isolating(isolate: bool | None, gpu: bool) -> bool:
    """Whether a run isolates each job in a worker: as asked, else where there is a GPU (a GPU kernel can take
    the process down; the CPU interpreter raises instead)."""
    return isolate if isolate is not None else gpu


def maybe_pool(isolate: bool):
    """A pool of one worker per GPU (the CPU where there is none) when isolating, else a no-op context."""
    import contextlib

    return WorkerPool(default_devices()) if isolate else contextlib.nullcontext()


class Pending:
    """A submitted task; ``outcome`` is set once it finished (mutable bookkeeping, not a record)."""

    def __init__(self, task: Task, timeout_s: float):
        self.task, self.timeout_s = task, timeout_s
        self.outcome: TaskOutcome | None = None


class _Worker:
    def __init__(self, ctx, slot: int, device: str, initializer: str | None):
        fd, self.log = tempfile.mkstemp(prefix=f"harness-worker{slot}-", suffix=".log")
        os.close(fd)
        self.log_file = open(self.log, "rb")  # kept open: the path is unlinked once the worker is ready
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, name=f"harness-worker-{slot}",
                                args=(child, device, _worker_env(device), self.log, initializer))
        try:
            self.proc.start()
        except BaseException:
            self.log_file.close()
            _remove(self.log)
            raise
        finally:
            child.close()
        self.slot, self.device = slot, device
        self.ready, self.started = False, time.monotonic()
        self.job: Pending | None = None
        self.dispatched, self.deadline, self.log_offset = 0.0, math.inf, 0

    def tail(self) -> str:
        """The worker's output (stderr and stdout) since its current task started, last lines only."""
        try:
            self.log_file.seek(self.log_offset)
            text = self.log_file.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""
        # faulthandler ends with a long "Extension modules: ..." list (which can span lines): noise that
        # would crowd out the stack, and the last thing a dying worker writes, so cut it off.
        text = text.split("Extension modules:")[0]
        lines = [ln.rstrip()[:TAIL_LINE_CHARS] for ln in text.strip().splitlines()]
        return "\n".join(lines[-TAIL_LINES:])


class WorkerPool:
    """One worker process per device; driven from one thread (the caller's), never shared between threads."""

    def __init__(self, devices: list[str], *, timeout_s: float = TASK_TIMEOUT_S,
                 initializer: str | None = DEFAULT_INITIALIZER):
        if not devices:
            raise ValueError("WorkerPool needs at least one device")
        self.devices, self.timeout_s, self._initializer = list(devices), timeout_s, initializer
        self._ctx = multiprocessing.get_context("spawn")  # CUDA cannot be forked
        self._queue: deque[Pending] = deque()
        self._start_failures = [0] * len(self.devices)
        self._bound: dict[str, int] = {}  # affinity -> the slot that took its first task
        self._closed = False
        self._workers: list[_Worker | None] = []
        atexit.register(self.close)  # the last resort if the owner never closes: no orphans
        try:
            self._workers = [_Worker(self._ctx, i, d, initializer) for i, d in enumerate(self.devices)]
        except BaseException:
            self.close()
            raise

    @property
    def size(self) -> int:
        return len(self.devices)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ submitting and waiting

    def submit(self, task: Task, timeout_s: float | None = None) -> Pending:
        if self._closed:
            raise RuntimeError("WorkerPool is closed")
        limit = timeout_s if timeout_s is not None else task.timeout_s if task.timeout_s is not None \
            else self.timeout_s
        pending = Pending(task, float(limit))
        self._queue.append(pending)
        self._dispatch()
        return pending

    def wait(self, pending: Pending) -> TaskOutcome:
        self._pump(lambda: pending.outcome is not None)
        return pending.outcome

    def run(self, task: Task, timeout_s: float | None = None) -> TaskOutcome:
        return self.wait(self.submit(task, timeout_s))

    def map_unordered(self, tasks: Iterable[Task]) -> Iterator[tuple[int, TaskOutcome]]:
        """(index, outcome) of every task as it finishes, the tasks spread over all workers."""
        pending = {i: self.submit(t) for i, t in enumerate(tasks)}
        try:
            while pending:
                self._pump(lambda: any(p.outcome is not None for p in pending.values()))
                for i in [i for i, p in pending.items() if p.outcome is not None]:
                    yield i, pending.pop(i).outcome
        finally:  # the consumer stopped early: what never started is dropped
            for p in pending.values():
                if p in self._queue:
                    self._queue.remove(p)

    # ------------------------------------------------------------------ the scheduler

    def _pump(self, done) -> None:
        while not done():
            if self._closed:
                raise RuntimeError("WorkerPool is closed")
            self._dispatch()
            live = [w for w in self._workers if w is not None]
            if not live:
                self._fail_queue("crashed (no worker could be started)")
                continue
            now = time.monotonic()
            deadlines = [w.deadline if w.job else math.inf for w in live]
            deadlines += [w.started + STARTUP_TIMEOUT_S for w in live if not w.ready]
            wait_s = min(max(0.0, min(deadlines) - now), 1.0)
            ready = set(wait_any([w.conn for w in live] + [w.proc.sentinel for w in live], wait_s))
            for w in live:
                if w.conn in ready or w.proc.sentinel in ready:
                    self._service(w)
            now = time.monotonic()
            for w in live:
                if self._workers[w.slot] is not w:
                    continue  # replaced while servicing
                if w.job is not None and now >= w.deadline:
                    self._timed_out(w)
                elif not w.ready and now >= w.started + STARTUP_TIMEOUT_S:
                    self._replace(w, startup_error=f"did not start within {STARTUP_TIMEOUT_S:g} s")

    def _next_for(self, slot: int) -> Pending | None:
        """The first queued task this slot may take: no affinity, an unbound one, or one bound to it."""
        for p in self._queue:
            a = p.task.affinity
            bound = self._bound.get(a) if a is not None else None
            if bound is not None and self._workers[bound] is None:
                del self._bound[a]  # its slot was given up: the rest of the group goes elsewhere, together
                bound = None
            if bound is None or bound == slot:
                return p
        return None

    def _dispatch(self) -> None:
        for w in self._workers:
            while w is not None and w.ready and w.job is None and self._queue:
                p = self._next_for(w.slot)
                if p is None:
                    break  # what is queued belongs to other slots' groups
                self._queue.remove(p)
                if p.task.affinity is not None:
                    self._bound.setdefault(p.task.affinity, w.slot)
                # Before the send: a task that crashes at once writes its dying words before this process, on a
                # loaded machine, gets to run again; an offset taken after the send would skip them.
                offset = os.fstat(w.log_file.fileno()).st_size
                try:
                    w.conn.send((p.task.fn, p.task.kwargs))  # pickled before anything is written
                except (BrokenPipeError, ConnectionError, EOFError):
                    self._queue.appendleft(p)  # the worker died idle; its sentinel reports it
                    break
                except Exception as exc:  # an unpicklable argument: that task's error, not the pool's
                    self._finish(p, w, "error", None, f"the task could not be sent: {type(exc).__name__}: {exc}")
                    continue
                w.job, w.dispatched = p, time.monotonic()
                w.deadline = w.dispatched + p.timeout_s
                w.log_offset = offset

    def _service(self, w: _Worker) -> None:
        try:
            while self._workers[w.slot] is w and w.conn.poll():
                self._message(w, w.conn.recv())
        except (EOFError, OSError):  # its end of the pipe is gone: dead or dying, either way replaced
            if self._workers[w.slot] is w:
                self._died(w)
            return
        if self._workers[w.slot] is w and not w.proc.is_alive():
            self._died(w)

    def _message(self, w: _Worker, msg: tuple) -> None:
        if msg[0] == "ready":
            w.ready, self._start_failures[w.slot] = True, 0
            _remove(w.log)  # both ends hold it open; unlinked, it cannot outlive them however they die
            return
        _, status, value, error, poisoned, duration = msg
        job, w.job, w.deadline = w.job, None, math.inf
        poisoned = poisoned or mentions_cuda_error(error)
        if job is not None:
            self._finish(job, w, status, value, error, duration)
        if poisoned:  # the CUDA context is unusable: never give this process another task
            self._replace(w)

    def _died(self, w: _Worker) -> None:
        w.proc.join(1.0)
        why = describe_exit(w.proc.exitcode)
        if w.job is not None:
            tail = w.tail()
            self._finish(w.job, w, "crashed", None, f"crashed ({why})\nworker pid {w.proc.pid} on {w.device} died"
                                                    + (f"; last lines of its output:\n{tail}" if tail else ""))
            self._replace(w)
        elif not w.ready:
            self._replace(w, startup_error=f"died while starting ({why})")
        else:
            self._replace(w)

    def _timed_out(self, w: _Worker) -> None:
        if w.conn.poll():  # the result arrived just now: it wins over the clock
            self._service(w)
            if w.job is None or self._workers[w.slot] is not w:
                return
        if hasattr(signal, "SIGUSR1") and w.proc.is_alive():
            try:  # faulthandler in the worker dumps the task's stack into its log: where it hung
                os.kill(w.proc.pid, signal.SIGUSR1)
                time.sleep(0.3)
            except OSError:
                pass
        job = w.job
        _stop(w)
        tail = w.tail()
        self._finish(job, w, "timeout", None,
                     f"timed out after {job.timeout_s:g} s\nworker pid {w.proc.pid} on {w.device} was killed and "
                     "replaced" + (f"; where it was:\n{tail}" if tail else ""))
        self._replace(w)

    def _replace(self, w: _Worker, startup_error: str = "") -> None:
        _stop(w)
        if startup_error:
            self._start_failures[w.slot] += 1
            if self._queue:  # a worker that cannot start fails one waiting task, so a run always ends
                self._finish(self._queue.popleft(), w, "crashed", None,
                             f"crashed (worker {startup_error})\nits output:\n{w.tail()}")
        _discard(w)
        if self._closed or self._start_failures[w.slot] >= MAX_START_FAILURES:
            self._workers[w.slot] = None
        else:
            self._workers[w.slot] = _Worker(self._ctx, w.slot, w.device, self._initializer)

    def _finish(self, p: Pending, w: _Worker, status: str, value, error: str, duration: float | None = None) -> None:
        if duration is None:
            duration = time.monotonic() - w.dispatched if w.dispatched else 0.0
        p.outcome = TaskOutcome(status, value, error, duration, w.proc.pid or 0, w.device)

    def _fail_queue(self, error: str) -> None:
        while self._queue:
            p = self._queue.popleft()
            p.outcome = TaskOutcome("crashed", None, error, 0.0, 0, "")

    # ------------------------------------------------------------------ shutdown

    def close(self) -> None:
        """Stop every worker: ask idle ones to exit, terminate busy ones, SIGKILL what is left."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        workers = [w for w in self._workers if w is not None]
        self._workers = [None] * len(self._workers)
        for w in workers:
            try:
                if w.job is None:
                    w.conn.send(None)
                else:
                    w.proc.terminate()
            except (OSError, ValueError):
                pass
        end = time.monotonic() + GRACE_S
        for w in workers:
            w.proc.join(max(0.0, end - time.monotonic()))
        for w in workers:
            _stop(w)
            _discard(w)


def _stop(w: _Worker) -> None:
    if w.proc.is_alive():
        w.proc.terminate()
        w.proc.join(GRACE_S)
    if w.proc.is_alive():
        w.proc.kill()
        w.proc.join(GRACE_S)
    try:
        w.conn.close()
    except OSError:
        pass


def _discard(w: _Worker) -> None:
    w.log_file.close()
    _remove(w.log)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _worker_env(device: str) -> dict:
    """What the worker must see before it imports anything: its GPU, the interpreter switch, and the project's
    import roots (as PYTHONPATH, which the worker also puts on its sys.path: a task names its kernel by import
    path, and the worker's children see them too)."""
    from harness.config import load_config

    env = {k: os.environ[k] for k in ("TRITON_INTERPRET",) if k in os.environ}
    env["PYTHONPATH"] = load_config().pythonpath(os.environ.get("PYTHONPATH"))
    if device.startswith("cuda"):
        index = int(device.partition(":")[2] or 0)
        visible = visible_gpus()
        env[VISIBLE_ENV] = visible[index] if index < len(visible) else str(index)
    return env
