"""RMSNorm over the last dimension: Triton kernel, CUDA C++ backend, torch reference and a Liger peer.

``out = x * rsqrt(mean(x**2) + eps) * weight`` with x ``[tokens, hidden]`` and weight ``[hidden]``,
computed in fp32 and rounded once, to out's dtype, at the end.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.common import (
    Plans,
    cdiv,
    cuda_capability,
    interpreted,
    load_cuda_extension,
    needs_bf16_rounding,
    next_power_of_2,
    no_launch,
    round_to_bf16,
    signature,
)
from kernels.fastlaunch import FastLaunch

# Columns one pass holds in registers; a longer row is read twice (sum of squares, then normalise).
_MAX_BLOCK_N = 8192
# Elements per program the heuristic aims for when rows are short and several share a program.
_TILE = 4096
# About two waves of programs on a 132-SM H100/H200: rows are packed only while more remain than this.
_MIN_PROGRAMS = 264


@dataclass(frozen=True)
class RMSNormConfig:
    block_m: int  # rows per program
    block_n: int  # columns per pass, a power of two
    num_warps: int
    single_pass: bool  # the whole row fits in one pass: x is read once

    @classmethod
    @functools.lru_cache(maxsize=256)
    def for_shape(cls, n_rows: int, n_cols: int, interpreted: bool = False) -> RMSNormConfig:
        """``interpreted``: the Triton interpreter runs programs one after another at a high fixed cost each
        (529 x 16 took 265 programs and 10 s an item), so rows are packed into as few programs as a tile of
        32 x _TILE elements holds instead of filling a GPU."""
        block_n = min(max(next_power_of_2(n_cols), 16), _MAX_BLOCK_N)
        single_pass = n_cols <= block_n
        block_m = 1
        if single_pass and interpreted:
            block_m = min(max(32 * _TILE // block_n, 1), next_power_of_2(max(n_rows, 1)))
        elif single_pass:
            by_rows = 1 << (max(n_rows // _MIN_PROGRAMS, 1).bit_length() - 1)
            block_m = min(max(_TILE // block_n, 1), by_rows)
        # few programs (decode-sized batches): more threads per row keep more loads in flight
        per_thread = 8 if n_rows < 2 * _MIN_PROGRAMS else 16
        num_warps = min(max(block_m * block_n // (32 * per_thread), 1), 16)
        return cls(block_m=block_m, block_n=block_n, num_warps=num_warps, single_pass=single_pass)


@triton.jit
def _rmsnorm_kernel(
    x_ptr, w_ptr, out_ptr, n_rows, n_cols,
    stride_xm, stride_xn, stride_w, stride_om, stride_on, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr, RNE_BF16: tl.constexpr,
):  # fmt: skip
    # int64 offsets: rows * row stride passes 2**31 in the huge tier, and a column-major tensor has a
    # column stride of `tokens`, so columns * column stride can too
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = (rows < n_rows)[:, None]
    x_rows = x_ptr + rows[:, None] * stride_xm
    o_rows = out_ptr + rows[:, None] * stride_om
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    if SINGLE_PASS:
        col_ok = cols < n_cols
        mask = row_ok & col_ok[None, :]
        x = tl.load(x_rows + cols[None, :] * stride_xn, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
        w = tl.load(w_ptr + cols * stride_w, mask=col_ok, other=0.0).to(tl.float32)
        y = x * rstd[:, None] * w[None, :]
        if RNE_BF16:
            y = round_to_bf16(y)
        tl.store(o_rows + cols[None, :] * stride_on, y.to(out_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            mask = row_ok & (c < n_cols)[None, :]
            x = tl.load(x_rows + c[None, :] * stride_xn, mask=mask, other=0.0).to(tl.float32)
            acc += x * x
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)[:, None]
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            mask = row_ok & col_ok[None, :]
            x = tl.load(x_rows + c[None, :] * stride_xn, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c * stride_w, mask=col_ok, other=0.0).to(tl.float32)
            y = x * rstd * w[None, :]
            if RNE_BF16:
                y = round_to_bf16(y)
            tl.store(o_rows + c[None, :] * stride_on, y.to(out_ptr.dtype.element_ty), mask=mask)


def _check_shapes(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> None:
    if x.dim() != 2 or weight.shape != (x.shape[1],) or out.shape != x.shape:
        raise ValueError(
            f"rmsnorm: expected x [tokens, hidden], weight [hidden], out like x; got x {tuple(x.shape)}, "
            f"weight {tuple(weight.shape)}, out {tuple(out.shape)}"
        )


_rmsnorm_launch = FastLaunch(_rmsnorm_kernel)


_PLANS = Plans()


def rmsnorm(*, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    """Triton RMSNorm; any strides on x, weight and out. Planned per call signature (kernels.common.Plans)."""
    _PLANS.run(signature(x, weight, out), lambda: forward_plan(x, weight, out), x, weight, out, eps)


def forward_plan(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor):
    """Checks the operands and works out :func:`rmsnorm`'s launch for their signature: ``launch(x, weight, out,
    eps)``."""
    _check_shapes(x, weight, out)
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return no_launch
    cfg = RMSNormConfig.for_shape(n_rows, n_cols, interpreted(x))
    scalars = (n_rows, n_cols, x.stride(0), x.stride(1), weight.stride(0), out.stride(0), out.stride(1))
    fast = _rmsnorm_launch.pinned(
        (cdiv(n_rows, cfg.block_m),), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SINGLE_PASS=cfg.single_pass,
        RNE_BF16=needs_bf16_rounding(out), num_warps=cfg.num_warps,
    )  # fmt: skip

    def launch(x, weight, out, eps):
        fast(x, weight, out, *scalars, float(eps))
    return launch


def rmsnorm_ref(*, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    """Plain torch, in fp32 or the inputs' precision if higher."""
    acc = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(acc)
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    out.copy_(xf * rstd * weight.to(acc))


