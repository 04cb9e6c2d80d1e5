"""The benchmark: ``load_specs -> resolve -> plan -> run -> render``, each a small typed step.

Every provider's output is checked against the upcast reference before it is timed: a wrong provider
is reported as wrong, never as the fastest. Each finished case is appended to ``cases.jsonl`` at once,
so an interrupted run leaves a renderable partial result.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.arch import Device
from harness.cases import TORCH_DTYPES, case_seed, clone_args, full_env, make_args, poisoned_mask, reference_dtype
from harness.ceilings import memory_ceiling
from harness.checks import mismatch, sync
from harness.providers import Provider, providers_for
from harness.resolve import BackendStatus, resolve
from harness.results import ArchRow, CaseResult, Waiver
from harness.spec import Case, Spec
from harness.waivers import spec_waivers


@dataclass(frozen=True)
class Job:
    spec: Spec
    case: Case
    dtype: str
    provider: Provider

    @property
    def label(self) -> str:
        return f"{self.spec.name} {self.dtype} {self.case.id} {self.provider.name}"


def plan(specs: list[Spec], device: Device, dtypes=(), providers=()) -> tuple[list[Job], list[ArchRow], list[Waiver]]:
    jobs, arch_rows, waivers = [], [], []
    for spec in specs:
        statuses = resolve(spec, device)
        arch_rows += arch_matrix_rows(statuses)
        waivers += [Waiver(w.kernel, w.what, w.reason) for w in spec_waivers(spec)]
        provs = [p for p in providers_for(spec, device, statuses) if not providers or p.name in providers]
        for p in provs:
            if not p.runnable:
                waivers.append(Waiver(spec.name, f"provider {p.name} not benchmarked", p.reason))
        for case in spec.cases["bench"]:
            for dtype in spec.dtypes:
                if dtypes and dtype not in dtypes:
                    continue
                jobs += [Job(spec, case, dtype, p) for p in provs]
    return jobs, arch_rows, waivers


def arch_matrix_rows(statuses: list[BackendStatus]) -> list[ArchRow]:
    ran = next((s.backend for s in statuses if s.selected), None)
    rows = []
    for s in statuses:
        if s.selected:
            rows.append(ArchRow(s.kernel, s.arch, s.backend, "ran", ""))
        elif not s.runnable:
            rows.append(ArchRow(s.kernel, s.arch, s.backend, "unavailable",
                                f"{s.reason}; fell back to {ran}" if ran else s.reason))
        else:
            rows.append(ArchRow(s.kernel, s.arch, s.backend, "skipped", f"available, but {ran} comes first"))
    return rows


class Reference:
    """The upcast reference result of one (kernel, case, dtype), computed once and shared by providers."""

    def __init__(self):
        self._cache: dict[tuple, dict] = {}

    def get(self, spec: Spec, case: Case, dtype: str, device: Device, seed: int) -> dict:
        key = (spec.name, case.id, dtype)
        if key not in self._cache:
            self._cache.clear()
            from harness.spec_check import resolve_import

            args = make_args(spec, case, dtype, device.torch_device, seed)
            ref_dtype = reference_dtype(TORCH_DTYPES[dtype])
            ref = clone_args(args, layout="contiguous",
                             dtype_map=lambda d: torch.promote_types(d, ref_dtype) if d.is_floating_point else d)
            resolve_import(spec.reference)(**ref.kwargs())
            sync(device.torch_device)
            self._cache[key] = {t.name: ref.tensors[t.name] for t in spec.written}
        return self._cache[key]


def returned_outputs(spec: Spec, value) -> dict:
    """What a provider returned, by written tensor name: {} for None (it wrote its arguments), a tensor for
    the single written one, a tuple in `spec.written` order or a dict by name. Peers whose library returns
    new tensors return them, so their timing holds no copy into the harness's buffers."""
    names = [t.name for t in spec.written]
    if value is None:
        return {}
    if isinstance(value, dict):
        if sorted(value) != sorted(names):
            raise TypeError(f"returned outputs {', '.join(sorted(map(str, value)))}; {spec.name} writes "
                            f"{', '.join(names)}")
        return dict(value)
    value = (value,) if isinstance(value, torch.Tensor) else tuple(value)
    if len(value) != len(names):
        raise TypeError(f"returned {len(value)} outputs; {spec.name} writes {', '.join(names)}")
    return dict(zip(names, value, strict=True))


