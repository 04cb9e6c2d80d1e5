"""FP8 GEMM with scales: Triton kernel (autotuned on a GPU), torch reference and a ``torch._scaled_mm`` peer.

``c = (a @ b.T) * scale_a * scale_b.T`` with a ``[M, K]`` and b ``[N, K]`` in float8 e4m3 (b stored like an
``nn.Linear`` weight, as vLLM's ``cutlass_scaled_mm`` takes it), fp32 scales and a bf16 ``c [M, N]``. The scales
are per tensor (``[1, 1]`` each) or per row (``scale_a [M, 1]``, one per token, and ``scale_b [N, 1]``, one per
output channel), vLLM's two static/dynamic FP8 schemes. Products of e4m3 values are exact in fp32; the sum is
accumulated in fp32 and scaled once, then rounded to c's dtype.

Accumulation. Hopper's FP8 tensor-core instructions add into an accumulator narrower than fp32; summed over a
long K the error grows (DeepSeek-V3's report measured about 14 bits kept). As cuBLASLt does without its fast
accumulation flag (``torch._scaled_mm``'s default), the kernel promotes every ``BLOCK_K`` products into an fp32
accumulator (``max_num_imprecise_acc``); ``fast_accum=True`` accumulates the whole K in the instruction's own
accumulator instead, the trade vLLM's fast path makes.

Two kernels. Large M on sm_90+, with every operand TMA-ready (16-byte aligned rows), goes to a persistent TMA
kernel that promotes once per 128-deep block, written out in the kernel (see TMA_CONFIGS for why and what it
measured); everything else (decode, padded or unaligned rows, sm_89, ``promote_every``) to the pointer kernel,
which promotes every 64 products through Triton's ``max_num_imprecise_acc``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import (
    CachedAutotune,
    Plans,
    cdiv,
    interpreted,
    needs_bf16_rounding,
    no_launch,
    round_to_bf16,
    signature,
)
from kernels.fastlaunch import FastLaunch
from kernels.matmul import MatmulConfig, grouped_tile, prune_configs
from kernels.matmul_tma import PersistentConfig, descriptor_path, launch_persistent, persistent_plan, prune_boxes

_GROUP_M = 8

# The autotuner's candidates on a GPU (sm_90 and later: FP8 tensor cores). Deep K blocks (128 e4m3 values are
# 128 bytes, the width a 16-bit GEMM gets from 64): the tile's bytes match the 16-bit GEMM's. The promoted
# accumulation holds a second fp32 accumulator (the chunk's), so no tile is wider than 128 x 128 per 8 warps:
# 128 x 256 would hold 256 accumulator registers per thread. Small-M tiles with deep K for decode.
CONFIGS = (
    MatmulConfig(128, 128, 128, _GROUP_M, 8, 4),
    MatmulConfig(128, 128, 64, _GROUP_M, 4, 4),
    MatmulConfig(128, 64, 128, _GROUP_M, 4, 4),
    MatmulConfig(64, 128, 128, _GROUP_M, 4, 4),
    MatmulConfig(64, 64, 256, _GROUP_M, 4, 3),
    MatmulConfig(32, 64, 256, _GROUP_M, 4, 4),
    MatmulConfig(16, 64, 256, _GROUP_M, 4, 4),
    MatmulConfig(16, 128, 128, _GROUP_M, 4, 4),
    # Register-sized tiles for launches Triton cannot prove 16-byte aligned (K = 129, a padded row of odd
    # stride): their loads are not pipelined through shared memory, and every tile above spills then
    # (`harness matrix`); kernels.matmul.prune_configs keeps only these for such a launch.
    MatmulConfig(32, 64, 64, _GROUP_M, 4, 2),
    MatmulConfig(16, 64, 64, _GROUP_M, 4, 2),
)


@triton.jit
def _matmul_fp8_kernel(
    a_ptr, b_ptr, sa_ptr, sb_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bn, stride_bk, stride_sa, stride_sb, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    RNE_BF16: tl.constexpr, IMPRECISE_ACC: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    pid_m, pid_n = grouped_tile(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # rows and columns past the edge load a valid row/column again (stores are masked), as in kernels.matmul
    rm = (offs_m % M).to(tl.int64)
    rn = (offs_n % N).to(tl.int64)
    a_ptrs = a_ptr + rm[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + rn[None, :] * stride_bn + offs_k[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMPRECISE_ACC)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    # stride 0 broadcasts a per-tensor scale; a per-row scale is read once per tile row/column
    sa = tl.load(sa_ptr + rm * stride_sa)
    sb = tl.load(sb_ptr + rn * stride_sb)
    acc = acc * sa[:, None] * sb[None, :]
    if RNE_BF16:
        acc = round_to_bf16(acc)
    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m < M)[:, None] & (offs_n < N)[None, :])


# Large M on sm_90+ (kernels.matmul_tma's rule): persistent over the SMs, operands fed by TMA, and the promotion
# written out as ``acc += tl.dot(a, b)``: each 128-deep block's products summed in the instruction's accumulator
# (a fresh one per block), then added into the fp32 total. Triton ends each block's wgmma group with its own wait
# before the add. Through max_num_imprecise_acc instead, the adds sit inside the asynchronous group: compiled for
# sm_90, ptxas serialises every wgmma of the kernel for that at an interval of 64 (its warning C7514) and injects
# a wait at 128 (C7517). On the H100 (reports/h100/experiments/fp8-overlap/) this kernel at 4 stages ran 0.68x
# _scaled_mm at 4096^3 and 0.74-0.77x at the larger shapes, where the pointer kernel ran 0.57-0.62x, with an
# error no larger than _scaled_mm's own. A 128 x 128 x 128 stage is 32 KiB of e4m3, so 5 stages and c's 32 KiB
# staging tile, or 6 with it stored in halves, still fit 227 KiB.
TMA_CONFIGS = (
    PersistentConfig(128, 128, 128, 8, 4, False),
    PersistentConfig(128, 128, 128, 8, 5, False),
    PersistentConfig(128, 128, 128, 8, 6, True),
)
# The products per promotion on that path: one block (the configs above all have BLOCK_K = 128).
TMA_PROMOTE_EVERY = 128


@triton.jit
def _scaled(acc, sa, sb_ptr, offs_n, N, stride_sb, RNE_BF16: tl.constexpr):
    sb = tl.load(sb_ptr + offs_n * stride_sb, mask=offs_n < N, other=0.0)
    acc = acc * sa[:, None] * sb[None, :]
    if RNE_BF16:
        acc = round_to_bf16(acc)
    return acc


@triton.jit
def _fp8_persistent_kernel(
    a_desc, b_desc, c_desc, sa_ptr, sb_ptr, M, N, K, stride_sa, stride_sb,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr, NUM_SMS: tl.constexpr, RNE_BF16: tl.constexpr, PROMOTE: tl.constexpr,
):  # fmt: skip
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=False):
        pid_m, pid_n = grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BLOCK_K)):  # TMA zero-fills past M, N and K: no masks
            a = a_desc.load([off_m, ki * BLOCK_K])
            b = b_desc.load([off_n, ki * BLOCK_K])
            if PROMOTE:
                acc += tl.dot(a, b.T)
            else:  # the whole K in the instruction's accumulator (fast_accum)
                acc = tl.dot(a, b.T, acc)
        offs_m = off_m + tl.arange(0, BLOCK_M)
        sa = tl.load(sa_ptr + offs_m * stride_sa, mask=offs_m < M, other=0.0)
        if EPILOGUE_SUBTILE:
            acc0, acc1 = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            offs_n0 = off_n + tl.arange(0, BLOCK_N // 2)
            acc0 = _scaled(acc0, sa, sb_ptr, offs_n0, N, stride_sb, RNE_BF16)
            c_desc.store([off_m, off_n], acc0.to(c_desc.dtype))
            acc1 = _scaled(acc1, sa, sb_ptr, offs_n0 + BLOCK_N // 2, N, stride_sb, RNE_BF16)
            c_desc.store([off_m, off_n + BLOCK_N // 2], acc1.to(c_desc.dtype))  # TMA clips past M and N
        else:
            acc = _scaled(acc, sa, sb_ptr, off_n + tl.arange(0, BLOCK_N), N, stride_sb, RNE_BF16)
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


_fp8_persistent_launch = CachedAutotune(triton.autotune(
    configs=[c.as_triton() for c in TMA_CONFIGS], key=["M", "N", "K", "PROMOTE"],
    prune_configs_by={"early_config_prune": prune_boxes},
)(_fp8_persistent_kernel))


def _prune(configs, named_args, **kwargs):
    """kernels.matmul's pruning, and no block shallower than the promotion interval: Triton promotes within one
    dot, so a BLOCK_K below the interval would accumulate the whole K in the instruction's accumulator."""
    every = kwargs.get("IMPRECISE_ACC", named_args.get("IMPRECISE_ACC"))
    deep = [c for c in configs if every is None or c.kwargs["BLOCK_K"] >= every]
    return prune_configs(deep or list(configs), named_args, **kwargs)


