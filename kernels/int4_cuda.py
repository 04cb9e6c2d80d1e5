"""The weight-only int4 GEMM's CUDA C++ backend: a tensor-core decode kernel (kernels/int4_gemv.cu) for one to 16
rows of activations, the Triton kernels (kernels/int4_matmul.py) for everything else.

Why CUDA for decode. The Triton GEMV (kernels/int4_gemv.py) multiplies on the CUDA cores: about five
instructions per weight (dequantise, widen to fp32, one fma each, the activations' loads and conversions), and on
an H100 its dequantising loops took 4 us more than its loads alone at 4096 x 4096 (reports/h100/experiments/
int4-prefetch/). Triton's own tensor-core path shuffles each dequantised tile into the MMA's operand layout. The
CUDA kernel feeds the dequantised registers to mma.sync as they come (the k order inside an MMA is a relabelling
the activations follow, at two byte permutes per register of a), so the multiply-adds cost an eighth of an
instruction per weight and the dequantisation about two.

Where it applies: a on the GPU with 1 to 16 rows, K a positive multiple of 32, a's and w's rows contiguous with
16-byte aligned starts (a checkpoint's layout: every lane reads 16 bytes at a time). Scales, zero points and c may
have any strides. Other calls take the Triton kernels: the generated edge cases (K = 2, 130, 258; strided,
transposed) run there.

Measured (reports/h100/experiments/int4-cuda/run1/, reports/h200/experiments/int4/cuda/run1/, 2026-12-06): every
configuration right at every check on both cards (96 and 304), and int4_matmul's full tier passed on both. Against
bf16 ``F.linear`` on the resident weight, the Triton launcher of the same run in brackets, at M = 1: on the H100
1.94x at N = K = 4096 (1.64x), 2.14x at K = 14336 (1.94x), 2.35x at N = 14336 (1.76x); on the H200, whose bf16
GEMM is faster (13.25 us at 4096 x 4096 against 16.45), 1.55x (1.34x), 1.66x with a second group in flight
(1.38x), 1.78x (1.36x). At M = 16 the Triton
tile kernel's split of K wins at both 14336 shapes on both cards, so calls above 8 rows go there. The issue's 2.5x
and 3x at M = 1 are not reached. Latency bounds the kernel, not bandwidth: it takes the same time on both cards
(8.48 and 8.54 us at N = K = 4096, where the H200 streams the 8.4 MB in about 2 us), and a split of K across
blocks (more blocks, fewer dependent rounds of loads each) never won, nor did a
ring of each warp's next groups in shared memory filled by cp.async (1.4 to 2.2 times slower than the register path
on an H100, reports/h100/experiments/int4-ring/). ``CudaGemvConfig.stages`` now takes a bulk ring instead
(kernels/int4_gemv.cu says how): one producer warp streams a block's rows through shared memory with
cp.async.bulk, so the computing warps issue no weight loads at all (sm_90 on). It was right at every check and
no faster on an H100 (reports/h100/experiments/int4-bulk/: 8.78 against 8.70 us at 4096 x 4096; its loads alone
7.52 us against 7.17): three ways of putting more bytes in flight, none faster than two groups in registers.
``CudaGemvConfig.preload`` takes the other loads out of the loop instead (kernels/int4_gemv.cu, PRE): a block copies
its rows' scales and zero points and its share of the activations into shared memory first, so its warps carry only
the weight in flight. It has not run on a GPU yet, so the launcher does not choose it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from kernels.common import Plans, cdiv, cuda_capability, cuda_source, load_cuda_extension, signature
from kernels.int4_matmul import checked_trivial, int4_matmul, plan_for
from kernels.splitk import SPLIT_MAX, scratch, unused

CUDA_SRC = cuda_source(Path(__file__).parent / "int4_gemv.cu")

_BINDING_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <stdexcept>
#include <string>

extern "C" const char* kh_int4_gemv_launch(int dtype, void* c, const void* a, const void* w, const void* scales,
                                           const void* zeros, void* ws, void* cnt, int64_t M, int64_t N,
                                           int64_t K, int64_t lda, int64_t ldw, int64_t ss_n, int64_t ss_g,
                                           int64_t sz_n, int64_t sz_g,
                                           int64_t sc_m, int64_t sc_n, int warps, int row_tiles, int splits,
                                           int depth, int stages, int pre, void* stream);

// kernels/int4_cuda.py has checked shapes, dtypes, strides and alignments; launched on a's device and its current
// stream.
void int4_gemv(torch::Tensor c, torch::Tensor a, torch::Tensor w, torch::Tensor scales, torch::Tensor zeros,
               torch::Tensor ws, torch::Tensor cnt, int64_t warps, int64_t row_tiles, int64_t splits, int64_t depth,
               int64_t stages, int64_t preload) {
  const c10::cuda::CUDAGuard guard(a.device());
  const int dtype = a.scalar_type() == at::kHalf ? 1 : a.scalar_type() == at::kBFloat16 ? 2 : -1;
  if (dtype < 0) throw std::invalid_argument("int4_matmul_cuda: a must be fp16 or bf16");
  const char* err = kh_int4_gemv_launch(
      dtype, c.data_ptr(), a.data_ptr(), w.data_ptr(), scales.data_ptr(), zeros.data_ptr(), ws.data_ptr(),
      cnt.data_ptr(), a.size(0), w.size(0),
      a.size(1), a.stride(0), w.stride(0), scales.stride(0), scales.stride(1), zeros.stride(0), zeros.stride(1),
      c.stride(0), c.stride(1), static_cast<int>(warps), static_cast<int>(row_tiles), static_cast<int>(splits),
      static_cast<int>(depth), static_cast<int>(stages), static_cast<int>(preload),
      at::cuda::getCurrentCUDAStream(a.device().index()).stream());
  if (err != nullptr) throw std::runtime_error(std::string("int4_matmul_cuda: ") + err);
}
"""

