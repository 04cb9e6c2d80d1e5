"""Planted kernels for tests/test_aot.py, each with a known outcome in the static cross-architecture check:

- scale_add: clean on sm_80, sm_90 and sm_100 (no spills, small shared memory); calls a jit helper.
- spill: a whole 8192-element row per single-warp program, kept live across two reductions: 256 floats
  per thread and their squares cannot all fit in 255 registers, so ptxas spills.
- to_fp8: converts to float8e4nv, which Triton supports from sm_89 on: a compile error on sm_80 only.
- tuned_copy: autotuned (two configs) with a heuristic on top.
- scale_by_first: reads a tensor value on the host (`.item()`), which meta tensors cannot do.
- copy_ref: a plain-torch reference with the spill and to_fp8 launchers' signature (x -> out).
Launchers follow the harness calling convention (keyword arguments, outputs passed in, return None).
"""

from dataclasses import dataclass

import triton
import triton.language as tl


@triton.jit
def _twice(v):
    return v * 2


@triton.jit
def scale_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, _twice(x) + y, mask=mask)


@dataclass(frozen=True)
class ScaleAddConfig:
    block: int
    num_warps: int

    @classmethod
    def for_size(cls, n: int) -> "ScaleAddConfig":
        block = min(1024, triton.next_power_of_2(max(n, 1)))
        return cls(block, 4 if block >= 512 else 1)


def scale_add(*, x, y, out):
    n = x.numel()
    cfg = ScaleAddConfig.for_size(n)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    scale_add_kernel[grid](x, y, out, n, BLOCK=cfg.block, num_warps=cfg.num_warps)


SPILL_BLOCK = 8192


@triton.jit
def spill_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs)
    s = tl.sum(v, axis=0)
    w = v * v
    t = tl.sum(w, axis=0)
    tl.store(out_ptr + offs, (v - s) * t + w)


def spill(*, x, out):
    spill_kernel[(x.shape[0],)](x, out, BLOCK=x.shape[1], num_warps=1)


@triton.jit
def to_fp8_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, v.to(tl.float8e4nv), mask=mask)


def copy_ref(*, x, out):
    """The reference tests/test_matrix.py's specs name (x -> out); the matrix compiles, it never runs one."""
    out.copy_(x)


def to_fp8(*, x, out):
    n = x.numel()
    to_fp8_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)


@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=2, num_stages=3),
                          triton.Config({"BLOCK": 1024}, num_warps=4, num_stages=2)], key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def tuned_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))
    else:
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


def tuned_copy(*, x, out):
    n = x.numel()
    tuned_copy_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)


@triton.jit
def scale_kernel(x_ptr, out_ptr, scale, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale, mask=mask)


def scale_by_first(*, x, out):
    scale = float(x[0].item())  # a host read: impossible on meta tensors
    n = x.numel()
    scale_kernel[(triton.cdiv(n, 256),)](x, out, scale, n, BLOCK=256)


CUDA_SRC = r"""
extern "C" __global__ void axpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void reverse256(float* y) {
  __shared__ float buf[256];
  buf[threadIdx.x] = y[threadIdx.x];
  __syncthreads();
  y[threadIdx.x] = buf[255 - threadIdx.x];
}
"""

CUDA_SRC_BAD = r"""
extern "C" __global__ void broken(float* y) {
  y[threadIdx.x] = 1.0f
}
"""