_matmul_fp8_autotuned = triton.autotune(
    configs=[c.as_triton() for c in CONFIGS], key=["M", "N", "K", "IMPRECISE_ACC"],
    prune_configs_by={"early_config_prune": _prune},
)(_matmul_fp8_kernel)
_matmul_fp8_launch = FastLaunch(CachedAutotune(_matmul_fp8_autotuned))

_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _scale_stride(scale: torch.Tensor, rows: int, name: str) -> int:
    """The stride between consecutive rows' scales: 0 for one per-tensor scale."""
    if scale.dtype != torch.float32 or scale.dim() != 2 or scale.shape[1] != 1 or scale.shape[0] not in (1, rows):
        raise ValueError(f"matmul_fp8: {name} must be fp32 [1, 1] (per tensor) or [{rows}, 1] (per row), got "
                         f"{scale.dtype} {list(scale.shape)}")
    return scale.stride(0) if scale.shape[0] > 1 else 0


def _check(a, b, scale_a, scale_b, c) -> tuple[int, int]:
    if a.dim() != 2 or b.dim() != 2 or b.shape[1] != a.shape[1] or c.shape != (a.shape[0], b.shape[0]):
        raise ValueError(f"matmul_fp8: expected a [M, K], b [N, K], c [M, N]; got a {tuple(a.shape)}, "
                         f"b {tuple(b.shape)}, c {tuple(c.shape)}")
    return _scale_stride(scale_a, a.shape[0], "scale_a"), _scale_stride(scale_b, b.shape[0], "scale_b")


