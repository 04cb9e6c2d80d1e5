"""The FP8 GEMM's CUDA C++ kernel for Hopper (kernels/matmul_fp8_wgmma.cu): ``c = (a @ b.T) * scale_a * scale_b.T``
with the semantics of kernels.matmul_fp8 (its docstring has the format), fp32 promotion of the FP8 tensor-core
accumulator every 128 products, and that promotion overlapped with the next block's wgmma.

Why CUDA. The Triton kernel's persistent TMA path promotes every 128-deep block, but Triton closes each promoted
dot with a wait for all its wgmma groups before the add (reports/h200/experiments/fp8/fp8_dot_waits.txt), so the
tensor cores idle during every promotion; it ran 0.69x torch._scaled_mm at 4096^3 on the H200. Here each consumer
warpgroup keeps two wgmma accumulator sets and waits only for the previous block's group (``wgmma.wait_group 1``)
before adding it into the fp32 total (the .cu file's header has the layout).

Where it applies: sm_90 (built for sm_90a), a and b float8 e4m3 with K contiguous, M, N and K multiples of 128,
16-byte aligned rows and pointers, c bf16 with contiguous rows, scales fp32 per tensor or per row. Every other call
goes to kernels.matmul_fp8's Triton kernel (which also names a malformed operand), unless a configuration is
given (a probe's): then it is a ValueError. specs/matmul_fp8.toml declares it as the cuda backend, first in the
fallback order; its generated tests at the full tier passed on an H100 (reports/h100/experiments/verify/).
On an H100 its error equalled _scaled_mm's, and promoting it ran as fast as without the promotion
(reports/h100/README.md: fp8-clusters). With c stored 16 bytes a lane (the epilogue's 4-byte stores had written
every sector in halves), the harness's bench on an H100 (reports/h100/experiments/fp8-store/bench/) put it at 0.902x
_scaled_mm at 4096^3 per tensor and 0.92-0.94x per row at the 4096 shapes, from 0.70-0.85x before; 0.754x at 8192^3
per tensor, where pairs of CTAs sharing b through multicast (WgmmaConfig.cluster) then took it to 0.873x once their
arrivals on each other's barriers no longer fenced (reports/h100/experiments/norms-fp8/).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch

from kernels.common import Plans, cuda_capability, cuda_source, load_cuda_extension, signature, sm_count
from kernels.matmul_fp8 import matmul_fp8, matmul_fp8_ref, plan_for

# matmul_fp8_ref is the reference this backend is checked against, exported beside it
__all__ = ["WgmmaConfig", "build_cuda", "matmul_fp8_cuda", "matmul_fp8_ref", "unsupported"]

CUDA_SRC = cuda_source(Path(__file__).parent / "matmul_fp8_wgmma.cu")

_BINDING_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <stdexcept>
#include <string>

extern "C" const char* kh_fp8_wgmma_launch(void* c, const void* a, const void* b, const float* scale_a,
                                           const float* scale_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                                           int64_t ldb, int64_t ldc, int64_t ssa, int64_t ssb, int stages,
                                           int mode, int cluster, int num_sms, void* stream);

// kernels/matmul_fp8_cuda.py has checked shapes, dtypes, strides and alignments; launched on a's device and its
// current stream.
void matmul_fp8_wgmma(torch::Tensor c, torch::Tensor a, torch::Tensor b, torch::Tensor scale_a,
                      torch::Tensor scale_b, int64_t ssa, int64_t ssb, int64_t stages, int64_t mode,
                      int64_t cluster, int64_t num_sms) {
  const c10::cuda::CUDAGuard guard(a.device());
  const char* err = kh_fp8_wgmma_launch(
      c.data_ptr(), a.data_ptr(), b.data_ptr(), scale_a.data_ptr<float>(), scale_b.data_ptr<float>(), a.size(0),
      b.size(0), a.size(1), a.stride(0), b.stride(0), c.stride(0), ssa, ssb, static_cast<int>(stages),
      static_cast<int>(mode), static_cast<int>(cluster), static_cast<int>(num_sms),
      at::cuda::getCurrentCUDAStream(a.device().index()).stream());
  if (err != nullptr) throw std::runtime_error(std::string("matmul_fp8_cuda: ") + err);
}
"""

TILE = 128  # the kernel's block along M, N and K: every dimension must be a multiple of it
MODES = {"overlap": 0, "serial": 1, "fast": 2, "stream": 3}


