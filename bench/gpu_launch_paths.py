#!/usr/bin/env python3
"""How much of a Triton launcher's host time is the launcher's own Python, how much Triton's ``JITFunction.run``,
and how much the launch itself: the floor a cached launch path could reach.

Per case (built from its spec as the benchmark builds it: bench/gpu_timing_compute.py's ``build``), one call is
made with the backend's launcher class watched (``driver.active.launcher_cls``, what a compiled kernel's ``run``
is): each launch's grid, stream, function, metadata and arguments, as Triton passed them. Host time per call
(the GPU kept busy behind a spin, as bench/gpu_host_profile.py measures it) is then taken three ways:

- ``provider``: the shipped call, as the benchmark times it;
- ``jit``: each recorded launch again through ``JITFunction.run`` (Triton's binder, specialisation and cache
  lookup, its grid), without the launcher's own code;
- ``direct``: each recorded launch straight to its launcher, nothing recomputed: the floor a launch cache keyed on
  the launcher's own arguments would approach (it would still build that key and the argument list).

The direct path is checked before it is timed: from the same inputs, two provider calls and a provider call then a
direct replay must leave every tensor argument bitwise equal (in-place kernels included). A case whose launches
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


def record(fn) -> list[tuple]:
    """(launcher, its arguments) of every Triton launch one call of fn makes: the backend's launcher object (the
    compiled kernel's ``run``) with exactly what JITFunction.run passed it (grid, stream, function, metadata,
    hooks, every kernel argument), whichever Triton version built that list."""
    from triton.runtime import driver

    cls = driver.active.launcher_cls
    seen, original = [], cls.__call__

    def watched(self, *args):
        seen.append((self, args))
        return original(self, *args)

    cls.__call__ = watched
    try:
        fn()
    finally:
        cls.__call__ = original
    return seen


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


def same_effect(fn, replay) -> str | None:
    """None when a provider call then ``replay`` leaves every tensor argument as two provider calls do."""
    import torch

    ts = tensors_of(fn)
    start = {k: t.clone() for k, t in ts.items()}

    def state_after(second):
        for k, t in ts.items():
            t.copy_(start[k])
        fn()
        second()
        torch.cuda.synchronize()
        return {k: t.clone() for k, t in ts.items()}

    want, got = state_after(fn), state_after(replay)
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
                jit = jit_call(fn)
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
