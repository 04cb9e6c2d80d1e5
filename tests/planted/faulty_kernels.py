"""Kernels that fail the hard way: raise, hang, kill their process, segfault, read out of bounds on a GPU.

Each follows the calling convention of tests/specs/scale.toml (``x``, ``w``, ``out``). Run in-process they
would take the test run down with them; tests/test_isolation.py asserts that with ``--isolate`` each is
reported as its own case's failure and the run goes on.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

import triton
import triton.language as tl

RAISE_MESSAGE = "planted failure: the launcher rejects every shape"


def raises(*, x, w, out):
    raise RuntimeError(RAISE_MESSAGE)


def hangs(*, x, w, out):
    while True:  # a kernel that never returns (a spin on a flag nobody sets)
        time.sleep(0.05)


def killed(*, x, w, out):
    os.kill(os.getpid(), signal.SIGKILL)


def exits(*, x, w, out):
    os._exit(3)


def segfault(*, x, w, out):
    ctypes.string_at(0)  # reads address 0: SIGSEGV


@triton.jit
def _oob_kernel(x_ptr, out_ptr, n, offset, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    # The bug: the offset is added to the pointer, not checked by the mask; ~8 TB past x is unmapped.
    v = tl.load(x_ptr + offset + cols, mask=mask)
    tl.store(out_ptr + cols, v, mask=mask)


def out_of_bounds(*, x, w, out):
    """An illegal memory access on a GPU (it poisons the CUDA context); only meaningful on CUDA."""
    if x.numel() == 0:
        return
    n = x.numel()
    _oob_kernel[(triton.cdiv(n, 1024),)](x, out, n, 1 << 40, BLOCK=1024)