@dataclass(frozen=True)
class WgmmaConfig:
    stages: int = 6  # shared-memory ring depth, 32 KiB a stage: 4, 5 or 6
    # overlap: promotion of block i-1 while block i's wgmma runs (the default). stream: the same, with the next
    # tile's first block issued before the current tile's last promotion and store, which then run while the
    # tensor cores work. serial: wait for each block before its add, what Triton does, kept to measure the
    # overlap. fast: no promotion (the whole K in the instruction's accumulator), the speed ceiling; fails the
    # spec's accuracy bound at long K, so only a probe asks for it.
    mode: str = "overlap"
    # 2: pairs of CTAs (a cluster) on vertically adjacent tiles, each loading half of b's tile and multicasting it
    # to both, which halves b's reads from L2 (a 128 x 128 tile reads 128 FLOP per byte without it); M must then
    # be a multiple of 256 (the launcher's choice for large outputs: default_config). 4: a 2 x 2 square of tiles,
    # a and b each multicast to a pair, both reads halved; M and N multiples of 256 (slower than pairs on an H100).
    cluster: int = 1

    def __post_init__(self):
        if self.stages not in (4, 5, 6) or self.mode not in MODES or self.cluster not in (1, 2, 4):
            raise ValueError(f"WgmmaConfig: stages 4, 5 or 6, mode one of {sorted(MODES)}, cluster 1, 2 or 4; "
                             f"got {self}")

    @property
    def tiles(self) -> tuple[int, int]:
        """A cluster's tiles along M and N."""
        return (1 if self.cluster == 1 else 2), (2 if self.cluster == 4 else 1)

    def takes(self, m: int, n: int) -> bool:
        """Whether this configuration takes an M x N output (a cluster needs whole squares or pairs of tiles)."""
        tm, tn = self.tiles
        return m % (TILE * tm) == 0 and n % (TILE * tn) == 0


@functools.cache
def _module(capability: tuple[int, int]):
    return load_cuda_extension("kh_fp8_wgmma", _BINDING_SRC, CUDA_SRC, ["matmul_fp8_wgmma"], capability,
                               arch_suffix="a")


def build_cuda() -> None:
    """Compile for the current device once, so a failed build shows up as one error with its reason."""
    _module(torch.cuda.get_device_capability())


def _scale_problem(scale: torch.Tensor, rows: int, name: str) -> str | None:
    if scale.dtype != torch.float32 or scale.dim() != 2 or scale.shape[1] != 1 or scale.shape[0] not in (1, rows):
        return (f"{name} must be fp32 [1, 1] (per tensor) or [{rows}, 1] (per row), got {scale.dtype} "
                f"{list(scale.shape)}")
    return None


def _scale_stride(scale: torch.Tensor) -> int:
    return scale.stride(0) if scale.shape[0] > 1 else 0


def unsupported(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                c: torch.Tensor) -> str | None:  # fmt: skip
    """Why the kernel cannot take these operands, or None where it can (the module docstring says what it takes)."""
    if a.dim() != 2 or b.dim() != 2 or b.shape[1] != a.shape[1] or tuple(c.shape) != (a.shape[0], b.shape[0]):
        return f"expected a [M, K], b [N, K], c [M, N]; got {tuple(a.shape)}, {tuple(b.shape)}, {tuple(c.shape)}"
    why = _scale_problem(scale_a, a.shape[0], "scale_a") or _scale_problem(scale_b, b.shape[0], "scale_b")
    if why is not None:
        return why
    if not (a.is_cuda and b.is_cuda and c.is_cuda and scale_a.is_cuda and scale_b.is_cuda):
        return "every operand must be on a CUDA device"
    if len({a.device, b.device, c.device, scale_a.device, scale_b.device}) != 1:
        return "every operand must be on one device"
    if cuda_capability(a.device) != (9, 0):
        return f"the kernel is built for sm_90a, the device is sm_{''.join(map(str, cuda_capability(a.device)))}"
    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        return f"a and b must be float8_e4m3fn, got {a.dtype} and {b.dtype}"
    if c.dtype != torch.bfloat16:
        return f"c must be bfloat16, got {c.dtype}"
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0 or k == 0 or m % TILE or n % TILE or k % TILE:
        return f"M, N and K must be positive multiples of {TILE}, got {m}, {n}, {k}"
    if a.stride(1) != 1 or b.stride(1) != 1 or c.stride(1) != 1:
        return f"a, b and c need contiguous rows, got strides {a.stride()}, {b.stride()}, {c.stride()}"
    if a.stride(0) % 16 or b.stride(0) % 16 or c.stride(0) % 8:
        return "row strides must be 16-byte aligned (TMA)"
    if a.data_ptr() % 16 or b.data_ptr() % 16 or c.data_ptr() % 16:
        return "a, b and c must start 16-byte aligned"
    return None


