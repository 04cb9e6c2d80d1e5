"""Small Triton kernels, one per gap of the Triton interpreter that harness.interpreter closes, each in the
shape real-world code has it (Liger-Kernel's autotuned and libdevice kernels, vLLM's fp8 quantisation), and
scenarios that run them. tests/test_interpreter.py runs ``python -m tests.planted.interpreter_kernels`` in a
subprocess with TRITON_INTERPRET=1, once with the layer (KH_INTERPRETER_COMPAT=1) and once without (=0): each
scenario's raw data, or the error it raised, comes back as one JSON line; the test judges it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

from harness.spec.imports import use_interpreter_if_no_gpu

use_interpreter_if_no_gpu()  # as the harness does before it imports a kernel: TRITON_INTERPRET=1, the layer

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra import libdevice  # noqa: E402
from triton.language.extra.cuda import libdevice as cuda_libdevice  # noqa: E402
from triton.language.extra.libdevice import rsqrt  # noqa: E402  (imported by name, as Liger does)

# ---------------------------------------------------------------------------------------------------- kernels


@triton.autotune(configs=[triton.Config({"BLOCK": 4, "CFG": 0}), triton.Config({"BLOCK": 8, "CFG": 1})],
                 key=["n"])
@triton.jit
def _double_autotuned(x_ptr, out_ptr, runs_ptr, n, BLOCK: tl.constexpr, CFG: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)
    tl.atomic_add(runs_ptr + CFG, 1)  # how many programs each config ran


@triton.jit
def _math(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    row = out_ptr + offs
    tl.store(row, libdevice.tanh(x))
    tl.store(row + N, rsqrt(x * x + 1))
    tl.store(row + 2 * N, cuda_libdevice.exp(x))
    tl.store(row + 3 * N, cuda_libdevice.log(x * x + 1))
    tl.store(row + 4 * N, cuda_libdevice.pow(x * x, 0.75))
    tl.store(row + 5 * N, libdevice.erf(x))
    tl.store(row + 6 * N, cuda_libdevice.sqrt(x * x))
    tl.store(row + 7 * N, libdevice.rint(x * 4))
    tl.store(row + 8 * N, libdevice.round(x * 4))
    tl.store(row + 9 * N, cuda_libdevice.fast_expf(x))


@triton.jit
def _bessel(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, libdevice.j0(tl.load(x_ptr + offs)))


@triton.jit
def _scale_bessel(x_ptr, w_ptr, out_ptr, n_cols, sx_row, sx_col, so_row, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=mask).to(tl.float32)
    y = x * tl.load(w_ptr + cols, mask=mask).to(tl.float32) * 2.0
    y += 0.0 * libdevice.j0(x)  # compiles on a GPU; libdevice j0 has no NumPy stand-in
    tl.store(out_ptr + row * so_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _scale_by(x_ptr, out_ptr, scale, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * scale.to(tl.float32))


@triton.jit
def _row_sum(x_ptr, out_ptr, N: tl.constexpr):
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, N)), axis=0))  # in the input's dtype, as Liger's "none"


@triton.jit
def _scatter_add(x_ptr, out_ptr, old_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(old_ptr + offs, tl.atomic_add(out_ptr + offs % 2, tl.load(x_ptr + offs)))


@triton.jit
def _cast(x_ptr, out_ptr, n, DT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n).to(DT), mask=offs < n)


@triton.jit
def _bf16_ops(a_ptr, b_ptr, prod_ptr, neg_ptr, less_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.store(prod_ptr + offs, a * b)  # bf16 * bf16 stays bf16 in Triton
    tl.store(neg_ptr + offs, -a)
    tl.store(less_ptr + offs, (a < b).to(tl.int8))


@triton.jit
def _inline_asm(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [tl.load(x_ptr + offs)], dtype=tl.int32, is_pure=True,
                                  pack=1)
    tl.store(out_ptr + offs, y)


# -------------------------------------------------------------------------------------------------- launchers


def double_autotuned(x: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
    out, runs = torch.zeros_like(x), torch.zeros(2, dtype=torch.int32)
    _double_autotuned[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, out, runs, x.numel())
    return out, runs.tolist()


def libdevice_math(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(10, x.numel())
    _math[(1,)](x, out, x.numel())
    return out


def scale_bessel(*, x, w, out) -> None:
    """tests/specs/scale.toml's kernel (out = x * w * 2) with a libdevice call the layer cannot evaluate."""
    if x.numel():
        _scale_bessel[(x.shape[0],)](x, w, out, x.shape[1], x.stride(0), x.stride(1), out.stride(0),
                                     BLOCK=triton.next_power_of_2(x.shape[1]))


def scale_by(x: torch.Tensor, scale: float) -> torch.Tensor:
    out = torch.zeros_like(x, dtype=torch.float32)
    _scale_by[(1,)](x, out, scale, x.numel())
    return out