MAX_M = 16  # two 8-column B tiles of the MMA
# Without a config, calls above 8 rows go to the Triton tile kernel: its split of K beat this kernel at M = 16 at
# both 14336 shapes on the H100 (2.02x and 1.84x bf16 against 1.62x and 1.53x) and the H200 (21.8 and 22.4 us
# against 25.1 and 26.3 for the best configuration swept), and matched it at 4096 x 4096.
ROUTE_MAX_M = 8
STAGES = (0, 2, 3, 4)  # the bulk ring's slots kernels/int4_gemv.cu instantiates (0: no ring)


@dataclass(frozen=True)
class CudaGemvConfig:
    warps: int  # per block, each taking every warps-th group of K (of its split): 1, 2, 4 or 8
    row_tiles: int = 1  # 16-row tiles of w per block, sharing the activations' loads: 1 or 2
    splits: int = 1  # blocks along K per row tile, summed in the same launch: 1 to SPLIT_MAX
    depth: int = 1  # groups a warp has in flight in registers beside the one it computes: 1 or 2
    # 0: those registers; 2, 3 or 4: the bulk ring's slots of one stage of K each (warps groups), sm_90 on, depth 1
    stages: int = 0
    # 1: the block copies its rows' scales and zero points and its share of the activations into shared memory first,
    # and each warp carries only the weight in flight (kernels/int4_gemv.cu, PRE); the register path only
    preload: int = 0

    def __post_init__(self):
        if (self.warps not in (1, 2, 4, 8) or self.row_tiles not in (1, 2) or not 1 <= self.splits <= SPLIT_MAX
                or self.depth not in (1, 2) or self.stages not in STAGES or (self.stages and self.depth != 1)
                or self.preload not in (0, 1) or (self.preload and self.stages)):
            raise ValueError(f"CudaGemvConfig: warps 1, 2, 4 or 8, row_tiles 1 or 2, splits 1 to {SPLIT_MAX}, "
                             f"depth 1 or 2, stages 0, 2, 3 or 4 (depth 1 with a ring), preload 0 or 1 (stages 0 "
                             f"with it); got {self}")

    def smem_bytes(self, m: int, k: int) -> int:
        """Shared memory a block takes at ``m`` rows and depth ``k`` (kernels/int4_gemv.cu, block_smem_bytes,
        pre_bytes and the launcher's check): the bulk ring's slots (16 rows a row tile, ``warps`` x 64 + 64 bytes
        a row), the warps' partial tiles, the preload's scales and zero points (a word a row and slot, rows a word
        apart more than the slots) and ``m`` rows of activations (256 bytes a slot and 16 more), and
        16 bytes of statics and 16 of barriers a slot. Above the device's shared memory per block the launcher
        refuses the config."""
        tile = self.row_tiles * (1 if m <= 8 else 2) * 128 * 4
        ring = self.stages * (self.row_tiles * 16 * (self.warps * 64 + 64) + 16)
        pre = 0
        if self.preload:
            slots = cdiv(cdiv(k, 128), self.splits * self.warps) * self.warps
            pre = self.row_tiles * 16 * (slots + 1) * 4 + m * (slots * 256 + 16)
        return self.warps * tile + ring + pre + 16

    @classmethod
    def for_shape(cls, m: int, n: int, k: int) -> CudaGemvConfig:
        """Eight warps on one row tile, no split across blocks: the fastest or within 2% of it at every decode
        shape on an H100 (reports/h100/experiments/int4-cuda/run1/) and at M <= 4 on the H200
        (reports/h200/experiments/int4/cuda/run1/). A second group in flight where N gives few blocks: on the H200
        at N = 4096 it took K = 14336 from 20.2 to 18.5 us at M = 1 (20.5 to 19.0 at M = 4) and made no
        difference at K = 4096; at N = 14336 it did not help. Splits across blocks never won, nor did a
        cp.async ring a warp (1.4 to 2.2 times the register path's time on an H100,
        reports/h100/experiments/int4-ring/), nor the bulk ring (``stages``: 0.98x at 4096 x 4096 and 0.85-0.92x
        at the 14336 shapes on an H100, reports/h100/experiments/int4-bulk/)."""
        return cls(8, 1, 1, 2 if n <= 4096 else 1)


