"""A rank process's life: join the process group, say ready, run what the parent sends until told to stop.

Its GPU (one per rank, ``cuda:<rank>`` of the devices the parent sees) is set before the group is made, so
NCCL binds each rank to its own card. A task that raises is sent back as text; anything worse (a segfault, a
hang inside a collective) is the parent's to see and clean up.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from datetime import timedelta

from harness.workers.child import exit_with_parent, format_exception, resolve, tasks


def rank_main(conn, rank: int, world: int, backend: str, store_path: str, log_path: str, env: dict,
              timeout_s: float) -> None:
    # fd-level, so a segfault's message lands in the log too; and the group lives across pytest items, whose
    # output capture a rank must not write into
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable()
    # every thread: the signal may land on any of them, and the parent reads the main thread's stack (where a
    # hung rank is) from the dump
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; it then stops every rank
    os.environ.update(env)
    for root in [*os.environ.get("PYTHONPATH", "").split(os.pathsep), os.getcwd()]:
        if root and root not in sys.path:
            sys.path.append(root)
    exit_with_parent(os.getppid())
    from harness.spec.imports import use_interpreter_if_no_gpu

    use_interpreter_if_no_gpu()
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, store=dist.FileStore(store_path, world), rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))
    conn.send(("ready", os.getpid()))
    for fn, kwargs in tasks(conn):
        try:
            reply = ("ok", resolve(fn)(**kwargs), "")
        except BaseException as exc:  # SystemExit from a kernel is its failure too
            reply = ("error", None, format_exception(exc))
            del exc
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send(reply)
    dist.destroy_process_group()