def row_sum(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(1, dtype=x.dtype)
    _row_sum[(1,)](x, out, x.numel())
    return out


def scatter_add(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x added into two slots (even and odd elements); the totals, and what each add found there."""
    out, old = torch.zeros(2, dtype=x.dtype), torch.zeros_like(x)
    _scatter_add[(1,)](x, out, old, x.numel())
    return out, old


FP8 = {"e4m3": (torch.float8_e4m3fn, tl.float8e4nv), "e5m2": (torch.float8_e5m2, tl.float8e5)}


def cast_fp8(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """x (fp32) cast to fp8 in the kernel; the result's bytes."""
    dtype, tl_dtype = FP8[fmt]
    out = torch.zeros(x.numel(), dtype=dtype)
    _cast[(1,)](x, out, x.numel(), tl_dtype, triton.next_power_of_2(x.numel()))
    return out.view(torch.uint8)


def cast_bf16(x: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(x.numel(), dtype=torch.bfloat16)
    _cast[(1,)](x, out, x.numel(), tl.bfloat16, triton.next_power_of_2(x.numel()))
    return out


def bf16_ops(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    prod, neg, less = torch.zeros_like(a), torch.zeros_like(a), torch.zeros(a.numel(), dtype=torch.int8)
    _bf16_ops[(1,)](a, b, prod, neg, less, a.numel())
    return prod, neg, less


# -------------------------------------------------------------------------------------------------- scenarios

SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def _values() -> torch.Tensor:
    return torch.linspace(-2.5, 2.5, 16)


@scenario
def autotune(n: int = 16):
    x = torch.arange(float(n))
    out, runs = double_autotuned(x)
    return {"out": out.tolist(), "want": (2 * x).tolist(), "runs": runs}


@scenario
def autotune_all():
    os.environ["KH_INTERPRETER_AUTOTUNE"] = "all"
    try:
        return autotune(24)  # a tuning key of its own: the autotuner caches its choice per key
    finally:
        del os.environ["KH_INTERPRETER_AUTOTUNE"]


@scenario
def libdevice_functions():
    x = _values()
    return {"x": x.tolist(), "out": libdevice_math(x).tolist()}


@scenario
def libdevice_without_fallback():
    out = torch.zeros(4)
    _bessel[(1,)](torch.ones(4), out, 4)
    return {"out": out.tolist()}


@scenario
def float_argument():
    return {"out": scale_by(torch.arange(4.0), 2.5).tolist()}


@scenario
def bf16_sum():
    x = torch.linspace(-1.2, 0.73, 64).to(torch.bfloat16)  # sums to about -15, as the reported row did
    return {"bf16": row_sum(x).item(), "fp16": row_sum(x.to(torch.float16)).item(), "want": x.float().sum().item()}


@scenario
def bf16_atomic_add():
    x = torch.tensor([1.5, 0.25, 1.5, 0.25, 1.5, 0.25, 1.5, 0.25], dtype=torch.bfloat16)
    out, old = scatter_add(x)
    return {"out": out.tolist(), "old": old.tolist()}


@scenario
def fp8_reported():
    return {fmt: cast_fp8(torch.tensor([124.0, 127.9, 7.9, 100.0]), fmt).tolist() for fmt in FP8}


@scenario
def fp8_boundaries():
    return {fmt: cast_fp8(fp8_boundary_inputs(fmt), fmt).tolist() for fmt in FP8}


@scenario
def bf16_cast():
    x = torch.tensor([1 + 2 ** -8 + 2 ** -10, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.0])  # up, tie (to even), tie up
    return {"out": cast_bf16(x).tolist()}


@scenario
def bf16_arithmetic():
    a = torch.linspace(-3, 3, 16).to(torch.bfloat16)
    b = torch.linspace(2, -1.3, 16).to(torch.bfloat16)
    prod, neg, less = bf16_ops(a, b)
    return {"prod": prod.tolist(), "neg": neg.tolist(), "less": less.tolist(),
            "want": [(a * b).tolist(), (-a).tolist(), (a < b).to(torch.int8).tolist()]}


@scenario
def inline_asm():
    out = torch.zeros(4, dtype=torch.int32)
    _inline_asm[(1,)](torch.arange(4, dtype=torch.int32), out, 4)
    return {"out": out.tolist()}


def fp8_boundary_inputs(fmt: str) -> torch.Tensor:
    """Every finite value of the format, every midpoint between neighbours, and the fp32 values just either side
    of each midpoint: where a cast's rounding (ties to even, the carry into the exponent) decides."""
    dtype = FP8[fmt][0]
    values = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(dtype).float()
    values = values[torch.isfinite(values)].unique()  # sorted; -0.0 and 0.0 are one
    mids = (values[:-1].double() + values[1:].double()) / 2
    mids32 = mids.float()
    assert torch.equal(mids32.double(), mids), "fp8 midpoints are exact in fp32"
    near = [torch.nextafter(mids32, torch.full_like(mids32, s)) for s in (float("inf"), float("-inf"))]
    return torch.cat([values, mids32, *near])


def run(names: list[str]) -> dict:
    results = {}
    for name in names or SCENARIOS:
        try:
            results[name] = {"ok": True, **SCENARIOS[name]()}
        except BaseException as exc:  # the raw interpreter's crash is the result being recorded
            chain, e = [], exc
            while e is not None:
                chain.append(f"{type(e).__name__}: {e}")
                e = e.__cause__
            results[name] = {"ok": False, "error": " <- ".join(chain), "trace": traceback.format_exc()[-1500:]}
    from harness.interpreter import installed, report

    return {"installed": installed(), "report": [p.line() for p in report()], "triton": triton.__version__,
            "results": results}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1:])))