@functools.cache
def _module(capability: tuple[int, int]):
    return load_cuda_extension("kh_int4_gemv", _BINDING_SRC, CUDA_SRC, ["int4_gemv"], capability)


def build_cuda() -> None:
    """The harness's build hook: compile for the current device once, so a failed build is a fallback with its
    reason rather than an error in every test."""
    _module(torch.cuda.get_device_capability())


def applies(a: torch.Tensor, w: torch.Tensor) -> bool:
    """Whether the CUDA decode kernel takes these operands (the module docstring says why each condition)."""
    m, k = a.shape
    return (a.is_cuda and 1 <= m <= MAX_M and k > 0 and k % 32 == 0 and a.stride(1) == 1
            and (m == 1 or a.stride(0) % 8 == 0) and a.data_ptr() % 16 == 0 and w.stride(1) == 1
            and w.stride(0) % 16 == 0 and w.data_ptr() % 16 == 0)  # fmt: skip


_PLANS = Plans()


def int4_matmul_cuda(*, a: torch.Tensor, w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
                     c: torch.Tensor, config: CudaGemvConfig | None = None) -> None:  # fmt: skip
    """``c = a @ dequant(w).T`` (kernels/int4_matmul.py has the format): the CUDA decode kernel where it
    applies, else the Triton kernels. ``config`` (tests, sweeps) replaces the kernel's configuration by shape."""
    sig = signature(a, w, scales, zeros, c) if config is None else None
    _PLANS.run(sig, lambda: _plan(sig, a, w, scales, zeros, c, config), a, w, scales, zeros, c)


def _plan(sig, a, w, scales, zeros, c, config):
    trivial = checked_trivial(a, w, scales, zeros, c, "int4_matmul_cuda")
    if trivial is not None:
        return trivial
    m, k = a.shape
    n = w.shape[0]
    if not applies(a, w) or (config is None and m > ROUTE_MAX_M):
        if config is not None:
            raise ValueError("int4_matmul_cuda: a config was given but the CUDA kernel does not take these operands "
                             f"(a {tuple(a.shape)} strides {a.stride()}, w strides {w.stride()})")
        return _PLANS.delegate(sig, _triton, plan_for)  # one plan lookup a call, not two
    cfg = config or CudaGemvConfig.for_shape(m, n, k)
    module = _module(cuda_capability(a.device))
    blocks = cdiv(n, 16 * cfg.row_tiles)
    tile = cfg.row_tiles * (1 if m <= 8 else 2) * 128

    def launch(a, w, scales, zeros, c):
        ws, cnt = scratch(a.device, cfg.splits * blocks * tile, blocks) if cfg.splits > 1 else unused(a.device)
        module.int4_gemv(c, a, w, scales, zeros, ws, cnt, cfg.warps, cfg.row_tiles, cfg.splits, cfg.depth,
                         cfg.stages, cfg.preload)
    return launch


def _triton(a, w, scales, zeros, c) -> None:
    int4_matmul(a=a, w=w, scales=scales, zeros=zeros, c=c)
