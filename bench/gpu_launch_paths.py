#!/usr/bin/env python3
"""How much of a Triton launcher's host time is the launcher's own Python, how much Triton's ``JITFunction.run``,
and how much the launch itself: the floor a cached launch path could reach.

Per case (built from its spec as the benchmark builds it: bench/gpu_timing_compute.py's ``build``), one call is
made with the backend's launcher class watched (``driver.active.launcher_cls``, what a compiled kernel's ``run``
is): each launch's grid, stream, function, metadata and arguments, as Triton passed them. Host time per call
(the GPU kept busy behind a spin, as bench/gpu_host_profile.py measures it) is then taken four ways:

- ``provider``: the shipped call, as the benchmark times it (kernels/fastlaunch.py replaying its launches);
- ``through_triton``: the same call with that cache off, every launch through Triton's ``JITFunction.run`` (a
  launcher's plan per call signature, kernels/common.py's ``Plans``, still applies: its Python is not repeated);
- ``jit``: each recorded launch again through ``JITFunction.run`` (Triton's binder, specialisation and cache
  lookup, its grid), without the launcher's own code;
- ``direct``: each recorded launch straight to its launcher, nothing recomputed: the floor a launch cache keyed on
  the launcher's own arguments approaches (kernels/fastlaunch.py still builds that key).

Both shortcuts are checked before they are timed: two calls through Triton, and one through Triton then one
shipped call (``fastlaunch_problem``), must leave every tensor argument bitwise equal; so must a provider call
then a direct replay (``direct_problem``), in-place kernels included. A case whose launches
cannot be replayed (a launch that is not Triton's, say a cuBLAS call) reports why and gets the provider's time only.

Usage: python3 bench/gpu_launch_paths.py --out DIR [--calls N] [--only LABEL,...]  (writes DIR/launch_paths.json)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gpu_host_profile import CASES, host_us  # noqa: E402
from gpu_timing_compute import build  # noqa: E402

from kernels import fastlaunch  # noqa: E402
from kernels.fastlaunch import recorded_launches as record  # noqa: E402


def through_triton(fn):
    """fn with every kernels.fastlaunch.FastLaunch launching through Triton, as before that cache."""

    def call():
        fastlaunch.ENABLED = False
        try:
            return fn()
        finally:
            fastlaunch.ENABLED = True

    return call


def direct_call(launches):
    """Replays the recorded launches through the launchers themselves: nothing recomputed."""

    def replay():
        for launcher, args in launches:
            launcher(*args)

    return replay


def jit_call(fn):
    """Replays fn's launches through JITFunction.run: the JIT functions' own entry, not the launcher's code."""
    from triton.runtime.jit import JITFunction

    seen, original = [], JITFunction.run

    def watched(self, *args, grid, warmup, **kwargs):
        seen.append((self, args, grid, kwargs))
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    JITFunction.run = watched
    try:
        fn()
    finally:
        JITFunction.run = original

    def replay():
        for jit, args, grid, kwargs in seen:
            jit.run(*args, grid=grid, warmup=False, **kwargs)

    return replay


def tensors_of(fn) -> dict:
    import torch

    return {k: v for k, v in getattr(fn, "keywords", {}).items() if isinstance(v, torch.Tensor)}


def same_effect(fn, replay, first=None) -> str | None:
    """None when a ``first`` call (fn's by default) then ``replay`` leaves every tensor argument of fn as two
    ``first`` calls do."""
    import torch

    first = first or fn
    ts = tensors_of(fn)
    start = {k: t.clone() for k, t in ts.items()}

    def state_after(second):
        for k, t in ts.items():
            t.copy_(start[k])
        first()
        second()
        torch.cuda.synchronize()
        return {k: t.clone() for k, t in ts.items()}

    want, got = state_after(first), state_after(replay)
    for k, t in ts.items():
        t.copy_(start[k])
    def bits(t):
        return t.contiguous().view(torch.uint8) if t.numel() else t

    bad = [k for k in ts if not torch.equal(bits(want[k]), bits(got[k]))]
    return f"tensors differ after the replay: {', '.join(bad)}" if bad else None


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = {s for s in a.only.split(",") if s}
    rows = []
    for c in CASES:
        if wanted and c.label not in wanted:
            continue
        row = {"label": c.label, "provider": c.provider, "case": c.case_id}
        try:
            fn = build(c)
            for _ in range(5):  # compiles and autotuning happen here
                fn()
            row["provider_us"] = sorted(host_us(fn, a.calls) for _ in range(3))[1]
            slow = through_triton(fn)
            row["through_triton_us"] = sorted(host_us(slow, a.calls) for _ in range(3))[1]
            row["fastlaunch_problem"] = same_effect(fn, fn, first=slow)
            # a returned output is the recorded call's own: replays write into it, and the check below compares
            # the keyword tensors only
            row["returns_tensor"] = isinstance(fn(), torch.Tensor)
            launches = record(fn)
            row["launches"] = len(launches)
            if not launches:
                row["direct_problem"] = "no Triton launch recorded (a library call, say cuBLAS)"
            else:
                replay = direct_call(launches)
                row["direct_problem"] = same_effect(fn, replay)
                jit = jit_call(slow)
                row["jit_us"] = sorted(host_us(jit, a.calls) for _ in range(3))[1]
                if row["direct_problem"] is None:
                    row["direct_us"] = sorted(host_us(replay, a.calls) for _ in range(3))[1]
        except Exception as exc:  # one case's failure is reported, the others still run
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        rows.append(row)
        print(json.dumps(row), flush=True)
        (out / "launch_paths.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