def check_provider(job: Job, fn: Callable, device: Device, reference: Reference, seed: int) -> str:
    """'' when the provider's output matches the reference, else why not."""
    spec = job.spec
    args = make_args(spec, job.case, job.dtype, device.torch_device, seed)
    returned = returned_outputs(spec, fn(**args.kwargs()))
    sync(device.torch_device)
    ref = reference.get(spec, job.case, job.dtype, device, seed)
    for t in spec.outputs:
        if t.name not in returned and poisoned_mask(args.tensors[t.name]).any():
            return f"{t.name}: elements never written"
    for t in spec.written:
        got = returned.get(t.name, args.tensors[t.name])
        if tuple(got.shape) != tuple(ref[t.name].shape):
            return f"{t.name}: returned shape {tuple(got.shape)}, expected {tuple(ref[t.name].shape)}"
        problem = mismatch(got, ref[t.name], spec.tolerance(job.dtype))
        if problem:
            return f"{t.name}: {problem}"
    return ""


def run_job(job: Job, device: Device, ceilings, timing, reference: Reference, seed_base: int = 0) -> CaseResult:
    from harness.engine import measure
    from harness.stats import summarize

    spec, case = job.spec, job.case
    base = _base(job, seed_base)
    seed = base["seed"]
    if not job.provider.runnable:
        return _empty(base, "skipped", job.provider.reason)
    try:
        fn = job.provider.load(spec)
        wrong = check_provider(job, fn, device, reference, seed)
        if wrong:
            return _empty(base, "wrong", f"failed the correctness check before timing: {wrong}")
        args = make_args(spec, case, job.dtype, device.torch_device, seed)
        kwargs = args.kwargs()
        m = measure(lambda: fn(**kwargs), device=device.torch_device, config=timing)
    except Exception as exc:  # one provider's failure never takes the run down
        text = str(exc).strip().splitlines()
        return _empty(base, "error", f"{type(exc).__name__}: {text[0] if text else ''}"[:400])
    st = summarize(m.samples_us, seed=seed)
    env = full_env(spec, case, job.dtype)
    roof = roofline(spec, env, st.median, ceilings, job.dtype)
    warm = sorted(m.warm_us)[len(m.warm_us) // 2] if m.warm_us else None
    return CaseResult(**base, status="ok", reason="", method=m.method, stop_reason=m.stop_reason,
                      samples_us=tuple(m.samples_us), dropped_us=tuple(m.dropped_us), warm_us=tuple(m.warm_us),
                      stats=st.as_json(), warm_median_us=warm, speedups={}, **roof)


def _base(job: Job, seed_base: int) -> dict:
    spec, case, p = job.spec, job.case, job.provider
    return dict(kernel=spec.name, provider=p.name, backend=p.backend, role=p.role, dtype=job.dtype, case_id=case.id,
                shape=case.values, headline=case.headline, seed=case_seed(spec, job.dtype, case, seed_base))


def run_jobs(jobs: list[Job], device: Device, ceilings, timing, seed_base: int = 0,
             pool=None) -> Iterator[tuple[int, CaseResult]]:
    """(index, result) of every job: in order in this process, or as they finish in ``pool``'s workers
    (``harness.workers.WorkerPool``: one per GPU), where a crash or hang fails that job only."""
    if pool is None:
        reference = Reference()
        for i, job in enumerate(jobs):
            yield i, run_job(job, device, ceilings, timing, reference, seed_base)
        return
    from harness.isolated import bench_task
    from harness.results import case_from_json

    tasks = [bench_task(job, timing, ceilings, seed_base) for job in jobs]
    for i, outcome in pool.map_unordered(tasks):
        if outcome.status == "ok":
            yield i, case_from_json(outcome.value)
            continue
        print(f"{jobs[i].label}: {outcome.error}", file=sys.stderr, flush=True)  # the details; the case keeps one line
        what = outcome.summary if outcome.status == "error" else f"kernel {outcome.summary}"
        yield i, _empty(_base(jobs[i], seed_base), "error", f"{what} (in an isolated worker)"[:400])


def _empty(base: dict, status: str, reason: str) -> CaseResult:
    return CaseResult(**base, status=status, reason=reason, method="", stop_reason="", samples_us=(), dropped_us=(),
                      warm_us=(), stats=None, warm_median_us=None, bytes=None, flops=None, gbps=None, tflops=None,
                      pct_roofline=None, bound=None, ceiling_gbps=None, target=None, verdict="n/a", speedups={})


def roofline(spec: Spec, env: dict, median_us: float, ceilings, dtype: str) -> dict:
    """Achieved rates, % of the measured roofline and the verdict against the spec's target."""
    none = dict(bytes=None, flops=None, gbps=None, tflops=None, pct_roofline=None, bound=None, ceiling_gbps=None,
                target=None, verdict="n/a")
    if spec.roofline is None or not median_us or median_us != median_us:
        return none
    nbytes, flops = float(spec.roofline.bytes(env)), float(spec.roofline.flops(env))
    seconds = median_us * 1e-6
    out = dict(none, bytes=nbytes, flops=flops, gbps=nbytes / seconds / 1e9, tflops=flops / seconds / 1e12,
               target=spec.roofline.target)
    peak_tflops = (ceilings.matmul_tflops or {}).get(dtype) if ceilings else None
    peak_tflops = peak_tflops if peak_tflops and math.isfinite(peak_tflops) else None
    bandwidth = memory_ceiling(ceilings.bandwidth_gbps, spec.roofline.read_fraction(env),
                               ceilings.copy_gbps) if ceilings else None
    if not bandwidth:
        return out  # no measured ceiling: rates only, no % of roofline
    t_mem = nbytes / (bandwidth * 1e9)
    t_flop = flops / (peak_tflops * 1e12) if peak_tflops else 0.0
    floor = max(t_mem, t_flop)
    pct = 100.0 * floor / seconds
    verdict = "model-error" if pct > 100.0 else ("pass" if pct >= 100.0 * spec.roofline.target else "below-target")
    out.update(pct_roofline=pct, bound="memory" if t_mem >= t_flop else "compute", ceiling_gbps=bandwidth,
               verdict=verdict)
    return out


def attach_speedups(cases: list[CaseResult], seed: int = 0) -> list[CaseResult]:
    """The candidate's speedup against every other ok provider of the same kernel, case and dtype."""
    from harness.stats import speedup

    groups: dict[tuple, list[CaseResult]] = {}
    for c in cases:
        groups.setdefault((c.kernel, c.case_id, c.dtype), []).append(c)
    out = []
    for c in cases:
        if c.role != "candidate" or c.status != "ok":
            out.append(c)
            continue
        ratios = {}
        for other in groups[(c.kernel, c.case_id, c.dtype)]:
            if other is not c and other.status == "ok":
                r = speedup(other.samples_us, c.samples_us, seed=seed)
                if all(math.isfinite(v) for v in (r.ratio, r.lo, r.hi)):
                    ratios[other.provider] = {"ratio": r.ratio, "lo": r.lo, "hi": r.hi}
        out.append(dataclasses.replace(c, speedups=ratios))
    return out


class Progress:
    """One line per finished case with an ETA from the mean time per case so far."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.start, self.stream = total, 0, time.monotonic(), stream

    def step(self, job: Job, result: CaseResult) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        if result.status == "ok":
            cv = result.stats["cv"]
            spread = f"cv {100 * cv:.2f}%" if cv is not None else "cv n/a"
            what = f"{result.stats['median']:.2f} us (n={result.stats['n']}, {spread}, stop: {result.stop_reason})"
        else:
            what = f"{result.status}: {result.reason[:100]}"
        print(f"[{self.done}/{self.total} eta {eta:5.0f}s] {job.label}: {what}", file=self.stream, flush=True)


def default_out_dir(device: Device) -> Path:
    slug = "".join(ch if ch.isalnum() else "-" for ch in device.name.lower()).strip("-")
    slug = slug.replace("nvidia-", "") or device.arch
    return Path("reports") / ("cpu" if device.arch == "cpu" else slug)
