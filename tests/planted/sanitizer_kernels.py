"""Kernels whose bugs only compute-sanitizer sees: their outputs are right, so the generated tests pass.

Each follows the calling convention of tests/specs/scale.toml (``x``, ``w``, ``out``);
tests/test_sanitize.py asserts that ``python -m harness sanitize`` reports them (memcheck and racecheck)
and stays quiet about the correct scale kernel.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl


@triton.jit
def _overread_kernel(x_ptr, w_ptr, out_ptr, n_cols, sx_row, sx_col, so_row, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    # The bug: `<=` reads one element past each row. The extra value is never stored, so the output is right;
    # past the last row of a contiguous x it is one element past the allocation, which no crash reveals (a
    # read inside the allocator's granularity) and memcheck does.
    x = tl.load(x_ptr + row * sx_row + cols * sx_col, mask=cols <= n_cols)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask)
    y = x.to(tl.float32) * w.to(tl.float32) * 2.0
    tl.store(out_ptr + row * so_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def overread(*, x, w, out):
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return
    _overread_kernel[(n_rows,)](x, w, out, n_cols, x.stride(0), x.stride(1), out.stride(0),
                                BLOCK=triton.next_power_of_2(n_cols + 1))


_RACY_SRC = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

// torch's extension build defines __CUDA_NO_HALF_CONVERSIONS__ and __CUDA_NO_BFLOAT16_CONVERSIONS__.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Each block stages its row, scaled, in shared memory; each thread then stores an element staged by a thread
// in another warp. The bug: no __syncthreads() between the two loops (a read-after-write hazard on shared
// memory). Warps usually finish the first loop before any reaches the second, so outputs are mostly right.
template <typename T>
__global__ void racy_scale_kernel(const T* x, const T* w, T* out, int64_t cols, int64_t sx_row, int64_t sx_col,
                                  int64_t so_row) {
  extern __shared__ float tile[];
  const int64_t row = blockIdx.x;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    tile[c] = to_f32(x[row * sx_row + c * sx_col]) * to_f32(w[c]);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const int64_t p = (c + 32) % cols;
    out[row * so_row + p] = from_f32<T>(2.0f * tile[p]);
  }
}

template <typename T>
static void launch(const void* x, const void* w, void* out, int64_t rows, int64_t cols, int64_t sx_row,
                   int64_t sx_col, int64_t so_row, cudaStream_t stream) {
  racy_scale_kernel<T><<<rows, 128, cols * sizeof(float), stream>>>(
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(out), cols, sx_row, sx_col, so_row);
}

extern "C" const char* kh_racy_scale(int dtype, const void* x, const void* w, void* out, int64_t rows,
                                     int64_t cols, int64_t sx_row, int64_t sx_col, int64_t so_row, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: launch<float>(x, w, out, rows, cols, sx_row, sx_col, so_row, s); break;
    case 1: launch<__half>(x, w, out, rows, cols, sx_row, sx_col, so_row, s); break;
    case 2: launch<__nv_bfloat16>(x, w, out, rows, cols, sx_row, sx_col, so_row, s); break;
    default: return "unsupported dtype code";
  }
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
"""

_BINDING_SRC = r"""
#include <torch/extension.h>

extern "C" const char* kh_racy_scale(int dtype, const void* x, const void* w, void* out, int64_t rows,
                                     int64_t cols, int64_t sx_row, int64_t sx_col, int64_t so_row, void* stream);

void racy_scale(torch::Tensor x, torch::Tensor w, torch::Tensor out, int64_t stream) {
  const auto t = x.scalar_type();
  const int dtype = t == at::kFloat ? 0 : t == at::kHalf ? 1 : t == at::kBFloat16 ? 2 : -1;
  TORCH_CHECK(dtype >= 0, "racy_scale: unsupported dtype ", t);
  const char* err = kh_racy_scale(dtype, x.data_ptr(), w.data_ptr(), out.data_ptr(), x.size(0), x.size(1),
                                  x.stride(0), x.stride(1), out.stride(0), reinterpret_cast<void*>(stream));
  TORCH_CHECK(err == nullptr, "racy_scale: ", err);
}
"""


@functools.cache
def _racy_module():
    from torch.utils.cpp_extension import load_inline

    major, minor = torch.cuda.get_device_capability()
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"  # this device only: a fraction of the build time
    return load_inline(name=f"kh_planted_racy_sm{major}{minor}", cpp_sources=[_BINDING_SRC],
                       cuda_sources=[_RACY_SRC], functions=["racy_scale"], extra_cuda_cflags=["-O2"])


def build_racy() -> None:
    """The spec's build hook: compile once at resolution, not inside the first test."""
    _racy_module()


def racy(*, x, w, out):
    if x.numel() == 0:
        return
    _racy_module().racy_scale(x, w, out, torch.cuda.current_stream(x.device).cuda_stream)
