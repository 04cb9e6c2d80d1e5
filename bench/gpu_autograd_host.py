#!/usr/bin/env python3
"""Where a norm's forward-and-backward host time goes through autograd (the benchmark's ``full`` mode).

On the H200 (reports/h200/, 2026-12-06) LayerNormFunction's forward and backward took 711 us of host time per
call at 64 x 4096 with the GPU kept busy, against 166 for F.layer_norm's, where its forward launcher alone took 12
and its backward kernel alone 56. This splits that time on the GPU, each figure the host microseconds per call of
back-to-back calls behind a spin kernel (the benchmark's method, bench/gpu_host_profile.py's host_us), the
median of REPEATS timings:

- the forward through ``Function.apply`` (leaves that need gradients) and the backward through
  ``torch.autograd.grad`` on its graph, apart and together, for LayerNorm, RMSNorm and torch's LayerNorm;
- the launchers called directly (forward with statistics, backward kernel), no autograd, and the backward's
  launcher and the Function's ``backward`` (a stand-in ctx) also from a second thread, as autograd's device thread
  runs them;
- the same autograd calls with a backward that launches nothing (what the autograd machinery costs alone), and a
  Function that passes its gradient through, on CUDA tensors and on CPU ones (the device thread's cost);
- LayerNorm's forward and backward inside autograd with its Function's forward and backward and both launchers
  timed from within, so what autograd adds around them is the rest; then again with a pause after each call (does
  autograd's device thread, still holding Python objects after a call returns, slow the next forward?);
- LayerNorm's forward and backward over torch's, each pair timed back to back: the median of the pairs' ratios
  (the host's speed drifts between calls; within a pair, less);
- torch.profiler over a few full calls: the operators with the most self CPU time, on every thread.

Usage: python3 bench/gpu_autograd_host.py --out DIR   (writes DIR/autograd_host.json and DIR/profile.txt)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


REPEATS = 5  # one figure is the median of this many timings: single timings of one call varied up to 1.5x


def calls_ns(fn, calls: int) -> int:
    """Host nanoseconds of ``calls`` back-to-back calls of fn."""
    t = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return time.perf_counter_ns() - t


def host_us(fn, calls: int = 50) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(4e8))  # 0.2 s or more of spin, ten times what 50 calls take: all queue behind it
        times.append(calls_ns(fn, calls) / 1e3 / calls)
    torch.cuda.synchronize()
    return statistics.median(times)


def interleaved_ratio(ours, theirs, calls: int = 50, abba: bool = False) -> tuple[float, list[float]]:
    """The median over REPEATS of ours' host time over theirs', each pair timed back to back (ours, then theirs,
    behind one spin): the host's speed drifts between runs (LayerNorm's forward and backward read 259 to 690 us
    per call in five device calls on H100 hosts, 2026-12-07), less within a pair. Returns the median ratio and
    every pair's.

    ``abba``: each repeat times ours, theirs, theirs, ours behind one spin and takes the ratio of the sums, so
    neither side is always the first after the synchronize (on an H100, 2026-12-07, the pairs read 1.74x where
    the two timed apart read 161 against 120 us, 1.35x: norms-fp8)."""
    for fn in (ours, theirs):
        for _ in range(5):
            fn()
    ratios = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(16e8 if abba else 8e8))  # every timing behind it
        if abba:
            a1, b1, b2, a2 = (calls_ns(f, calls) for f in (ours, theirs, theirs, ours))
            ratios.append((a1 + a2) / (b1 + b2))
        else:
            ratios.append(calls_ns(ours, calls) / calls_ns(theirs, calls))
    torch.cuda.synchronize()
    return statistics.median(ratios), ratios


def _put(owner, name, value) -> None:
    if isinstance(owner, dict):
        owner[name] = value
    else:
        setattr(owner, name, staticmethod(value) if isinstance(owner, type) else value)


def timed(owner, name, spent: dict):
    """owner.name (owner[name] for a dict) replaced by a wrapper adding its time per call to spent[label]; the
    original returned."""
    real = owner[name] if isinstance(owner, dict) else getattr(owner, name)
    label = name if isinstance(name, str) else "backward launch"

    def wrapper(*args, **kwargs):
        t = time.perf_counter_ns()
        try:
            return real(*args, **kwargs)
        finally:
            spent[label] = spent.get(label, 0) + time.perf_counter_ns() - t

    _put(owner, name, wrapper)
    return real


def inside_autograd(fwd, wrt, g, fn_cls, plan, calls: int = 50, pause_s: float = 0.0) -> dict:
    """Where one forward-and-backward's host time goes inside autograd: the Function's forward and backward and
    the launchers they call, timed from within (perf_counter around each), against the whole call; the rest is
    the autograd machinery and the handoff to its device thread. Medians of REPEATS timings.

    ``pause_s``: a sleep after each call (the GIL released), its own time taken out of the whole: whatever
    autograd's device thread still does with the GIL once a call has returned then no longer competes with the
    next forward's Python."""
    # the Function's forward and backward, and the launches of its plan (kernels/norm_autograd.py): the forward
    # launcher's, and the backward launcher's for this grad_out
    bwd = plan._bwd._plans
    names = [(fn_cls, "forward"), (fn_cls, "backward"), (plan, "fwd"), (bwd, next(iter(bwd)))]
    labels = ["forward", "backward", "fwd", "backward launch"]
    rows: dict[str, list[float]] = {}
    for _ in range(REPEATS):
        spent: dict = {}
        reals = [timed(owner, name, spent) for owner, name in names]
        try:
            for _ in range(5):
                torch.autograd.grad(fwd(), wrt, g)
            spent.clear()
            torch.cuda.synchronize()
            torch.cuda._sleep(int(4e8))
            t, paused = time.perf_counter_ns(), 0
            for _ in range(calls):
                torch.autograd.grad(fwd(), wrt, g)
                if pause_s:
                    p = time.perf_counter_ns()
                    time.sleep(pause_s)
                    paused += time.perf_counter_ns() - p
            whole = time.perf_counter_ns() - t - paused
        finally:
            for (owner, name), real in zip(names, reals, strict=True):
                _put(owner, name, real)
        torch.cuda.synchronize()
        per = {label: spent.get(label, 0) / 1e3 / calls for label in labels}
        per["whole call"] = whole / 1e3 / calls
        per["outside the Function (autograd)"] = per["whole call"] - per["forward"] - per["backward"]
        per["Function.forward less its launch"] = per["forward"] - per["fwd"]
        per["Function.backward less its launches"] = per["backward"] - per["backward launch"]
        for k, v in per.items():
            rows.setdefault(k, []).append(v)
    where = f"layernorm inside autograd, {pause_s * 1e3:g} ms pause after each call" if pause_s else \
        "layernorm inside autograd"
    return {f"{where}: {k}": statistics.median(v) for k, v in rows.items()}