def matmul_fp8(*, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, c: torch.Tensor,
               fast_accum: bool = False, promote_every: int | None = None) -> None:
    """Triton FP8 GEMM ``c = (a @ b.T) * scale_a * scale_b.T``; a and b K-major (any row stride).

    ``promote_every`` (a tuning experiment: reports/h200/experiments/fp8/fp8_probe.py --promote) replaces the
    products per promotion into the fp32 accumulator, a multiple of the FP8 instruction's depth of 32; it always
    runs the pointer kernel."""
    sig = _key(a, b, scale_a, scale_b, c, fast_accum, promote_every)
    _PLANS.run(sig, lambda: _plan(sig, a, b, scale_a, scale_b, c, bool(fast_accum), promote_every),
               a, b, scale_a, scale_b, c)


# A call's plan per call signature (kernels.common.Plans): the checks, the route, the grid and every scalar
# argument worked out once. The TMA route is planned after its first call, once the autotuner has picked.
_PLANS = Plans()


def _key(a, b, scale_a, scale_b, c, fast_accum, promote_every) -> tuple:
    return signature(a, b, scale_a, scale_b, c), bool(fast_accum), promote_every


def plan_for(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, c: torch.Tensor,
             fast_accum: bool = False):
    """The plan :func:`matmul_fp8` keeps for these operands, or None before a call has made one (for
    kernels.common.Plans.delegate)."""
    return _PLANS.get(_key(a, b, scale_a, scale_b, c, fast_accum, None))