def rmsnorm_liger(*, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> torch.Tensor:
    """Liger-Kernel 0.8's RMSNorm (llama casting: x * rstd is rounded to x's dtype before * weight).

    Returns Liger's own output tensor, so the timing is Liger's alone (no copy into `out`)."""
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    if x.numel() == 0:
        return out
    return LigerRMSNormFunction.apply(x, weight, eps, 0.0, "llama")


# ---------------------------------------------------------------------------------------------------
# CUDA C++ backend. CUDA_SRC includes no torch header, so `nvcc -arch=sm_80 -cubin -x cu` compiles it
# alone (the static check); _BINDING_SRC is the only part that sees torch.

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

namespace kh_rmsnorm {

template <typename T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// N elements loaded and stored as one access: 16 bytes on the vector path, one element on the scalar one.
template <typename T, int N> struct alignas(N * sizeof(T)) Pack {
  T v[N];
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// blockDim.x is a multiple of 32 (the launcher rounds it up), so every warp is full for the shuffles.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_totals[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < (int)(blockDim.x >> 5) ? warp_totals[lane] : 0.0f;
    v = warp_sum(v);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

// Accesses each thread keeps in flight per sweep over the row.
template <bool VEC> struct Unroll { static constexpr int value = VEC ? 2 : 8; };

// One block per row. VEC: the x, out and weight rows are 16-byte aligned and hidden is a whole number
// of 16-byte vectors; otherwise one element per access (padded rows are unaligned). When one sweep of
// the block covers the row, the row stays in registers between the two passes; otherwise the second
// pass re-reads x, which L1/L2 still hold.
template <typename T, bool VEC>
__global__ void __launch_bounds__(1024) rmsnorm_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                       const T* __restrict__ weight, int hidden,
                                                       int64_t x_row_stride, int64_t out_row_stride,
                                                       float eps) {
  constexpr int N = VEC ? 16 / sizeof(T) : 1;
  constexpr int U = Unroll<VEC>::value;
  using P = Pack<T, N>;
  const int64_t row = blockIdx.x;
  const P* xp = reinterpret_cast<const P*>(x + row * x_row_stride);
  const P* wp = reinterpret_cast<const P*>(weight);
  P* op = reinterpret_cast<P*>(out + row * out_row_stride);
  const int n = hidden / N;  // accesses per row
  const int step = blockDim.x;
  const bool cached = n <= U * step;
  float cache[U][N];  // constant indices only (unrolled loops): stays in registers
  float sum_sq = 0.0f;
  for (int base = threadIdx.x; base < n; base += U * step) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * step;
      if (i < n) {
        const P a = xp[i];
#pragma unroll
        for (int k = 0; k < N; ++k) {
          cache[u][k] = to_float(a.v[k]);
          sum_sq += cache[u][k] * cache[u][k];
        }
      }
    }
  }
  const float rstd = rsqrtf(block_sum(sum_sq) / (float)hidden + eps);
  for (int base = threadIdx.x; base < n; base += U * step) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = base + u * step;
      if (i < n) {
        if (!cached) {
          const P a = xp[i];
#pragma unroll
          for (int k = 0; k < N; ++k) cache[u][k] = to_float(a.v[k]);
        }
        const P w = wp[i];
        P o;
#pragma unroll
        for (int k = 0; k < N; ++k) o.v[k] = from_float<T>(cache[u][k] * rstd * to_float(w.v[k]));
        op[i] = o;
      }
    }
  }
}