def in_thread(fn):
    """fn() run on a new thread (as autograd's device thread runs a backward), its result returned."""
    out = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def no_op(*operands) -> None:
    """A launch replaced: what the rest of the call costs without it."""


class PassThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


def planned_pass_through():
    """PassThrough as a kernels.norm_autograd.PlannedFunction: what its apply saves on the engine's own cost."""
    from kernels.norm_autograd import PlannedFunction

    class PlannedPassThrough(PlannedFunction):
        forward, backward = staticmethod(PassThrough.forward), staticmethod(PassThrough.backward)
    return PlannedPassThrough


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=4096)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from kernels import layernorm as ln
    from kernels import layernorm_bwd as lnb
    from kernels import rmsnorm_bwd as rb
    from kernels.common import signature

    dev, dt = "cuda", torch.bfloat16
    x = torch.randn(args.tokens, args.hidden, device=dev, dtype=dt)
    w, b = torch.randn(args.hidden, device=dev, dtype=dt), torch.randn(args.hidden, device=dev, dtype=dt)
    g = torch.randn_like(x)
    leaves = [t.detach().requires_grad_() for t in (x, w, b)]
    xl, wl, bl = leaves
    fns = {
        "layernorm": lambda: lnb.LayerNormFunction.apply(xl, wl, bl, 1e-5),
        "rmsnorm": lambda: rb.RMSNormFunction.apply(xl, wl, 1e-6),
        "torch layer_norm": lambda: torch.nn.functional.layer_norm(xl, (args.hidden,), wl, bl, 1e-5),
        "torch rms_norm": lambda: torch.nn.functional.rms_norm(xl, (args.hidden,), wl, 1e-6),
    }
    rows = {}
    for name, fwd in fns.items():
        wrt = (xl, wl) if "rms" in name else (xl, wl, bl)
        graph = fwd()
        rows[f"{name}: forward (graph built)"] = host_us(fwd)
        rows[f"{name}: backward on one graph (retained)"] = host_us(
            lambda graph=graph, wrt=wrt: torch.autograd.grad(graph, wrt, g, retain_graph=True))
        rows[f"{name}: forward and backward"] = host_us(
            lambda fwd=fwd, wrt=wrt: torch.autograd.grad(fwd(), wrt, g))
    ours_call = lambda: torch.autograd.grad(fns["layernorm"](), (xl, wl, bl), g)  # noqa: E731
    torch_call = lambda: torch.autograd.grad(fns["torch layer_norm"](), (xl, wl, bl), g)  # noqa: E731
    ratio, pairs = interleaved_ratio(ours_call, torch_call)
    ratios = {"layernorm over torch layer_norm, forward and backward, interleaved pairs": ratio}
    # the order's share: torch's first in each pair, then both orders in one (ours, torch, torch, ours)
    reverse, reverse_pairs = interleaved_ratio(torch_call, ours_call)
    ratios["layernorm over torch layer_norm, torch's call first in each pair"] = 1 / reverse
    ratios["layernorm over torch layer_norm, ours-torch-torch-ours"], abba_pairs = interleaved_ratio(
        ours_call, torch_call, abba=True)
    print("pairs, torch's first: " + ", ".join(f"{1 / r:.2f}" for r in reverse_pairs), flush=True)
    print("ours-torch-torch-ours: " + ", ".join(f"{r:.2f}" for r in abba_pairs), flush=True)
    print("pairs' ratios: " + ", ".join(f"{r:.2f}" for r in pairs), flush=True)
    mean = torch.empty(args.tokens, device=dev, dtype=torch.float32)
    rstd = torch.empty_like(mean)
    y, gx, gw, gb = torch.empty_like(x), torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)
    rows["layernorm: forward launcher with statistics, no autograd"] = host_us(
        lambda: ln.layernorm(x=x, weight=w, bias=b, out=y, eps=1e-5, has_bias=True, mean=mean, rstd=rstd))
    rows["layernorm: backward launcher, no autograd"] = host_us(
        lambda: lnb.layernorm_bwd(x=x, weight=w, grad_out=g, grad_x=gx, grad_weight=gw, grad_bias=gb, eps=1e-5,
                                 has_bias=True, mean=mean, rstd=rstd))
    # autograd runs the backward of CUDA tensors on a device thread of its own: the same launcher from a second thread
    # (on the H100, 2026-12-07, its backward took 316 us inside autograd against 44 us called directly)
    rows["layernorm: backward launcher, no autograd, from a second thread"] = in_thread(lambda: host_us(
        lambda: lnb.layernorm_bwd(x=x, weight=w, grad_out=g, grad_x=gx, grad_weight=gw, grad_bias=gb, eps=1e-5,
                                 has_bias=True, mean=mean, rstd=rstd)))
    # the Function's backward itself (its plan's backward and the launcher) with a stand-in ctx, no autograd
    # engine: on the calling thread, then from a second thread
    plan = lnb._AUTOGRAD._plans.get(signature(xl, wl, bl))  # made by the calls above
    ctx = SimpleNamespace(saved_tensors=(x, w, mean, rstd), plan=plan, eps=1e-5,
                          needs_input_grad=(True, True, True, False))
    rows["layernorm: LayerNormFunction.backward called directly"] = host_us(
        lambda: lnb.LayerNormFunction.backward(ctx, g))
    rows["layernorm: LayerNormFunction.backward called directly, from a second thread"] = in_thread(lambda: host_us(
        lambda: lnb.LayerNormFunction.backward(ctx, g)))
    bwd = plan._bwd._plans
    real_fwd, real_bwd = plan.fwd, dict(bwd)
    plan.fwd = no_op
    bwd.update(dict.fromkeys(bwd, no_op))
    try:
        rows["layernorm: forward and backward, launches replaced by no-ops"] = host_us(
            lambda: torch.autograd.grad(fns["layernorm"](), (xl, wl, bl), g))
    finally:
        plan.fwd = real_fwd
        bwd.update(real_bwd)
    rows.update(inside_autograd(fns["layernorm"], (xl, wl, bl), g, lnb.LayerNormFunction, plan))
    rows.update(inside_autograd(fns["layernorm"], (xl, wl, bl), g, lnb.LayerNormFunction, plan, pause_s=5e-4))
    # the engine alone: a Function whose forward allocates its output and whose backward returns its gradient,
    # CUDA tensors (backward on autograd's device thread) against CPU tensors (backward on the calling thread)
    for where in ("cuda", "cpu"):
        leaf = torch.randn(args.tokens, args.hidden, device=where, dtype=dt, requires_grad=True)
        seed = torch.randn_like(leaf)
        rows[f"pass-through Function: forward and backward, {where} tensors"] = host_us(
            lambda leaf=leaf, seed=seed: torch.autograd.grad(PassThrough.apply(leaf), (leaf,), seed))
    planned = planned_pass_through()
    rows["pass-through PlannedFunction: forward and backward, cuda tensors"] = host_us(
        lambda: torch.autograd.grad(planned.apply(xl), (xl,), g))
    for k, v in rows.items():
        print(f"{v:9.1f} us  {k}", flush=True)
    for k, v in ratios.items():
        print(f"{v:9.2f} x   {k}", flush=True)

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            torch.autograd.grad(fns["layernorm"](), (xl, wl, bl), g)
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    (out / "profile.txt").write_text(table)
    print(table, flush=True)
    (out / "autograd_host.json").write_text(json.dumps(
        {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "tokens": args.tokens,
         "hidden": args.hidden, "host_us_per_call": rows, "ratios": ratios, "ratio_pairs": pairs,
         "ratio_pairs_torch_first": [1 / r for r in reverse_pairs], "ratio_abba": abba_pairs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
