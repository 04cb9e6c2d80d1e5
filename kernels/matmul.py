"""GEMM with a fused epilogue: Triton kernel (autotuned on a GPU), CUDA C++ backend, torch reference, torch peer.

``c = act(a @ b.T + bias)`` with a ``[M, K]``, b ``[N, K]`` (stored like an ``nn.Linear`` weight, as vLLM and
SGLang keep their weights), bias ``[N]`` and c ``[M, N]``; fp16/bf16 inputs, fp32 accumulation, one rounding
to c's dtype at the end. The epilogue is a code (:data:`EPILOGUES`): 0 none (bias ignored), 1 bias,
2 bias + relu, 3 bias + gelu (tanh approximation), 4 bias + silu. Any strides on every tensor.

Few output tiles over a long K (M of 64 to 256, K from 8192: :func:`splits_k`) are also offered split-K configs:
the splits' fp32 partials are summed in the same launch, in split order, and the epilogue applied once to the sum
(kernels/splitk.py). The autotuner times them beside the unsplit tiles. Timed on an H100: specs/matmul.toml's gap.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from kernels.common import (
    CachedAutotune,
    Plans,
    cdiv,
    cuda_capability,
    cuda_source,
    interpreted,
    load_cuda_extension,
    needs_bf16_rounding,
    next_power_of_2,
    no_launch,
    round_to_bf16,
    signature,
    sm_count,
)
from kernels.fastlaunch import FastLaunch
from kernels.splitk import scratch, split_k_total, unused

EPILOGUES = ("none", "bias", "bias_relu", "bias_gelu", "bias_silu")
# Programs that share a band of a's rows walk b's columns together, so a band stays in L2 while it is used.
_GROUP_M = 8
# The interpreter runs programs one after another: few, large tiles (up to this size) keep a CPU run short.
_INTERP_BLOCK = 128


@dataclass(frozen=True)
class MatmulConfig:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int
    split_k: int = 1  # K ranges summed in the same launch (kernels/splitk.py); 1: none

    def shared_bytes(self, itemsize: int = 2) -> int:
        """Shared memory the software pipeline holds: one a and one b tile per stage."""
        return self.num_stages * (self.block_m + self.block_n) * self.block_k * itemsize

    def as_triton(self) -> triton.Config:
        split = {"SPLIT_K": self.split_k} if self.split_k != 1 else {}  # only _matmul_kernel has SPLIT_K
        return triton.Config({"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k,
                              "GROUP_M": self.group_m, **split}, num_warps=self.num_warps,
                             num_stages=self.num_stages)  # fmt: skip

    @classmethod
    def interpreted(cls, m: int, n: int, k: int) -> MatmulConfig:
        """The Triton interpreter's config: a tile covering as much of the problem as _INTERP_BLOCK allows."""
        def fit(size: int) -> int:
            return min(max(next_power_of_2(size), 16), _INTERP_BLOCK)
        return cls(fit(m), fit(n), fit(k), 1, 4, 1)


# The autotuner's candidates on a GPU. Every one fits sm_80's 163 KiB of shared memory (at most 144 KiB), so
# one list serves sm_80, sm_90 and sm_100. Large tiles for prefill/square shapes; 16-64-row tiles with deep
# K blocks for decode (M of 16 to 128), where b's stream is the cost and more, narrower programs keep the
# memory system busy.
# (256 x 128 x 64, 8 warps: its gelu epilogue spilled 32 B on sm_100 in `harness matrix`, so 128 x 256 alone
# holds the large-tile role.)
CONFIGS = (
    MatmulConfig(128, 256, 64, _GROUP_M, 8, 3),
    MatmulConfig(128, 128, 64, _GROUP_M, 8, 4),
    MatmulConfig(128, 128, 32, _GROUP_M, 4, 4),
    MatmulConfig(64, 256, 32, _GROUP_M, 4, 4),
    MatmulConfig(64, 128, 64, _GROUP_M, 4, 4),
    MatmulConfig(64, 64, 128, _GROUP_M, 4, 4),
    MatmulConfig(32, 64, 128, _GROUP_M, 4, 4),
    MatmulConfig(16, 64, 128, _GROUP_M, 4, 4),
    MatmulConfig(16, 32, 256, _GROUP_M, 4, 4),
)