def _plan(sig, a, b, scale_a, scale_b, c, fast_accum: bool, promote_every: int | None):
    """Checks the operands and returns ``launch(a, b, scale_a, scale_b, c)`` for their signature, or None where it
    launched the TMA route itself (planned then from the autotuner's pick)."""
    if promote_every is not None and (promote_every <= 0 or promote_every % 32):
        raise ValueError(f"matmul_fp8: promote_every {promote_every} must be a positive multiple of 32")
    if promote_every is not None and fast_accum:
        raise ValueError("matmul_fp8: promote_every and fast_accum exclude each other")
    stride_sa, stride_sb = _check(a, b, scale_a, scale_b, c)
    if a.dtype not in _FP8 or b.dtype not in _FP8:
        raise ValueError(f"matmul_fp8: a and b must be float8 (e4m3 or e5m2), got {a.dtype} and {b.dtype}")
    if a.stride(1) != 1 or b.stride(1) != 1:
        # FP8 tensor-core operands must be K-major in shared memory: a K-major load keeps it so without a
        # transpose, which is what quantised checkpoints store
        raise ValueError(f"matmul_fp8: a and b must be contiguous along K (strides {tuple(a.stride())} and "
                         f"{tuple(b.stride())}); transpose the weight once when loading it")
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0:
        return no_launch
    if promote_every is None and descriptor_path(a, b, c, TMA_CONFIGS):
        tail = (m, n, k, stride_sa, stride_sb)
        constexprs = dict(RNE_BF16=needs_bf16_rounding(c) and interpreted(a), PROMOTE=not fast_accum)
        cfg = launch_persistent(_fp8_persistent_kernel, _fp8_persistent_launch, a, b, c, scale_a, scale_b, *tail,
                                **constexprs)
        if cfg is not None:  # a GPU launch
            persistent = persistent_plan(_fp8_persistent_launch.fast, cfg, a, b, c, constexprs)
            _PLANS.keep(sig, lambda a, b, scale_a, scale_b, c: persistent(a, b, c, scale_a, scale_b, *tail))
        return None
    scalars = (m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), stride_sa, stride_sb, c.stride(0),
               c.stride(1))
    if interpreted(a):  # one large tile, no autotuning; the interpreter's dot is exact fp32
        cfg = MatmulConfig.interpreted(m, n, k)
        grid = (cdiv(m, cfg.block_m) * cdiv(n, cfg.block_n),)
        launcher = _matmul_fp8_kernel
        kwargs = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
                      RNE_BF16=needs_bf16_rounding(c), IMPRECISE_ACC=None, num_warps=cfg.num_warps,
                      num_stages=cfg.num_stages)  # fmt: skip
    else:
        def grid(meta):
            return (cdiv(m, meta["BLOCK_M"]) * cdiv(n, meta["BLOCK_N"]),)
        launcher = _matmul_fp8_launch
        # None: Triton's default on sm_90, the whole K in the instruction's accumulator; a number: promoted every
        # that many products. The autotuner fills BLOCK_K, so the promotion interval is passed as one block.
        kwargs = dict(RNE_BF16=False, IMPRECISE_ACC=None if fast_accum else promote_every or _PROMOTE_EVERY)

    def launch(a, b, scale_a, scale_b, c):
        launcher[grid](a, b, scale_a, scale_b, c, *scalars, **kwargs)
    return launch


# Products per promotion into the fp32 accumulator: one 64-deep wgmma chunk pair, no more than the smallest
# BLOCK_K above, so every block is split the same way whatever config wins.
_PROMOTE_EVERY = 64


def matmul_fp8_ref(*, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                   c: torch.Tensor) -> None:
    """Dequantised in fp32 (or the precision the harness passes, if higher): the exact products summed in
    that precision, scaled, one rounding into c."""
    _check(a, b, scale_a, scale_b, c)
    acc = torch.promote_types(scale_a.dtype, torch.float32)
    c.copy_((a.to(acc) @ b.to(acc).T) * scale_a.to(acc) * scale_b.to(acc).T)


def matmul_fp8_torch(*, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                     c: torch.Tensor) -> torch.Tensor:
    """``torch._scaled_mm`` (cuBLASLt per tensor, CUTLASS row-wise), its default exact accumulation, into its own
    output. Row-wise scales go as ``scale_a [M, 1]`` and ``scale_b [1, N]``, the layout it requires."""
    per_row = scale_a.shape[0] > 1 or scale_b.shape[0] > 1
    sa = scale_a.expand(a.shape[0], 1).contiguous() if per_row else scale_a.reshape(())
    sb = scale_b.expand(b.shape[0], 1).reshape(1, -1).contiguous() if per_row else scale_b.reshape(())
    return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=c.dtype)
