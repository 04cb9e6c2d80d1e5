"""`fork_map`: run fn(0), ..., fn(n-1) in forked worker processes and get the results back in order.

Made for work whose inputs cannot be pickled (harness.aot.triton's launch records hold live JITFunctions): the
callable and everything it closes over stay in this module's globals, which the workers inherit through fork;
only the item's index goes to a worker and only the (picklable) result comes back. A worker that dies (a
segfault in LLVM, os._exit) or raises costs that item alone: it gets `failed(i, why)` and the others finish.
Linux only ('fork'); `jobs()` says 1 elsewhere and the caller stays serial.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

__all__ = ["JOBS_ENV", "fork_available", "jobs", "fork_map"]

T = TypeVar("T")
JOBS_ENV = "KH_MATRIX_JOBS"

# What the workers inherit: set by fork_map in the parent before it forks, never sent through a pipe.
_FN: Callable[[int], Any] | None = None
_STATE: Any = None  # shared memory, one byte per item: 1 while a worker runs it, 2 once it returned


def fork_available() -> bool:
    # macOS has fork too, but forking a process that has loaded system frameworks is unsafe there
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def jobs(requested: int | None = None) -> int:
    """Worker processes to use: `requested`, else $KH_MATRIX_JOBS, else every core this process may run on
    (os.cpu_count() less any affinity mask: a container pinned to 4 of 64 cores gets 4); 1 without fork."""
    if requested is None:
        env = os.environ.get(JOBS_ENV, "").strip()
        if env:
            try:
                requested = int(env)
            except ValueError:
                raise ValueError(f"{JOBS_ENV}={env!r}: expected a whole number of worker processes") from None
        elif hasattr(os, "sched_getaffinity"):
            requested = len(os.sched_getaffinity(0))
        else:
            requested = os.cpu_count() or 1
    return max(1, requested) if fork_available() else 1


def fork_map(fn: Callable[[int], T], n: int, jobs: int, failed: Callable[[int, str], T]) -> list[T]:
    """[fn(0), ..., fn(n-1)], computed in up to `jobs` forked workers; item i is `failed(i, why)` (in the
    parent) when its worker died or raised. fn's results must pickle; fn itself need not."""
    global _FN, _STATE
    ctx = multiprocessing.get_context("fork")
    saved = _FN, _STATE
    _FN, _STATE = fn, ctx.RawArray("b", max(n, 1))  # set before any fork below: the workers inherit both
    try:
        out: dict[int, T] = {}
        pending = list(range(n))
        while pending:
            # A dead worker breaks the whole pool: every future not yet delivered fails with BrokenProcessPool,
            # and which item killed it is not said. Re-running the lost items serially here would let a
            # deterministic segfault take the parent down, and marking them all failed would blame innocent
            # items. So: the items a worker had started and not finished (the culprit, and whatever the other
            # workers were running when the pool shut them down; at most `jobs` items) run again, each in a
            # process of its own, where a death is that item's; the rest go to a fresh pool. Each round settles
            # at least one item, so this ends.
            done, lost = _pool_round(ctx, pending, jobs, failed)
            out.update(done)
            suspects = [i for i in lost if _STATE[i] == 1] or lost  # none started: died between items; all alone
            out.update(_alone(ctx, suspects, jobs, failed))
            pending = [i for i in lost if i not in out]
    finally:
        _FN, _STATE = saved
    return [out[i] for i in range(n)]


def _init_worker() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:  # the parent's intra-op thread count, times `jobs` workers, would oversubscribe
        torch.set_num_threads(1)


def _call(i: int):
    _STATE[i] = 1
    result = _FN(i)
    _STATE[i] = 2
    return result


def _pool_round(ctx, items: list[int], jobs: int, failed) -> tuple[dict, list[int]]:
    """Results of the items a pool delivered, and the items lost because the pool broke."""
    done, lost = {}, []
    # max_tasks_per_child is not used: CPython refuses it with the 'fork' start method, and a fresh worker per
    # item would only repeat its warm-up (a Triton compile leaks nothing that matters over one matrix run)
    pool = ProcessPoolExecutor(min(jobs, len(items)), mp_context=ctx, initializer=_init_worker)
    try:
        futures = [(i, pool.submit(_call, i)) for i in items]
        for i, fut in futures:
            try:
                done[i] = fut.result()
            except BrokenProcessPool:
                lost.append(i)
            except Exception as e:  # noqa: BLE001 - raised in the worker (or its result would not pickle)
                done[i] = failed(i, f"worker raised {type(e).__name__}: {e}")
    except BaseException:  # Ctrl-C: do not wait for the queue to drain
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return done, lost


def _alone(ctx, items: list[int], jobs: int, failed) -> dict:
    """Each item in a process of its own (up to `jobs` at a time): a death there is that item's."""
    out = {}
    for start in range(0, len(items), jobs):
        running = []
        for i in items[start:start + jobs]:
            recv, send = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_alone_child, args=(i, send))
            proc.start()
            send.close()
            running.append((i, proc, recv))
        for i, proc, recv in running:
            try:
                kind, value = recv.recv()
            except EOFError:
                kind, value = "died", None
            recv.close()
            proc.join()
            if kind == "ok":
                out[i] = value
            else:
                out[i] = failed(i, value if kind == "raised" else f"worker process died ({_exit_text(proc.exitcode)})")
    return out


def _alone_child(i: int, send) -> None:
    _init_worker()
    try:
        message = ("ok", _call(i))
    except Exception as e:  # noqa: BLE001 - reported as the item's failure
        message = ("raised", f"worker raised {type(e).__name__}: {e}")
    send.send(message)
    send.close()


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