# Split-K, for few output tiles over a long K: at M = 128, N = 4096, K = 14336 the 32-64 tiles leave most of 132
# SMs idle (0.80x cuBLAS); splitting K 4 ways reached 0.92x in reports/h200/experiments/matmul_tma/ (a swap-AB
# kernel), while at M = 16 and at N = 14336 no split helped. So the autotuner is offered these splits only where M
# is 64 to 256, K at least 8192 and the fp32 workspace, splits x M x N, at most 32 MiB; it keeps the unsplit tiles
# too and times both.
_SPLITS = (2, 4)
_SPLIT_M = (64, 256)
_SPLIT_MIN_K = 8192
_SPLIT_MAX_MN = 1 << 21
# The split's tiles: 64-128 rows, at most 64 accumulator elements a thread (the last split's sum holds a second
# tile beside it: with 128 a thread, 128 x 128 on 4 warps and 128 x 256 on 8 spilled in `harness matrix`).
SPLIT_CONFIGS = tuple(MatmulConfig(c.block_m, c.block_n, c.block_k, c.group_m, c.num_warps, c.num_stages, split)
                      for c in CONFIGS if 64 <= c.block_m <= 128 and c.block_m * c.block_n <= 64 * 32 * c.num_warps
                      for split in _SPLITS)


def splits_k(m: int, n: int, k: int) -> bool:
    """Whether a launch of this shape is offered split-K configs."""
    return _SPLIT_M[0] <= m <= _SPLIT_M[1] and k >= _SPLIT_MIN_K and m * n <= _SPLIT_MAX_MN


# Operand and accumulator elements per thread above which a tile spills when its loads are not pipelined.
# Triton pipelines loads through shared memory (cp.async) only when it can prove them 16-byte aligned; an
# unaligned launch (K = 129, a padded row) keeps whole a and b tiles in registers. Compiled for sm_80/90/100
# by `harness matrix`, exactly the configs above this bound spilled at K = 129 and none below it.
_UNPIPELINED_ELEMENTS = 128


def _elements_per_thread(c) -> float:
    bm, bn, bk = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"]
    return (bm * bn + bm * bk + bn * bk) / (32 * c.num_warps)


def _aligned(named_args) -> bool:
    """The layout the large tiles are for: K-major a and b (an nn.Linear weight, a row-major activation),
    every pointer 16-byte aligned, the row strides and K multiples of 16 (Triton's divisibility hint), so
    loads are vectorised and pipelined. Transposed or strided operands, seen in the edge cases, spill the
    large tiles even when aligned (the matrix showed it for the 64-row, 4-warp tiles)."""
    if named_args["stride_ak"] != 1 or named_args["stride_bk"] != 1:
        return False
    ptrs_ok = all(named_args[p].data_ptr() % 16 == 0 for p in ("a_ptr", "b_ptr"))
    return ptrs_ok and all(named_args[s] % 16 == 0 for s in ("stride_am", "stride_bn", "K"))


def prune_configs(configs, named_args, **kwargs):
    """Tiles no taller than M needs (decode keeps its 16-64-row tiles), no short tiles for large M, split-K only
    where :func:`splits_k` offers it, and for an unaligned launch only tiles that fit in registers without the
    pipeline."""
    m = named_args["M"]
    tall = next_power_of_2(max(m, 16))
    split_ok = splits_k(m, named_args["N"], named_args["K"])
    kept = [c for c in configs if c.kwargs["BLOCK_M"] <= tall and (m < 1024 or c.kwargs["BLOCK_M"] >= 64)
            and (split_ok or c.kwargs.get("SPLIT_K", 1) == 1)]
    if not _aligned(named_args):
        kept = [c for c in (kept or configs) if _elements_per_thread(c) <= _UNPIPELINED_ELEMENTS]
    return kept or list(configs)


