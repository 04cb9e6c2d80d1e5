"""Launchers that fool the clock: each wraps the correct scale kernel of broken_kernels and plants one of the
ways a kernel looks fast or correct without doing the work the caller asked for. tests/test_clock_checks.py
asserts which generated check catches each, and with what message."""

from __future__ import annotations

import torch

from tests.planted.broken_kernels import _launch

_SEEN: dict = {}


def _key(*tensors) -> tuple:
    return tuple((t.data_ptr(), tuple(t.shape), t.dtype) for t in tensors)


def scale_replays(*, x, w, out):
    """Returns at once when called again with the same buffers: the timed loop sees 0 us."""
    key = _key(x, w, out)
    if _SEEN.get("replay") == key:
        return
    _SEEN["replay"] = key
    _launch(x, w, out)


def scale_cached_by_pointer(*, x, w, out):
    """Caches its result by data pointer and copies it back: right for the first values, stale after."""
    key = ("cache", *_key(x, w))
    if key not in _SEEN:
        _launch(x, w, out)
        _SEEN[key] = out.clone()
    out.copy_(_SEEN[key])


def scale_first_call_only(*, x, w, out):
    """Writes its output only the first time it sees these buffers (a one-time initialisation gone wrong)."""
    key = ("first", *_key(x, w, out))
    if key not in _SEEN:
        _SEEN[key] = True
        _launch(x, w, out)


def scale_side_stream(*, x, w, out):
    """Runs the kernel on a stream of its own and never makes the caller's stream wait for it (GPU)."""
    stream = _SEEN.setdefault(("stream", x.device), torch.cuda.Stream(device=x.device))
    with torch.cuda.stream(stream):
        _launch(x, w, out)


def scale_host_sync(*, x, w, out):
    """Reads a value back to the host in the launcher (a `.item()` on the hot path): it cannot be captured."""
    if float(w.abs().max().item()) < 0:
        raise AssertionError("unreachable")
    _launch(x, w, out)


def scale_derives_w_once(*, x, w, out):
    """Derives its weight once per weight buffer (w * 1, standing for a repacked or dequantised weight, as a
    serving stack keeps one) and reuses it: right where w is a model's weight (static), stale where w may
    change between calls."""
    key = ("derived", *_key(w))
    if key not in _SEEN:
        _SEEN[key] = w.clone()
    _launch(x, _SEEN[key], out)
