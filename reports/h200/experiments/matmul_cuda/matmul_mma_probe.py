"""CUDA C++ Tensor Core matmul probe (run on a GPU from the repository root):
``python3 reports/h200/experiments/matmul_cuda/matmul_mma_probe.py --out DIR``.

Builds kernels.matmul's CUDA backend (``build_cuda``), checks ``matmul_cuda`` against an fp32 torch reference
(unaligned shapes, M = 1, K = 0, every epilogue, bf16 and fp16, padded / offset / strided-bias layouts, every
tile config; NaN guards around every operand catch stray reads and writes, a second run checks determinism),
then times it against the Triton ``kernels.matmul.matmul`` and ``torch.nn.functional.linear`` (cuBLAS) with the
harness's engine (L2 flushed, CUDA events) at large bf16 shapes. Writes DIR/matmul_mma_probe.json and
DIR/matmul_mma_probe.log; every number printed is measured.

``--quick``: fewer small correctness cases only (for compute-sanitizer). ``--all-configs``: also time each tile
config forced. ``--tune``: also build variants of the source (VARIANTS, in parallel processes), time them as
config 0.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT))

GUARD = 64  # elements of NaN before and after every operand's storage
RTOL = {"bf16": 1.6e-2, "fp16": 1e-3}
LAYOUTS = {
    # name: (a/b row padding, a/b/c base offset in elements, bias stride, c row padding)
    "contiguous": (0, 0, 1, 0),
    "padded3": (3, 0, 2, 3),  # odd row strides: the element-by-element copy, single-element stores
    "padded8": (8, 0, 1, 8),  # row strides still multiples of 8: the cp.async copy when K % 8 == 0
    "offset1": (0, 1, 1, 0),  # base pointers 2 bytes past 16-byte alignment: element-by-element copy
}
TIMING_SHAPES = [
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (4096, 14336, 4096),
    (4096, 4096, 14336),
    (128, 14336, 4096),
    (16, 14336, 4096),
]
# --tune: variants of CUDA_SRC, each a list of (text, replacement); run as the large config (config 0)
LARGE_LINE = "using ConfigLarge = Config<128, 256, 32, 2, 4, 4, 1>;"
MAINLOOP_COPY = "if (kt + STAGES - 1 < ktiles) load_tile(kt + STAGES - 1, write_stage);"
MAINLOOP_BARRIER = "cp_async_wait<STAGES - 2>();\n        __syncthreads();\n"


def _large(spec: str) -> list[tuple[str, str]]:
    return [(LARGE_LINE, f"using ConfigLarge = Config<{spec}>;")]


VARIANTS = {
    "Config<128, 256, 32, 2, 4, 3, 1> (3 stages)": _large("128, 256, 32, 2, 4, 3, 1"),
    "Config<256, 128, 32, 4, 2, 4, 1>": _large("256, 128, 32, 4, 2, 4, 1"),
    "Config<128, 128, 32, 2, 2, 3, 2> (4 warps, 2 blocks/SM, 3 stages)": _large("128, 128, 32, 2, 2, 3, 2"),
    "diagnostic: the large config without main-loop copies or barriers (wrong results)": [
        (MAINLOOP_COPY, ""),
        (MAINLOOP_BARRIER, "cp_async_wait<STAGES - 2>();\n"),
    ],
}

_LOG = None


def log(msg: str = "") -> None:
    print(msg, flush=True)
    if _LOG is not None:
        _LOG.write(msg + "\n")
        _LOG.flush()


def finite(x):
    """x with every NaN or infinity replaced by None (strict JSON)."""
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x


def err_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:400]


# ----------------------------------------------------------------------------------------------- correctness


def guarded(rows: int, cols: int, row_stride: int, offset: int, dtype, values=None):
    """A [rows, cols] view (rows row_stride apart) inside a NaN-filled buffer; returns (view, buffer, mask of
    the buffer's elements outside the view)."""
    import torch

    start = GUARD + offset
    span = (rows - 1) * row_stride + cols if rows > 0 and cols > 0 else 0
    buf = torch.full((start + span + GUARD,), float("nan"), dtype=dtype, device="cuda")
    view = buf.as_strided((rows, cols), (row_stride, 1), start)
    outside = torch.ones(buf.shape, dtype=torch.bool, device="cuda")
    outside.as_strided((rows, cols), (row_stride, 1), start).fill_(False)
    if values is not None and values.numel():
        view.copy_(values)
    return view, buf, outside


def check_case(m, n, k, epi, dtype_name, layout, config, seed, stream=False) -> dict:
    import torch

    from kernels.matmul import _activation, matmul_cuda

    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float16
    pad, offset, bias_stride, c_pad = LAYOUTS[layout]
    g = torch.Generator(device="cuda").manual_seed(seed)
    a0 = torch.randn(m, k, generator=g, device="cuda").to(dtype)
    b0 = torch.randn(n, k, generator=g, device="cuda").to(dtype)
    bias0 = torch.randn(n, generator=g, device="cuda").to(dtype)
    a, _, _ = guarded(m, k, k + pad, offset, dtype, a0)
    b, _, _ = guarded(n, k, k + pad, offset, dtype, b0)
    bias_buf = torch.full((GUARD + max(n, 1) * bias_stride + GUARD,), float("nan"), dtype=dtype, device="cuda")
    bias = bias_buf.as_strided((n,), (bias_stride,), GUARD)
    if n:
        bias.copy_(bias0)
    c, c_buf, c_out = guarded(m, n, n + c_pad, offset, dtype)

    def run(out):
        if stream:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                matmul_cuda(a=a, b=b, bias=bias, c=out, epilogue=epi, config=config)
            s.synchronize()
        else:
            matmul_cuda(a=a, b=b, bias=bias, c=out, epilogue=epi, config=config)
        torch.cuda.synchronize()

    run(c)
    z = a0.float() @ b0.float().T
    if epi >= 1:
        z = z + bias0.float()
    ref = _activation(z, epi)
    got = c.float()
    atol = 1e-5 + 1e-6 * k
    bound = atol + RTOL[dtype_name] * ref.abs()
    err = (got - ref).abs()
    finite = bool(torch.isfinite(got).all())
    max_err = float(err.max()) if err.numel() else 0.0
    ratio = float((err / bound).max()) if err.numel() else 0.0
    guard_ok = bool(torch.isnan(c_buf[c_out]).all())
    c2, _, _ = guarded(m, n, n + c_pad, offset, dtype)
    run(c2)
    same = bool(torch.equal(c.view(torch.int16), c2.view(torch.int16))) if c.numel() else True
    ok = finite and ratio <= 1.0 and guard_ok and same
    return {
        "max_abs_err": max_err,
        "max_err_over_bound": ratio,
        "atol": atol,
        "finite": finite,
        "guards_untouched": guard_ok,
        "deterministic": same,
        "pass": ok,
    }


def correctness_cases(quick: bool) -> list[tuple]:
    """(M, N, K, epilogue, dtype, layout, config, stream)"""
    small = [
        (1, 1, 1),
        (1, 33, 17),
        (17, 1, 129),
        (17, 33, 17),
        (33, 65, 129),
        (33, 65, 200),
        (5, 9, 0),
        (33, 65, 1),
        (0, 9, 16),
        (16, 0, 16),
        (64, 128, 300),
        (16, 96, 1000),
        (127, 255, 264),
        (257, 513, 1024),
        (1, 4096, 64),
    ]
    cases = []
    i = 0
    layouts = ("contiguous", "padded3") if quick else tuple(LAYOUTS)
    configs = (0, 1, 2, 3) if quick else (None, 0, 1, 2, 3)
    for dtype in ("bf16", "fp16"):
        for m, n, k in small:
            for layout in layouts:
                for config in configs:
                    cases.append((m, n, k, i % 5, dtype, layout, config, False))
                    i += 1
        for epi in range(5):  # every epilogue on two shapes: one tile, and several tiles with a ragged edge
            cases.append((33, 65, 129, epi, dtype, "contiguous", None, False))
            cases.append((300, 600, 512, epi, dtype, "contiguous", None, False))
            cases.append((5, 9, 0, epi, dtype, "contiguous", None, False))
        cases.append((100, 200, 64, 3, dtype, "contiguous", None, True))  # on a side stream
    if not quick:
        cases += [
            (4096, 4096, 4096, 0, "bf16", "contiguous", None, False),
            (4096, 4096, 4096, 1, "fp16", "contiguous", None, False),
            (4096, 14336, 4096, 4, "bf16", "contiguous", None, False),
            (4096, 4096, 14336, 1, "bf16", "contiguous", None, False),
            (128, 14336, 4096, 2, "bf16", "contiguous", None, False),
            (16, 14336, 4096, 3, "bf16", "contiguous", None, False),
            (1, 4096, 4096, 3, "fp16", "contiguous", None, False),
            (3001, 5003, 4099, 3, "bf16", "contiguous", None, False),
            (2048, 4096, 4096, 0, "bf16", "padded3", None, False),
            (2048, 4096, 4096, 2, "fp16", "padded8", None, False),
            (1000, 1000, 1000, 4, "fp16", "offset1", None, False),
        ]
    return cases


def refusals() -> dict:
    """The layouts the backend does not take must raise ValueError naming matmul_cuda."""
    import torch

    from kernels.matmul import matmul_cuda

    out = {}
    a = torch.randn(17, 65, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(33, 65, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(33, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(17, 33, device="cuda", dtype=torch.bfloat16)
    trials = {
        "transposed b": dict(a=a, b=b.T.contiguous().T, bias=bias, c=c),
        "strided a": dict(a=torch.randn(17, 130, device="cuda", dtype=torch.bfloat16)[:, ::2], b=b, bias=bias, c=c),
        "fp32 c": dict(a=a, b=b, bias=bias, c=c.float()),
    }
    for name, kw in trials.items():
        try:
            matmul_cuda(epilogue=1, **kw)
            out[name] = "FAIL: ran"
        except ValueError as exc:
            out[name] = f"PASS: {exc}"[:300]
        except Exception as exc:  # noqa: BLE001 - recorded
            out[name] = f"FAIL: {err_text(exc)}"
        log(f"refusal {name:14s} {out[name]}")
    return out


def correctness(out: dict, quick: bool) -> None:
    log("== correctness against fp32 torch (bound: 1e-5 + 1e-6 K + rtol |ref|; NaN guards; a second run bitwise)")
    out["refusals"] = refusals()
    failed = 0
    for index, (m, n, k, epi, dtype, layout, config, stream) in enumerate(correctness_cases(quick)):
        key = f"#{index} {dtype} M={m} N={n} K={k} epi={epi} {layout} config={config}" + (" stream" if stream else "")
        try:
            r = check_case(m, n, k, epi, dtype, layout, config, seed=m * 7 + n * 13 + k + epi, stream=stream)
        except Exception as exc:  # noqa: BLE001 - recorded, the probe goes on
            r = {"error": err_text(exc), "pass": False}
        out["correctness"][key] = r
        failed += not r["pass"]
        if "error" in r:
            log(f"{key:68s} ERROR {r['error']}")
        else:
            flags = (
                ""
                if r["pass"]
                else (f" finite={r['finite']} guards={r['guards_untouched']} deterministic={r['deterministic']}")
            )
            log(
                f"{key:68s} max|err| {r['max_abs_err']:.3e}  err/bound {r['max_err_over_bound']:.3f}  "
                f"{'PASS' if r['pass'] else 'FAIL'}{flags}"
            )
    total = len(out["correctness"])
    log(f"correctness: {total - failed}/{total} PASS")


# ----------------------------------------------------------------------------------------------- timing


def _timing_cfg():
    from harness.timing.engine import TimingConfig

    return TimingConfig(min_samples=10, max_samples=100, min_time_s=0.1, timeout_s=3.0)


def _median_us(fn) -> float:
    import torch

    from harness.timing.engine import measure
    from harness.timing.stats import summarize

    fn()
    torch.cuda.synchronize()
    return summarize(measure(fn, device="cuda", config=_timing_cfg()).samples_us).median


def _inputs(m, n, k):
    import torch

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    bias = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return a, b, bias, c


def _providers(a, b, bias, c, all_configs: bool) -> dict:
    import torch

    from kernels.matmul import CUDA_CONFIGS, matmul, matmul_cuda

    providers = {
        "cuda": lambda: matmul_cuda(a=a, b=b, bias=bias, c=c, epilogue=0),
        "triton": lambda: matmul(a=a, b=b, bias=bias, c=c, epilogue=0),
        "cublas": lambda: torch.nn.functional.linear(a, b),
    }
    if all_configs:
        for i, name in enumerate(CUDA_CONFIGS):
            providers[f"cuda[{name}]"] = lambda i=i: matmul_cuda(a=a, b=b, bias=bias, c=c, epilogue=0, config=i)
    return providers


def timing(out: dict, all_configs: bool) -> None:
    import torch

    log("== timing, bf16, epilogue 0 (median us of cold-L2 samples, TFLOP/s, speed relative to cuBLAS)")
    for m, n, k in TIMING_SHAPES:
        row = {}
        for name, fn in _providers(*_inputs(m, n, k), all_configs).items():
            try:
                us = _median_us(fn)
                row[name] = {"median_us": us, "tflops": 2 * m * n * k / us / 1e6}
            except Exception as exc:  # noqa: BLE001 - recorded, the probe goes on
                row[name] = {"error": err_text(exc)}
        base = row.get("cublas", {}).get("median_us")
        cells = []
        for name, r in row.items():
            if "median_us" not in r:
                cells.append(f"{name} ERROR {r['error']}")
                continue
            if base:
                r["vs_cublas"] = base / r["median_us"]
            ratio = f" x{r['vs_cublas']:.3f}" if "vs_cublas" in r else ""
            cells.append(f"{name} {r['median_us']:.1f}us {r['tflops']:.0f}TF{ratio}")
        key = f"M={m} N={n} K={k}"
        out["timing"][key] = row
        log(f"{key:24s} " + " | ".join(cells))
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------- tuning


def _variant_source(name: str) -> str:
    from kernels.matmul import CUDA_SRC

    src = CUDA_SRC
    for text, replacement in VARIANTS[name]:
        if text not in src:
            raise RuntimeError(f"variant {name!r}: {text!r} is not in CUDA_SRC")
        src = src.replace(text, replacement)
    return src


def _build_variant(index: int, name: str, arch: str):
    import os

    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    from torch.utils.cpp_extension import load_inline

    from kernels.matmul import _BINDING_SRC

    return load_inline(
        name=f"kh_matmul_probe_variant{index}_sm{arch.replace('.', '')}",
        cpp_sources=[_BINDING_SRC],
        cuda_sources=[_variant_source(name)],
        functions=["matmul_fwd"],
        extra_cuda_cflags=["-O3"],
    )


def _build_variant_proc(index: int, name: str, arch: str) -> str:
    try:
        _build_variant(index, name, arch)
        return ""
    except Exception as exc:  # noqa: BLE001 - returned to the parent
        return err_text(exc)


def tune(out: dict) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import torch

    from kernels.common import sm_count

    cap = torch.cuda.get_device_capability()
    arch = f"{cap[0]}.{cap[1]}"
    names = list(VARIANTS)
    log(f"== variants of the CUDA source, run as config 0 (bf16, epilogue 0): building {len(names)} in parallel")
    t0 = time.monotonic()
    with ProcessPoolExecutor(len(names), mp_context=multiprocessing.get_context("spawn")) as pool:
        errors = list(pool.map(_build_variant_proc, range(len(names)), names, [arch] * len(names)))
    log(f"variants built in {time.monotonic() - t0:.0f} s")
    sms = sm_count(torch.device("cuda", torch.cuda.current_device()))
    for index, (name, error) in enumerate(zip(names, errors, strict=True)):
        row = out["tune"].setdefault(name, {})
        if error:
            row["error"] = error
            log(f"{name}: build ERROR {error}")
            continue
        try:
            module = _build_variant(index, name, arch)
        except Exception as exc:  # noqa: BLE001
            row["error"] = err_text(exc)
            log(f"{name}: load ERROR {row['error']}")
            continue

        def call(a, b, bias, c, module=module):
            module.matmul_fwd(c, a, b, bias, 0, 0, sms, torch.cuda.current_stream().cuda_stream)

        cells = []
        try:  # a spot check first: 1000 x 1000 x 1024 (ragged tiles) against fp32, the probe's bound
            a, b, bias, c = _inputs(1000, 1000, 1024)
            call(a, b, bias, c)
            ref = a.float() @ b.float().T
            ratio = float(((c.float() - ref).abs() / (1e-5 + 1e-6 * 1024 + RTOL["bf16"] * ref.abs())).max())
            row["spot_err_over_bound"] = ratio
            cells.append(f"spot err/bound {ratio:.3f} {'PASS' if ratio <= 1 else 'FAIL'}")
        except Exception as exc:  # noqa: BLE001
            row["spot_error"] = err_text(exc)
            cells.append("spot ERROR")
        for m, n, k in TIMING_SHAPES[:4]:
            key = f"M={m} N={n} K={k}"
            try:
                a, b, bias, c = _inputs(m, n, k)
                us = _median_us(lambda a=a, b=b, bias=bias, c=c: call(a, b, bias, c))
                row[key] = {"median_us": us, "tflops": 2 * m * n * k / us / 1e6}
                cells.append(f"{key} {us:.1f}us {row[key]['tflops']:.0f}TF")
            except Exception as exc:  # noqa: BLE001
                row[key] = {"error": err_text(exc)}
                cells.append(f"{key} ERROR")
        log(f"{name}: " + " | ".join(cells))


# ----------------------------------------------------------------------------------------------- main


def main() -> int:
    global _LOG
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--quick", action="store_true", help="small correctness cases only, no timing")
    p.add_argument("--all-configs", action="store_true", help="also time each tile config forced")
    p.add_argument("--tune", action="store_true", help="also build and time variants of the CUDA source")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    _LOG = open(args.out / "matmul_mma_probe.log", "w")

    import torch
    import triton

    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference in true fp32
    out = {
        "device": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "refusals": {},
        "correctness": {},
        "timing": {},
        "tune": {},
    }
    log(
        f"{out['device']} sm_{out['capability'][0]}{out['capability'][1]}, torch {out['torch']} (CUDA {out['cuda']}), "
        f"triton {out['triton']}"
    )
    t0 = time.monotonic()
    try:
        from kernels.matmul import build_cuda

        build_cuda()
        out["build_s"] = time.monotonic() - t0
        log(f"build_cuda: {out['build_s']:.0f} s")
    except Exception as exc:  # noqa: BLE001
        out["build_error"] = err_text(exc)
        log(f"build_cuda FAILED: {out['build_error']}")
        traceback.print_exc()
    steps = [lambda: correctness(out, args.quick)]
    if not args.quick:
        steps.append(lambda: timing(out, args.all_configs))
    if args.tune:
        steps.append(lambda: tune(out))
    for step in steps:
        try:
            step()
        except Exception:  # noqa: BLE001
            log(traceback.format_exc())
    out["wall_s"] = time.monotonic() - t0
    (args.out / "matmul_mma_probe.json").write_text(json.dumps(finite(out), indent=2))
    log(f"matmul mma probe: {out['wall_s']:.0f} s; wrote {args.out / 'matmul_mma_probe.json'}")
    _LOG.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