@triton.jit
def fused_epilogue(acc, bias_ptr, offs_n, n_ok, stride_bias, EPILOGUE: tl.constexpr):
    if EPILOGUE >= 1:
        bias = tl.load(bias_ptr + offs_n * stride_bias, mask=n_ok, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    if EPILOGUE == 2:
        acc = tl.maximum(acc, 0.0)
    elif EPILOGUE == 3:
        # 0.5 x (1 + tanh(y)) = x * sigmoid(2y), y = sqrt(2/pi) (x + 0.044715 x^3): no tanh (libdevice, which
        # the interpreter lacks) and no cancellation in 1 + tanh(y) for negative x
        acc = acc * _sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    elif EPILOGUE == 4:
        acc = acc * _sigmoid(acc)
    return acc


@triton.jit
def _sigmoid(t):
    """1 / (1 + exp(-t)): for t below about -88 exp overflows to inf and the result is 0, the right limit. One
    exp and one division: the two-branch form held both in registers and spilled the 128 x 256 tile on sm_80."""
    return 1.0 / (1.0 + tl.exp(-t))


@triton.jit
def grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Program ``pid``'s output tile (row block, column block): programs that share a band of GROUP_M row
    blocks walk the column blocks together, so the band's rows of a stay in L2 while they are used."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % group_m, (pid % per_group) // group_m


@triton.jit
def _matmul_kernel(
    a_ptr, b_ptr, bias_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk, stride_bias, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPILOGUE: tl.constexpr, RNE_BF16: tl.constexpr, UPCAST_DOT: tl.constexpr, SPLIT_K: tl.constexpr = 1,
):  # fmt: skip
    """One output tile over K, or with SPLIT_K > 1 over program_id(1)'s range of K (whole blocks; ``split`` of
    them once rounded, as the launcher's grid counts them): its fp32 partial goes to the workspace
    ``ws [split, M, N]`` and the tile's last split sums them, then applies the epilogue (kernels/splitk.py)."""
    pid = tl.program_id(0)
    pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    if SPLIT_K == 1:
        k_lo = 0
        k_hi = K
    else:
        k_per = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT_K) * BLOCK_K
        k_lo = tl.program_id(1) * k_per
        k_hi = min(K, k_lo + k_per)
    # rows and columns past the edge load a valid row/column again (stores are masked): no mask on M or N in
    # the main loop. int64 row offsets: a row stride times M passes 2**31 for large padded operands.
    rm = (offs_m % M).to(tl.int64)
    rn = (offs_n % N).to(tl.int64)
    a_ptrs = a_ptr + rm[:, None] * stride_am + (k_lo + offs_k)[None, :] * stride_ak
    b_ptrs = b_ptr + rn[None, :] * stride_bn + (k_lo + offs_k)[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        k_left = k_hi - k  # the last block may be partial: masked loads give it zeros
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if UPCAST_DOT:  # the interpreter's dot reads bf16 as raw bits; in fp32 the products are the same, exact
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    n_ok = offs_n < N
    mn_ok = (offs_m < M)[:, None] & n_ok[None, :]
    if SPLIT_K > 1:
        part_ptrs = ws_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(part_ptrs + tl.program_id(1).to(tl.int64) * M * N, acc, mask=mn_ok)
        last, acc = split_k_total(part_ptrs, M * N, mn_ok, cnt_ptr, pid, tl.cdiv(K, k_per), SPLIT_K, False)
    else:
        last = True
    if last:
        acc = fused_epilogue(acc, bias_ptr, offs_n, n_ok, stride_bias, EPILOGUE)
        if RNE_BF16:
            acc = round_to_bf16(acc)
        c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mn_ok)


_matmul_autotuned = triton.autotune(
    configs=[c.as_triton() for c in CONFIGS + SPLIT_CONFIGS], key=["M", "N", "K"],
    prune_configs_by={"early_config_prune": prune_configs},
)(_matmul_kernel)
_matmul_launch = FastLaunch(CachedAutotune(_matmul_autotuned))


def epilogue_code(epilogue: int | str) -> int:
    code = EPILOGUES.index(epilogue) if isinstance(epilogue, str) and epilogue in EPILOGUES else epilogue
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code < len(EPILOGUES):
        raise ValueError(f"matmul: epilogue must be one of {list(EPILOGUES)} or its index, got {epilogue!r}")
    return code


def check_operands(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, c: torch.Tensor) -> None:
    if a.dim() != 2 or b.dim() != 2 or b.shape[1] != a.shape[1] or bias.shape != (b.shape[0],) \
            or c.shape != (a.shape[0], b.shape[0]):
        raise ValueError(f"matmul: expected a [M, K], b [N, K], bias [N], c [M, N]; got a {tuple(a.shape)}, "
                         f"b {tuple(b.shape)}, bias {tuple(bias.shape)}, c {tuple(c.shape)}")


_PLANS = Plans()


def matmul(*, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, c: torch.Tensor, epilogue: int | str) -> None:
    """Triton GEMM ``c = act(a @ b.T + bias)``; any strides."""
    sig = (signature(a, b, bias, c), type(epilogue), epilogue)
    _PLANS.run(sig, lambda: plan(a, b, bias, c, epilogue), a, b, bias, c)