#define KH_RMSNORM_INSTANTIATE(T, VEC)                                                              \
  template __global__ void rmsnorm_kernel<T, VEC>(T*, const T*, const T*, int, int64_t, int64_t, float);
KH_RMSNORM_INSTANTIATE(float, true)
KH_RMSNORM_INSTANTIATE(float, false)
KH_RMSNORM_INSTANTIATE(__half, true)
KH_RMSNORM_INSTANTIATE(__half, false)
KH_RMSNORM_INSTANTIATE(__nv_bfloat16, true)
KH_RMSNORM_INSTANTIATE(__nv_bfloat16, false)

template <typename T>
cudaError_t launch(void* out, const void* x, const void* weight, int64_t rows, int hidden,
                   int64_t x_row_stride, int64_t out_row_stride, float eps, cudaStream_t stream) {
  constexpr int N = 16 / sizeof(T);
  const bool vec = hidden % N == 0 && x_row_stride % N == 0 && out_row_stride % N == 0 &&
                   ((uintptr_t)out | (uintptr_t)x | (uintptr_t)weight) % 16 == 0;
  const int accesses = vec ? hidden / N : hidden;
  const int unroll = vec ? Unroll<true>::value : Unroll<false>::value;
  // enough threads that one sweep covers the row (registers hold it), in whole warps, at most 1024
  int threads = ((accesses + unroll - 1) / unroll + 31) / 32 * 32;
  threads = threads < 32 ? 32 : (threads > 1024 ? 1024 : threads);
  const dim3 grid((unsigned)rows);
  if (vec) {
    rmsnorm_kernel<T, true><<<grid, threads, 0, stream>>>((T*)out, (const T*)x, (const T*)weight, hidden,
                                                         x_row_stride, out_row_stride, eps);
  } else {
    rmsnorm_kernel<T, false><<<grid, threads, 0, stream>>>((T*)out, (const T*)x, (const T*)weight, hidden,
                                                          x_row_stride, out_row_stride, eps);
  }
  return cudaGetLastError();
}

}  // namespace kh_rmsnorm

