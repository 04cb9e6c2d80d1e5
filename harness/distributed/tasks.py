"""What every rank of a group runs for a distributed case: the per-rank check, and the slowest-rank timing.

Each rank draws its own inputs (the case's seed, offset by the rank), so a kernel that mixes up ranks or drops
one's contribution gives wrong numbers somewhere. The reference is the torch.distributed collective, called
on every rank on copies of that rank's inputs at the reference precision, before the kernel, so both see the
same group in the same order. Every rank checks its own outputs, guard bands included.
"""

from __future__ import annotations

RANK_SEED = 1_000_003  # rank r draws with seed + r * RANK_SEED: no two ranks' inputs alike


def _case(spec_path: str, tier: str, case_id: str):
    from harness.spec.load import load_cached

    spec = load_cached(spec_path)
    for c in spec.cases.get(tier, ()):
        if c.id == case_id:
            return spec, c
    raise LookupError(f"{spec_path}: no {tier} case {case_id!r}")


def _device(device: str, rank: int) -> str:
    return f"cuda:{rank}" if device.startswith("cuda") else "cpu"


def _callables(spec, impl: str):
    from harness.spec.imports import resolve_import

    return resolve_import(impl), resolve_import(spec.reference)


def check_case(spec_path: str, impl: str, dtype: str, tier: str, case_id: str, seed: int, device: str,
               rank: int) -> dict:
    """This rank's problems (empty: its outputs match the collective's within the spec's tolerance). ``impl``:
    the import path of what runs on every rank (a backend's, a peer's)."""
    from harness.correctness.args import make_args, reference_args, returned_outputs
    from harness.correctness.guards import violation
    from harness.correctness.numerics import mismatch

    spec, case = _case(spec_path, tier, case_id)
    fn, reference = _callables(spec, impl)
    args = make_args(spec, case, dtype, _device(device, rank), seed + rank * RANK_SEED)
    ref_args = reference_args(spec, args, dtype)
    expected = {**ref_args.tensors, **returned_outputs(spec, reference(**ref_args.kwargs()), ref_args.absent)}
    got = {**args.tensors, **returned_outputs(spec, fn(**args.kwargs()), args.absent)}
    problems = []
    for t in spec.written:
        if t.name in got:
            why = mismatch(got[t.name], expected[t.name], spec.tolerance(dtype, t.name, case))
            if why:
                problems.append(f"{t.name}: {why}")
    problems += [p for name, g in args.guards.items() if (p := violation(name, g))]
    return {"rank": rank, "problems": problems}


def time_case(spec_path: str, impl: str, dtype: str, tier: str, case_id: str, seed: int, device: str,
              rank: int, min_time_s: float = 0.2, min_samples: int = 10, max_samples: int = 2000) -> list[float]:
    """Seconds per call of the case, sample by sample, as the slowest rank saw it (:func:`slowest_samples`)."""
    from harness.correctness.args import make_args

    spec, case = _case(spec_path, tier, case_id)
    fn, _ = _callables(spec, impl)
    dev = _device(device, rank)
    kwargs = make_args(spec, case, dtype, dev, seed + rank * RANK_SEED).kwargs()
    return slowest_samples(lambda: fn(**kwargs), dev, min_time_s, min_samples, max_samples)


def slowest_samples(call, dev: str, min_time_s: float, min_samples: int, max_samples: int) -> list[float]:
    """Seconds per ``call()``, sample by sample, as the slowest rank saw it: every sample starts after a barrier
    and ends when this rank's call is done (on a GPU: device events around the call, after the barrier); the
    ranks' times are then gathered and the largest kept, the figure a model step waits for. Every rank returns
    the same list. How many samples: enough for ``min_time_s`` at the warm-up's pace, the largest count any
    rank asks for, since every sample is a barrier all of them must join."""
    import time

    import torch
    import torch.distributed as dist

    gpu = dev.startswith("cuda")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    t0 = time.perf_counter()
    for _ in range(3):
        call()
    sync()
    per_call = (time.perf_counter() - t0) / 3
    n = torch.tensor([min(max_samples, max(min_samples, int(min_time_s / max(per_call, 1e-7))))], device=dev)
    dist.all_reduce(n, op=dist.ReduceOp.MAX)
    mine = []
    for _ in range(int(n.item())):
        dist.barrier()
        sync()
        if gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            mine.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            call()
            mine.append(time.perf_counter() - t0)
    slowest = torch.tensor(mine, dtype=torch.float64, device=dev)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.tolist()