def plan(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, c: torch.Tensor, epilogue: int | str):
    """Checks the operands and works out the launch :func:`matmul` makes for their signature:
    ``launch(a, b, bias, c)`` (kernels.common.Plans)."""
    check_operands(a, b, bias, c)
    code = epilogue_code(epilogue)
    if a.dtype not in (torch.float16, torch.bfloat16) or b.dtype != a.dtype:
        raise ValueError(f"matmul: a and b must both be fp16 or both bf16, got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0:
        return no_launch
    interp = interpreted(a)
    # under the interpreter a split of 2 where K has two blocks, so CPU runs check it
    split_ok = splits_k(m, n, k) or interp
    partials, tiles = max(_SPLITS) * m * n, cdiv(m, 16) * cdiv(n, 16)
    scalars = (m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), bias.stride(0), c.stride(0), c.stride(1))
    if interp:  # one large tile, no autotuning (it would time nothing)
        cfg = MatmulConfig.interpreted(m, n, k)
        split = 2 if m <= _SPLIT_M[1] and k > cfg.block_k else 1
        grid = (cdiv(m, cfg.block_m) * cdiv(n, cfg.block_n), _splits(k, cfg.block_k, split))
        launcher = _matmul_kernel
        kwargs = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
                      EPILOGUE=code, RNE_BF16=needs_bf16_rounding(c), UPCAST_DOT=a.dtype == torch.bfloat16,
                      SPLIT_K=split, num_warps=cfg.num_warps, num_stages=cfg.num_stages)  # fmt: skip
    else:
        launcher = _matmul_launch
        kwargs = dict(EPILOGUE=code, RNE_BF16=False, UPCAST_DOT=False)

        def grid(meta):
            tiles = cdiv(m, meta["BLOCK_M"]) * cdiv(n, meta["BLOCK_N"])
            return (tiles, _splits(k, meta["BLOCK_K"], meta.get("SPLIT_K", 1)))

    def launch(a, b, bias, c):
        ws, cnt = scratch(a.device, partials, tiles) if split_ok else unused(a.device)
        launcher[grid](a, b, bias, c, ws, cnt, *scalars, **kwargs)
    return launch


def _splits(k: int, block_k: int, split_k: int) -> int:
    """K ranges a launch of ``split_k`` makes once each is rounded to whole blocks (as the kernel counts them)."""
    if split_k == 1 or k == 0:
        return 1
    return cdiv(k, cdiv(cdiv(k, block_k), split_k) * block_k)


def _activation(z: torch.Tensor, code: int) -> torch.Tensor:
    if code == 2:
        return torch.relu(z)
    if code == 3:  # gelu, tanh approximation, as x * sigmoid(2y): torch's 0.5x(1 + tanh(y)) cancels for x < -5
        return z * torch.sigmoid(1.5957691216057308 * (z + 0.044715 * z * z * z))
    if code == 4:
        return torch.nn.functional.silu(z)
    return z


def matmul_ref(*, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, c: torch.Tensor, epilogue: int | str) -> None:
    """Plain torch in fp32 (or the inputs' precision if higher): the product, the bias and the activation,
    one rounding into c. Called with 16-bit tensors (the eager baseline) it upcasts them too, so as a speed
    baseline it is an fp32 GEMM: the `torch` peer is PyTorch's own 16-bit path."""
    check_operands(a, b, bias, c)
    code = epilogue_code(epilogue)
    acc = torch.promote_types(a.dtype, torch.float32)
    z = a.to(acc) @ b.to(acc).T
    if code >= 1:
        z = z + bias.to(acc)
    c.copy_(_activation(z, code))


def matmul_torch(*, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, c: torch.Tensor,
                 epilogue: int | str) -> torch.Tensor:
    """What PyTorch code writes: ``F.linear`` in the inputs' dtype (cuBLAS, bias added before its one rounding),
    then the activation as its own kernel in that dtype. Returns its own output (no copy is timed)."""
    code = epilogue_code(epilogue)
    z = torch.nn.functional.linear(a, b, bias if code >= 1 else None)
    return torch.nn.functional.gelu(z, approximate="tanh") if code == 3 else _activation(z, code)


# ---------------------------------------------------------------------------------------------------
# CUDA C++ backend: the hand-written Ampere-style Tensor Core GEMM (mma.sync m16n8k16 with fp32 accumulators,
# operands from XOR-swizzled shared memory through ldmatrix, a cp.async multi-stage pipeline, grouped block
# rasterisation, the epilogue fused in fp32 registers). Its source is kernels/matmul.cu, next to this module: CUDA
# C++ in a .cu file that editors, clang-format and nvcc read as such. It includes no torch header, so
# `nvcc -arch=sm_80 -cubin kernels/matmul.cu` compiles it alone (the static check); _BINDING_SRC is the only
# part that sees torch. Like rmsnorm's backend: built per device capability with load_inline, launched on torch's
# current stream.