// dtype: 0 float, 1 half, 2 bfloat16. Rows are contiguous in their last dimension. Returns null or an
// error message.
extern "C" const char* kh_rmsnorm_launch(int dtype, void* out, const void* x, const void* weight,
                                         int64_t rows, int64_t hidden, int64_t x_row_stride,
                                         int64_t out_row_stride, float eps, void* stream) {
  if (rows <= 0 || hidden <= 0) return nullptr;
  if (rows > 2147483647 || hidden > 2147483647) return "more than 2**31 - 1 rows or columns";
  const cudaStream_t s = (cudaStream_t)stream;
  const int h = (int)hidden;
  const int64_t xs = x_row_stride, os = out_row_stride;
  cudaError_t err;
  switch (dtype) {
    case 0: err = kh_rmsnorm::launch<float>(out, x, weight, rows, h, xs, os, eps, s); break;
    case 1: err = kh_rmsnorm::launch<__half>(out, x, weight, rows, h, xs, os, eps, s); break;
    case 2: err = kh_rmsnorm::launch<__nv_bfloat16>(out, x, weight, rows, h, xs, os, eps, s); break;
    default: return "unsupported dtype code";
  }
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
"""

_BINDING_SRC = r"""
#include <torch/extension.h>

extern "C" const char* kh_rmsnorm_launch(int dtype, void* out, const void* x, const void* weight,
                                         int64_t rows, int64_t hidden, int64_t x_row_stride,
                                         int64_t out_row_stride, float eps, void* stream);

void rmsnorm_fwd(torch::Tensor out, torch::Tensor x, torch::Tensor weight, double eps, int64_t stream) {
  const auto t = x.scalar_type();
  const int dtype = t == at::kFloat ? 0 : t == at::kHalf ? 1 : t == at::kBFloat16 ? 2 : -1;
  TORCH_CHECK(dtype >= 0, "rmsnorm_cuda: unsupported dtype ", t);
  const char* err = kh_rmsnorm_launch(dtype, out.data_ptr(), x.data_ptr(), weight.data_ptr(), x.size(0),
                                      x.size(1), x.stride(0), out.stride(0), static_cast<float>(eps),
                                      reinterpret_cast<void*>(stream));
  TORCH_CHECK(err == nullptr, "rmsnorm_cuda: ", err);
}
"""

_CUDA_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@functools.cache
def _cuda_module(capability: tuple[int, int]):
    return load_cuda_extension("kh_rmsnorm_cuda", _BINDING_SRC, CUDA_SRC, ["rmsnorm_fwd"], capability)


def build_cuda() -> None:
    """The harness's build hook: compile for the current device once, so a failed build is a fallback with
    its reason (the triton backend runs instead) rather than an error in every test."""
    _cuda_module(torch.cuda.get_device_capability())


def rmsnorm_cuda(*, x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, eps: float) -> None:
    """CUDA C++ RMSNorm; rows may be padded (any row stride) but each row must be contiguous."""
    _check_shapes(x, weight, out)
    for name, t in (("x", x), ("out", out)):
        if t.stride(1) != 1:
            raise ValueError(
                f"rmsnorm_cuda: {name} must be contiguous in its last dimension (strides "
                f"{tuple(t.stride())}); this backend supports contiguous and padded rows only, use the "
                "triton backend"
            )
    if x.dtype not in _CUDA_DTYPES or weight.dtype != x.dtype or out.dtype != x.dtype:
        raise ValueError(
            "rmsnorm_cuda: x, weight and out must share one of fp32/fp16/bf16; got "
            f"{x.dtype}, {weight.dtype}, {out.dtype}"
        )
    if not (x.is_cuda and weight.is_cuda and out.is_cuda):
        raise ValueError("rmsnorm_cuda: tensors must be on a CUDA device")
    if x.numel() == 0:
        return
    weight = weight.contiguous()  # hidden elements: a copy only when the caller passed a strided vector
    module = _cuda_module(cuda_capability(x.device))
    with torch.cuda.device(x.device):
        module.rmsnorm_fwd(out, x, weight, float(eps), torch.cuda.current_stream(x.device).cuda_stream)
