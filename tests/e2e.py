"""Helpers shared by the tests (no test module imports another): seeded generators on the test's device, spec
files from the planted-kernel template tests/specs/scale.toml, whether a process is still alive, and SYNTHETIC
benchmark results.

Every Results built here comes from a seeded RNG: device "synthetic-device", no number measured on any GPU.
Its environment uses the keys harness.timing.environment.collect_environment writes.
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from harness.results.io import write_results
from harness.results.model import SCHEMA_VERSION, ArchRow, CaseResult, Results, Waiver
from harness.timing.stats import summarize

REPO = Path(__file__).resolve().parents[1]
# Examples per fuzz test (tests/test_fuzz_*.py, derandomised: the same ones every run). 120 keeps CI's time
# down; KH_FUZZ_EXAMPLES=2000 is the deep run, by hand after a change to a spec or results reader.
FUZZ_EXAMPLES = int(os.environ.get("KH_FUZZ_EXAMPLES", "120"))
TEMPLATE = REPO / "tests" / "specs" / "scale.toml"
ALL_LAYOUTS = '["padded", "strided", "transposed"]'


# The kernel module and spec of the gate's throwaway repositories (tests/test_gate_ab.py, tests/redteam): plain
# torch, with the template's kernel renamed tiny and a `fast` peer the CPU gate can time.
TINY_FILES = {"kernels/__init__.py": '"""tiny kernels"""\n', "kernels/helpers.py": "FACTOR = 2.0\n",
              "kernels/tiny.py": '''import torch

from kernels.helpers import FACTOR


def scale_ref(*, x, w, out):
    acc = torch.promote_types(x.dtype, torch.float32)
    out.copy_(x.to(acc) * w.to(acc) * FACTOR)


def scale_fast(*, x, w, out):
    out.copy_(x * w * FACTOR)
'''}


def tiny_spec(bench: str = "rows = 64\ncols = 256", extra: str = "") -> str:
    """specs/tiny.toml for TINY_FILES: one bench case (``bench``: its symbols as TOML lines), then ``extra``."""
    text = TEMPLATE.read_text()
    for old, new in (('name = "scale"', 'name = "tiny"'), ("{impl}", "kernels.tiny:scale_fast"),
                     ("{layouts}", '["padded"]'), ("tests.planted.broken_kernels:scale_ref", "kernels.tiny:scale_ref")):
        assert old in text, f"{TEMPLATE} changed: no {old!r}"
        text = text.replace(old, new)
    return text + f'\n[peers.fast]\nimpl = "kernels.tiny:scale_fast"\n\n[[cases.bench]]\n{bench}\n' + extra


def write_spec(directory: Path, name: str, impl: str, *, timeout: float | None = None, extra: str = "",
               layouts: str = ALL_LAYOUTS) -> Path:
    """``directory/name.toml`` from the template: kernel ``name``, triton backend ``impl``, ``extra`` appended."""
    text = TEMPLATE.read_text()
    for old, new in (('name = "scale"', f'name = "{name}"'), ("{impl}", impl), ("{layouts}", layouts)):
        assert old in text, f"{TEMPLATE} changed: no {old!r}"
        text = text.replace(old, new)
    if timeout is not None:
        text = text.replace('fallback = ["triton", "reference"]', f'fallback = ["triton", "reference"]\n'
                                                                   f"timeout = {timeout}")
    path = directory / f"{name}.toml"
    path.write_text(text + extra)
    return path


def make_spec(tmp_path: Path, impl: str, layouts: str = ALL_LAYOUTS):
    """The loaded scale spec whose triton backend is ``tests.planted.broken_kernels:<impl>``."""
    from harness.spec.load import load

    return load(write_spec(tmp_path, "scale", f"tests.planted.broken_kernels:{impl}", layouts=layouts))


def planted_spec(tmp_path: Path, template: str, impl: str):
    """tests/specs/<template>.toml with its backend's ``{impl}`` filled in (each template names the planted
    module: tests.planted.check_kernels, tests.planted.fp8_out_kernels)."""
    text = (REPO / "tests" / "specs" / f"{template}.toml").read_text()
    assert "{impl}" in text
    path = tmp_path / f"{template}.toml"
    path.write_text(text.replace("{impl}", impl))
    from harness.spec.load import load

    return load(path)


def spec_variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """specs/<name>.toml copied to tmp_path with ``old`` (which must be there) replaced by ``new``."""
    text = (REPO / "specs" / f"{name}.toml").read_text()
    assert old in text, f"specs/{name}.toml changed: no {old!r}"
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(old, new))
    return path


def with_backend(tmp_path: Path, name: str, old_impl: str, impl: str):
    """The loaded specs/<name>.toml whose backend ``impl = "<old_impl>"`` is ``impl`` instead (a planted kernel)."""
    from harness.spec.load import load

    return load(spec_variant(tmp_path, name, f'impl = "{old_impl}"', f'impl = "{impl}"'))


def run_all(spec, tiers=("edge", "ci"), backend: str = "triton") -> dict[tuple[str, str], list[str]]:
    """Every case of ``tiers`` in every dtype through the generated checks with the spec's ``backend``:
    {(dtype, failing check): ['case: message', ...]}; a crash is an outcome, under "error"."""
    from harness.correctness.args import case_seed
    from harness.correctness.checks import CaseContext, CheckFailure, run_checks
    from harness.spec.imports import resolve_import
    from harness.target.device import detect

    device = detect()
    fn, ref = resolve_import(spec.backends[backend].impl), resolve_import(spec.reference)
    failures: dict[tuple[str, str], list[str]] = {}
    for dtype in spec.dtypes:
        for case in [c for tier in tiers for c in spec.cases[tier]]:
            ctx = CaseContext(spec, backend, dtype, case, case_seed(spec, dtype, case), device.arch,
                              device.torch_device)
            try:
                run_checks(ctx, fn, ref)
            except CheckFailure as exc:
                failures.setdefault((dtype, exc.check), []).append(f"{case.id}: {exc}")
            except Exception as exc:  # noqa: BLE001 - a crash is an outcome here
                failures.setdefault((dtype, "error"), []).append(f"{case.id}: {type(exc).__name__}: {exc}")
    return failures


def seeded(seed: int):
    """A torch.Generator on torch's default device, seeded: under tests/conftest.py's ``on_device`` that is the
    GPU where there is one, whose tensors a CPU generator cannot make."""
    import torch

    return torch.Generator(torch.get_default_device()).manual_seed(seed)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ----------------------------------------------------------------------------- SYNTHETIC results

PROVIDERS = (("triton", "triton", "candidate"), ("reference", "reference", "baseline"),
             ("torch.compile", "reference", "baseline"), ("liger", "peer", "peer"))
# kernel -> (headline shape, other shape, bytes per element factor, flops per element); synthetic models
KERNELS = {
    "rmsnorm": ({"tokens": 16384, "hidden": 4096}, {"tokens": 64, "hidden": 4096}, 2, 4),
    "rope": ({"tokens": 16384, "heads": 32, "kv_heads": 8, "head_dim": 128}, None, 2, 3),
    "silu_and_mul": ({"tokens": 8192, "d": 14336}, {"tokens": 17, "d": 769}, 3, 5),
}
CEILINGS = {"copy_gbps": 4000.0, "bandwidth_gbps": {"fill": 3900.0, "copy": 4000.0, "add": 4100.0, "read": 4300.0},
            "matmul_tflops": {"bf16": 700.0, "fp32": 50.0},
            "datasheet": {"copy_gbps": 4800.0, "matmul_tflops": {"bf16": 989.0}}, "copy_bytes": 2 ** 30}


def synthetic_stats(samples: np.ndarray) -> dict:
    q = np.percentile(samples, [5, 25, 50, 75, 95])
    iqr = q[3] - q[1]
    boot = np.median(np.random.default_rng(0).choice(samples, (200, samples.size)), axis=1)
    return {"n": int(samples.size), "min": float(samples.min()), "p5": float(q[0]), "p25": float(q[1]),
            "median": float(q[2]), "p75": float(q[3]), "p95": float(q[4]), "max": float(samples.max()),
            "mean": float(samples.mean()), "std": float(samples.std(ddof=1)),
            "cv": float(samples.std(ddof=1) / samples.mean()), "iqr": float(iqr),
            "median_ci_lo": float(np.percentile(boot, 2.5)), "median_ci_hi": float(np.percentile(boot, 97.5)),
            "outliers_low": int((samples < q[1] - 1.5 * iqr).sum()),
            "outliers_high": int((samples > q[3] + 1.5 * iqr).sum())}


def _case(rng, kernel, shape, headline, dtype, provider, backend, role, speed, status="ok", reason=""):
    numel = int(np.prod([v for v in shape.values() if isinstance(v, int)]))
    itemsize = 2 if dtype == "bf16" else 4
    _, _, bfac, ffac = KERNELS[kernel]
    nbytes, flops = float(bfac * numel * itemsize), float(ffac * numel)
    base = dict(kernel=kernel, provider=provider, backend=backend, role=role, dtype=dtype,
                case_id=",".join(f"{k}={v}" for k, v in shape.items()), shape=dict(shape), headline=headline,
                status=status, reason=reason, method="cuda-events", stop_reason="", samples_us=(),
                dropped_us=(), warm_us=(), stats=None, warm_median_us=None, bytes=nbytes, flops=flops,
                gbps=None, tflops=None, pct_roofline=None, bound="memory", ceiling_gbps=None, target=0.8, verdict="n/a",
                speedups={}, seed=1234)
    if status != "ok":
        return CaseResult(**base)
    ideal_us = nbytes / (CEILINGS["copy_gbps"] * 1e3)
    median = ideal_us / speed + 2.0
    samples = median * rng.lognormal(0.0, 0.01 + 0.05 * (median < 10), 60 + int(rng.integers(0, 200)))
    samples[rng.integers(0, samples.size, 2)] *= 1.4  # a couple of slow outliers
    stats = synthetic_stats(samples)
    gbps = nbytes / (stats["median"] * 1e3)
    pct = 100 * gbps / CEILINGS["copy_gbps"]
    verdict = "model-error" if pct > 100 else ("pass" if pct >= 80 else "below-target")
    stop = "rel. noise <= 0.5% after 0.5 s" if median > 10 else "time limit 15 s"
    return CaseResult(**{**base, "stop_reason": stop, "samples_us": tuple(samples.tolist()),
                         "dropped_us": (median * 1.9,) * (median > 10), "stats": stats,
                         "warm_us": tuple((samples[:20] * 0.95).tolist()),
                         "warm_median_us": stats["median"] * 0.95,
                         "gbps": gbps, "tflops": flops / stats["median"] / 1e6, "pct_roofline": pct,
                         "ceiling_gbps": CEILINGS["copy_gbps"],
                         "verdict": verdict})


def _with_speedups(group: list[CaseResult]) -> list[CaseResult]:
    cand = next(c for c in group if c.role == "candidate")
    if cand.status != "ok":
        return group
    speedups = {}
    for c in group:
        if c is not cand and c.status == "ok":
            ratio = c.stats["median"] / cand.stats["median"]
            speedups[c.provider] = {"ratio": ratio, "lo": ratio * 0.99, "hi": ratio * 1.012}
    return [replace(cand, speedups=speedups) if c is cand else c for c in group]


@functools.cache
def synthetic_results(complete: bool = True) -> Results:
    """A SYNTHETIC run over three kernels, with a wrong peer, an error, a skip and a model error."""
    rng = np.random.default_rng(20261129)
    cases: list[CaseResult] = []
    speed = {"triton": 0.85, "reference": 0.1, "torch.compile": 0.8, "liger": 0.5}
    for kernel, (head, other, _, _) in KERNELS.items():
        for shape, headline in ((head, True), (other, False)):
            if shape is None:
                continue
            for dtype in ("bf16", "fp32"):
                group = []
                for provider, backend, role in PROVIDERS:
                    status, reason, s = "ok", "", speed[provider]
                    if kernel == "rope" and provider == "liger":
                        status, reason = "wrong", "max abs err 0.31 > atol 0.01 at [5, 3, 17]; seed 1234"
                    if kernel == "silu_and_mul" and provider == "torch.compile" and dtype == "fp32":
                        status, reason = "error", "RuntimeError: | inductor failed: out of shared memory"
                    if kernel == "silu_and_mul" and provider == "liger" and not headline:
                        status, reason = "skipped", "liger_kernel is not installed"
                    if kernel == "silu_and_mul" and provider == "triton" and headline and dtype == "bf16":
                        s = 1.3  # beats the copy ceiling: the synthetic bytes model is wrong on purpose
                    group.append(_case(rng, kernel, shape, headline, dtype, provider, backend, role, s,
                                       status, reason))
                cases += _with_speedups(group)
    arch = (ArchRow("rmsnorm", "sm_90", "triton", "ran", ""),
            ArchRow("rmsnorm", "cpu", "triton", "ran", ""),
            ArchRow("rope", "sm_90", "triton", "ran", ""),
            ArchRow("rope", "sm_75", "reference", "fallback", "triton needs >=sm_80"),
            ArchRow("silu_and_mul", "sm_90", "triton", "ran", ""),
            ArchRow("silu_and_mul", "sm_75", "triton", "skipped", "no bf16 on sm_75"))
    waivers = (Waiver("rmsnorm", "tolerance bf16 rtol=2e-2 atol=1e-2", "synthetic: fp32 accumulation"),
               Waiver("rope", "check determinism", "synthetic: atomics in the backward"),
               Waiver("silu_and_mul", "skip liger on small shapes", "synthetic: peer not installed"))
    env = {"device": "synthetic-device (test fixture)", "arch": "sm_90", "date": "2026-11-29T08:00:00+00:00",
           "torch": "0.0-synthetic", "triton": "0.0-synthetic", "driver": "none",
           "hostname": "synthetic-host", "python": "3.0.0-synthetic", "platform": "synthetic-os",
           "git_commit": "0" * 40, "git_dirty": False, "flush": "read of 2x L2 (120 MiB), outside the timed region",
           "stopping_rule": ">= 10 samples, then rel. noise <= 0.5% after 0.5 s of GPU time, or 15 s",
           "throttle": "samples under 75% of the default SM clock",
           "clocks": {"sm_mhz": 1980, "mem_mhz": 3201}}
    return Results(SCHEMA_VERSION, env, CEILINGS, tuple(cases), arch, waivers, complete)


def fp32_items(spec) -> int:
    """Items a triton + reference spec yields under ``--dtype fp32``: every edge and ci case for the triton
    backend, the cases where the reference backend can fail (0-size and non-contiguous ones: it is the oracle
    everywhere else), and per backend its two op items (opcheck, and the compile check, at the first dtype)."""
    from harness.correctness.checks import reference_can_fail

    cases = [*spec.cases["edge"], *spec.cases["ci"]]
    return len(cases) + sum(reference_can_fail(spec, c) for c in cases) + 2 * 2


def outcomes(result) -> dict[str, int]:
    """pytester's outcome counts without the warnings count (torch's own deprecation warnings from the compile
    check come and go with its version)."""
    return {k: v for k, v in result.parseoutcomes().items() if k not in ("warning", "warnings")}


# ----------------------------------------------------------------------------- stored runs for the gate (SYNTHETIC)

ENV = {"device": "synthetic-device", "driver": "1.0", "git_commit": "a" * 40, "git_dirty": False,
       "spec_sha256": {"specs/k.toml": "f" * 64}, "torch": "2.x", "date": "2026-01-01"}


def case(kernel="k", case_id="n=1", median=100.0, rsd=0.005, seed=0, status="ok", role="candidate",
         provider="triton", n=120) -> CaseResult:
    samples = tuple(float(v) for v in median * (1 + rsd * np.random.default_rng(seed).standard_normal(n))) \
        if status == "ok" else ()
    return CaseResult(kernel=kernel, provider=provider, backend=provider, role=role, dtype="bf16", case_id=case_id,
                      shape={"n": case_id}, headline=False, status=status, reason="" if status == "ok" else "bad",
                      method="cuda-events", stop_reason="rsd", samples_us=samples, dropped_us=(), warm_us=(),
                      stats=summarize(samples).as_json() if samples else None, warm_median_us=None, bytes=None,
                      flops=None, gbps=None, tflops=None, pct_roofline=50.0 if samples else None, bound=None,
                      ceiling_gbps=None, target=None, verdict="n/a", speedups={}, seed=seed, gpu_index=0,
                      gpu_uuid="GPU-synthetic")


def results(cases, **env) -> Results:
    return Results(SCHEMA_VERSION, {**ENV, **env}, {}, tuple(cases), (), (), True)


def write(tmp_path, name, res):
    folder = tmp_path / name
    json_path, _ = write_results(res, folder)
    return str(json_path)