CUDA_SRC = cuda_source(Path(__file__).parent / "matmul.cu")

_BINDING_SRC = r"""
#include <torch/extension.h>

#include <stdexcept>
#include <string>

extern "C" const char* kh_matmul_launch(int dtype, void* c, const void* a, const void* b, const void* bias,
                                        int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                                        int64_t bias_stride, int epilogue, int config, int num_sms, void* stream);

// The Python launcher has checked shapes, dtypes, devices and that every row is contiguous.
void matmul_fwd(torch::Tensor c, torch::Tensor a, torch::Tensor b, torch::Tensor bias, int64_t epilogue,
                int64_t config, int64_t num_sms, int64_t stream) {
  const auto t = a.scalar_type();
  const int dtype = t == at::kHalf ? 1 : t == at::kBFloat16 ? 2 : -1;
  if (dtype < 0) throw std::invalid_argument("matmul_cuda: a must be fp16 or bf16");
  const char* err = kh_matmul_launch(dtype, c.data_ptr(), a.data_ptr(), b.data_ptr(), bias.data_ptr(), a.size(0),
                                     b.size(0), a.size(1), a.stride(0), b.stride(0), c.stride(0), bias.stride(0),
                                     static_cast<int>(epilogue), static_cast<int>(config),
                                     static_cast<int>(num_sms), reinterpret_cast<void*>(stream));
  if (err != nullptr) throw std::runtime_error(std::string("matmul_cuda: ") + err);
}
"""

# The CUDA kernel's tile configs (block tile, then warps), by the index matmul_cuda's `config` takes; None: by
# shape (CUDA_SRC's launch_path says how). Inputs that cp.async cannot copy 16 bytes at a time (K or a row stride
# not a multiple of 8, a base pointer not 16-byte aligned) take the element-by-element copy, which runs the third
# config for the first two.
CUDA_CONFIGS = ("128x256x32/8w", "128x128x32/4w", "128x128x32/8w", "64x64x64/4w")


@functools.cache
def _cuda_module(capability: tuple[int, int]):
    return load_cuda_extension("kh_matmul_cuda", _BINDING_SRC, CUDA_SRC, ["matmul_fwd"], capability)


def build_cuda() -> None:
    """The harness's build hook: compile for the current device once, so a failed build is a fallback with
    its reason (the triton backend runs instead) rather than an error in every test."""
    _cuda_module(torch.cuda.get_device_capability())


def matmul_cuda(*, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, c: torch.Tensor, epilogue: int | str,
                config: int | None = None) -> None:
    """CUDA C++ GEMM ``c = act(a @ b.T + bias)``: rows may be padded (any row stride, bias any stride) but a, b and
    c must each be contiguous in their last dimension. ``config`` forces one of :data:`CUDA_CONFIGS` (tests)."""
    check_operands(a, b, bias, c)
    code = epilogue_code(epilogue)
    if a.dtype not in (torch.float16, torch.bfloat16) or any(t.dtype != a.dtype for t in (b, bias, c)):
        raise ValueError(f"matmul_cuda: a, b, bias and c must share one of fp16/bf16; got {a.dtype}, {b.dtype}, "
                         f"{bias.dtype}, {c.dtype}")
    for name, t in (("a", a), ("b", b), ("c", c)):
        if t.stride(1) != 1:
            raise ValueError(f"matmul_cuda: {name} must be contiguous in its last dimension (strides "
                             f"{tuple(t.stride())}); this backend supports contiguous and padded rows only (a and b "
                             "K-major), use the triton backend")
    if not all(t.is_cuda and t.device == a.device for t in (b, bias, c)) or not a.is_cuda:
        raise ValueError("matmul_cuda: a, b, bias and c must be on one CUDA device")
    if config is not None and config not in range(len(CUDA_CONFIGS)):
        raise ValueError(f"matmul_cuda: config must be None or an index into {CUDA_CONFIGS}, got {config!r}")
    if a.shape[0] == 0 or b.shape[0] == 0:
        return
    index = a.device.index if a.device.index is not None else torch.cuda.current_device()
    module = _cuda_module(cuda_capability(a.device))
    with torch.cuda.device(index):
        module.matmul_fwd(c, a, b, bias, code, -1 if config is None else config, sm_count(a.device),
                          torch.cuda.current_stream(index).cuda_stream)