_PLANS = Plans()


def matmul_fp8_cuda(*, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                    c: torch.Tensor, fast_accum: bool = False, config: WgmmaConfig | None = None) -> None:
    """``c = (a @ b.T) * scale_a * scale_b.T`` in place, as kernels.matmul_fp8:matmul_fp8 takes it: the wgmma
    kernel where it takes the operands, else that Triton kernel (decode and ragged shapes, other devices; it also
    raises the errors of malformed operands). ``fast_accum`` drops the promotion in either. ``config`` (probes,
    sweeps) replaces the kernel's configuration and never falls back: operands it cannot take are a ValueError."""
    if config is not None:
        _launch(a, b, scale_a, scale_b, c, config, fast_accum)
        return
    sig = (signature(a, b, scale_a, scale_b, c), bool(fast_accum))
    _PLANS.run(sig, lambda: _plan(sig, a, b, scale_a, scale_b, c, bool(fast_accum)), a, b, scale_a, scale_b, c)


def _plan(sig, a, b, scale_a, scale_b, c, fast_accum: bool):
    if unsupported(a, b, scale_a, scale_b, c) is not None:
        # delegated: through two launchers' plans a call took twice Triton's host time at M = 1 on an H100 (40.1
        # against 20.1 us, reports/h100/experiments/fp8-bench/)
        def triton(a, b, scale_a, scale_b, c):
            matmul_fp8(a=a, b=b, scale_a=scale_a, scale_b=scale_b, c=c, fast_accum=fast_accum)
        return _PLANS.delegate(sig, triton, lambda *ops: plan_for(*ops, fast_accum))
    return _kernel(a, scale_a, scale_b, default_config(a.shape[0], b.shape[0], fast_accum))


# Outputs of at least this many elements take pairs of CTAs sharing b (WgmmaConfig.cluster 2). On an H100, with the
# peer arrivals' fence gone (reports/h100/experiments/norms-fp8/): 8192^3 from 0.763x to 0.873x _scaled_mm per
# tensor and 0.918x to 0.938x per row; 4096^3 from 0.900x / 0.970x down to 0.849x / 0.886x. Between the two (say
# 4096 x 14336) nothing was measured, so the smaller shapes keep single CTAs.
CLUSTER_MIN_OUTPUT = 8192 * 8192


def default_config(m: int, n: int, fast_accum: bool) -> WgmmaConfig:
    """The launcher's configuration for an M x N output, where no configuration is given."""
    mode = "fast" if fast_accum else "overlap"
    pair = WgmmaConfig(mode=mode, cluster=2)
    return pair if m * n >= CLUSTER_MIN_OUTPUT and pair.takes(m, n) else WgmmaConfig(mode=mode)


def _launch(a, b, scale_a, scale_b, c, cfg: WgmmaConfig, fast_accum: bool) -> None:
    why = unsupported(a, b, scale_a, scale_b, c)
    if why is not None:
        raise ValueError(f"matmul_fp8_cuda: {why}")
    if fast_accum and cfg.mode != "fast":
        raise ValueError(f"matmul_fp8_cuda: fast_accum with config mode {cfg.mode!r}")
    if not cfg.takes(a.shape[0], b.shape[0]):
        tm, tn = cfg.tiles
        raise ValueError(f"matmul_fp8_cuda: clusters of {cfg.cluster} need M a multiple of {TILE * tm} and N of "
                         f"{TILE * tn}")
    _kernel(a, scale_a, scale_b, cfg)(a, b, scale_a, scale_b, c)


def _kernel(a, scale_a, scale_b, cfg: WgmmaConfig):
    """The wgmma kernel's launch for operands of this signature: the built module, the scales' strides (0 per
    tensor), the configuration and the SM count bound once."""
    module, sms = _module(cuda_capability(a.device)), sm_count(a.device)
    ssa, ssb = _scale_stride(scale_a), _scale_stride(scale_b)

    def wgmma(a, b, scale_a, scale_b, c):
        module.matmul_fp8_wgmma(c, a, b, scale_a, scale_b, ssa, ssb, cfg.stages, MODES[cfg.mode], cfg.cluster, sms)
    return wgmma
