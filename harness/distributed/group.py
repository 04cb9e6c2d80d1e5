"""A process group of ``world`` rank processes that runs one task on every rank at a time.

The group lives across tasks (starting ranks and joining a group costs seconds: every case of one world size
shares it) and is torn down whole when a task goes wrong, since one rank's failure leaves the others blocked in
a collective that will never complete:
- a rank raises: the other ranks get a short grace to finish or fail on their own, then every rank still
  running is killed;
- a rank dies (segfault, abort, ``os._exit``): the rest are killed at once;
- the task passes its time limit: every rank is killed, and the outcome names the ranks that had not answered,
  the one stuck outside torch.distributed first (the others are only waiting for it in a collective).
The next task starts a fresh group. No rank outlives the group: ``close`` kills what is left, and a rank whose
parent died exits by itself.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import re
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_any

from harness.workers.child import TRACEBACK_MARKER
from harness.workers.pool import describe_exit

STARTUP_TIMEOUT_S = 300.0
GRACE_S = 0.5  # after one rank failed: how long the others may take to finish or fail by themselves
TAIL_LINES = 20
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>\S+)')


@dataclass(frozen=True)
class GroupOutcome:
    status: str                      # "ok" | "error" | "crashed" | "timeout"
    values: tuple                    # each rank's return value when ok
    error: str                       # one line first: which ranks and what; then the details
    duration_s: float

    @property
    def summary(self) -> str:
        return self.error.partition("\n")[0]


class GroupError(RuntimeError):
    """The group could not be started (a rank died or hung while joining)."""


def backend_for(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


class RankGroup:
    def __init__(self, world: int, device: str = "cpu", *, env: dict | None = None, join_timeout_s: float = 60.0):
        self.world, self.device, self.env = world, device, dict(env or {})
        self.join_timeout_s = join_timeout_s
        self._procs: list = []
        self._conns: list = []
        self._dir: str | None = None
        self._offsets = [0] * world  # where the current task's output starts in each rank's log
        atexit.register(self.close)  # the last resort if the owner never closes: no orphans

    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(p.is_alive() for p in self._procs)

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in self._procs)

    def __enter__(self) -> RankGroup:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        from harness.distributed.rank import rank_main

        self.close()
        ctx = multiprocessing.get_context("spawn")  # never fork a process that may hold a CUDA context
        self._dir = tempfile.mkdtemp(prefix="kh-group-")
        store = os.path.join(self._dir, "store")
        self._offsets = [0] * self.world
        for rank in range(self.world):
            open(self._log(rank), "wb").close()
            parent, child = ctx.Pipe()
            p = ctx.Process(target=rank_main, name=f"kh-rank{rank}", daemon=True,
                            args=(child, rank, self.world, backend_for(self.device), store, self._log(rank),
                                  self.env, self.join_timeout_s))
            p.start()
            child.close()
            self._procs.append(p)
            self._conns.append(parent)
        ready, deadline = set(), time.monotonic() + STARTUP_TIMEOUT_S
        while len(ready) < self.world:
            waiting = [r for r in range(self.world) if r not in ready]
            for r in self._dead(waiting):
                code, tail = self._procs[r].exitcode, self._tail(r)
                self.close(kill=True)
                raise GroupError(f"rank {r} of {self.world} died while joining the group ({describe_exit(code)})"
                                 + (f"\nits last lines:\n{tail}" if tail else ""))
            left = deadline - time.monotonic()
            if left <= 0:
                self.close(kill=True)
                raise GroupError(f"{_ranks(waiting)} of {self.world} did not join the group within "
                                 f"{STARTUP_TIMEOUT_S:g} s")
            for r in self._answered(waiting, left):
                ready.add(r)

    def run(self, fn: str, kwargs: dict, timeout_s: float) -> GroupOutcome:
        """``fn(**kwargs, rank=r)`` on every rank r, together; the group is restarted first if it is down."""
        if not self.alive:
            self.start()
        start = time.monotonic()
        self._offsets = [os.path.getsize(self._log(r)) for r in range(self.world)]  # this task's output only
        for r, conn in enumerate(self._conns):
            conn.send((fn, {**kwargs, "rank": r}))
        replies: dict[int, tuple] = {}
        deadline, failed_at = start + timeout_s, None
        while len(replies) < self.world:
            pending = [r for r in range(self.world) if r not in replies]
            dead = self._dead(pending, replies)
            if dead:
                tails = "\n".join(f"rank {r}'s last lines:\n{t}" for r in dead if (t := self._tail(r)))
                return self._fail("crashed", "; ".join(f"rank {r} crashed ({describe_exit(self._procs[r].exitcode)})"
                                                       for r in dead), start, tails)
            pending = [r for r in range(self.world) if r not in replies]
            now = time.monotonic()
            if not pending or failed_at is not None and now >= failed_at + GRACE_S:
                break
            if now >= deadline:
                return self._timed_out(pending, timeout_s, start)
            limit = min(deadline, failed_at + GRACE_S if failed_at is not None else deadline)
            for r, reply in self._answered(pending, limit - now):
                replies[r] = reply
                if reply[0] == "error" and failed_at is None:
                    failed_at = time.monotonic()
        errors = {r: rep[2] for r, rep in replies.items() if rep[0] == "error"}
        if errors:
            pending = [r for r in range(self.world) if r not in replies]
            first = min(errors)
            head, _, frames = errors[first].partition(TRACEBACK_MARKER)
            others = f" (and {_ranks(sorted(errors)[1:])})" if len(errors) > 1 else ""
            stuck = f"; {_ranks(pending)} had not finished" if pending else ""
            return self._fail("error", f"rank {first}{others} raised: {head.strip()}{stuck}", start,
                              f"rank {first}'s innermost frames:\n{frames}" if frames else "")
        return GroupOutcome("ok", tuple(replies[r][1] for r in range(self.world)), "", time.monotonic() - start)

    def _answered(self, ranks: list[int], within_s: float):
        """(rank, message) of each of ``ranks`` that sends one within ``within_s`` (or dies: :meth:`_dead`
        then sees it)."""
        conns = {self._conns[r]: r for r in ranks}
        sentinels = [self._procs[r].sentinel for r in ranks]
        for obj in wait_any([*conns, *sentinels], max(0.0, min(within_s, 1.0))):
            if obj in sentinels:
                continue
            try:
                yield conns[obj], obj.recv()
            except (EOFError, OSError):
                continue

    def _dead(self, ranks: list[int], replies: dict | None = None) -> list[int]:
        """Those of ``ranks`` whose process is gone, once anything it sent before dying is in ``replies``."""
        dead = []
        for r in ranks:
            if self._procs[r].is_alive():
                continue
            try:
                if replies is not None and self._conns[r].poll():
                    replies[r] = self._conns[r].recv()
                    continue
            except (EOFError, OSError):
                pass
            dead.append(r)
        return dead

    def _timed_out(self, pending: list[int], timeout_s: float, start: float) -> GroupOutcome:
        """Where each silent rank is, from the stack faulthandler dumps on SIGUSR1: a rank waiting inside
        torch.distributed waits for another; a rank anywhere else is the one that hung."""
        for r in pending:
            try:
                os.kill(self._procs[r].pid, signal.SIGUSR1)
            except OSError:
                pass
        time.sleep(0.3)
        where = {r: _innermost(self._tail(r, lines=200)) for r in pending}
        waiting = [r for r in pending if where[r] and "torch/distributed" in where[r][0]]
        hung = [r for r in pending if r not in waiting]
        head = f"timed out after {timeout_s:g} s: {_ranks(hung or pending)} did not answer"
        if hung and where[hung[0]]:
            path, line, fn = where[hung[0]]
            head += f" (in {fn}, {_short(path)}:{line})"
        if hung and waiting:
            head += f"; {_ranks(waiting)} waited for {'it' if len(hung) == 1 else 'them'} in torch.distributed"
        elif not hung:
            head += " (every one inside torch.distributed: a collective some rank never joined)"
        details = "\n".join(f"rank {r}: in {w[2]}, {_short(w[0])}:{w[1]}" for r in pending if (w := where[r]))
        return self._fail("timeout", head, start, details)

    def _fail(self, status: str, what: str, start: float, details: str = "") -> GroupOutcome:
        self.close(kill=True)
        details = f"{details}\n" if details else ""
        return GroupOutcome(status, (), f"{what}\n{details}the group of {self.world} was stopped; the next case "
                                        "starts a new one", time.monotonic() - start)

    def _log(self, rank: int) -> str:
        return os.path.join(self._dir, f"rank{rank}.log")

    def _tail(self, rank: int, lines: int = TAIL_LINES) -> str:
        """Rank ``rank``'s output since the current task started (a segfault's message, a stack dump)."""
        try:
            with open(self._log(rank), "rb") as f:
                f.seek(self._offsets[rank])
                text = f.read().decode("utf-8", "replace")
        except (OSError, TypeError):
            return ""
        text = text.split("Extension modules:")[0]  # faulthandler's closing list of modules: noise
        return "\n".join(ln.rstrip() for ln in text.strip().splitlines()[-lines:])

    def close(self, kill: bool = False) -> None:
        """Stop every rank: asked to leave the group (``kill``: killed at once, as after a failure, when some
        are stuck in a collective)."""
        for conn in self._conns if not kill else ():
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + (0.0 if kill else 2.0)
        for p in self._procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in self._procs:
            if p.is_alive():
                p.kill()
                p.join(5.0)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def missing_gpus(world: int, device) -> str:
    """Why ``device`` (a harness.target.device.Device) cannot hold a group of ``world`` ranks, one GPU each;
    '' when it can (a CPU always can: gloo ranks are processes)."""
    if not device.is_gpu:
        return ""
    from harness.workers.pool import visible_gpus

    have = len(visible_gpus())
    return f"world size {world} needs {world} GPUs (one per rank); {have} visible" if have < world else ""


def project_group(world: int, device: str) -> RankGroup:
    """A group (not started yet) whose ranks import the project's kernels as this process does: the config's
    import roots on their PYTHONPATH."""
    from harness.config import load_config

    return RankGroup(world, device, env={"PYTHONPATH": load_config().pythonpath(os.environ.get("PYTHONPATH"))})


def _innermost(dump: str) -> tuple[str, int, str] | None:
    """(file, line, function) of the main thread's innermost frame in a faulthandler dump: the last dump's
    thread whose stack reaches rank_main."""
    blocks = re.split(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$", dump, flags=re.M)
    for block in reversed(blocks):
        frames = [m for ln in block.splitlines() if (m := _FRAME.match(ln))]
        if frames and any(m["fn"] == "rank_main" for m in frames):
            return frames[0]["file"], int(frames[0]["line"]), frames[0]["fn"]
    return None


def _short(path: str) -> str:
    """A path relative to the working directory where it is under it (a kernel's file), else whole."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _ranks(ranks) -> str:
    ranks = list(ranks)
    return f"rank{'s' if len(ranks) != 1 else ''} {', '.join(map(str, ranks))}"
