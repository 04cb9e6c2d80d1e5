"""Hopper GEMM experiment: TMA-descriptor variants of kernels.matmul, checked and timed against it and cuBLAS.

On an H100/H200, from the repository root (about 3-4 minutes, most of it compiling and autotuning):

    python3 bench/experiments/matmul_tma.py --out DIR

It checks each variant against the fp32 reference (|err| <= 1e-5 + 1e-6 K + 1.6e-2 |ref|, the spec's bf16
bound), times it with the harness's engine (L2 flushed, CUDA events), prints a table (shape, variant, median
us, TFLOP/s, ratio to cuBLAS = cuBLAS time / variant time, the autotuned config) and writes
DIR/matmul_tma.json. One failing (variant, shape) is recorded with its error and the others go on; past
--budget-s no new case starts (they are recorded as skipped).

On a CPU, the kernels' numerics under the Triton interpreter (small shapes, every config, no timing):

    TRITON_INTERPRET=1 python3 bench/experiments/matmul_tma.py --selftest

and, without a GPU, every config compiled for sm_90 (registers, spills, shared memory; harness.aot):

    python3 bench/experiments/matmul_tma.py --aot sm_90

Same GEMM as kernels.matmul: ``c = act(a @ b.T + bias)``, a [M, K], b [N, K] (nn.Linear weight), bias [N],
fp32 accumulation, epilogue codes 0 none, 1 bias, 2 bias+relu, 3 bias+gelu(tanh), 4 bias+silu. Contiguous
operands only (TMA wants 16-byte aligned bases and row strides: K and N multiples of 8 for 16-bit types).

Variants (each autotuned on (M, N, K, EPILOGUE); the winning config is recorded):
  tma         one program per output tile, grouped rasterization, a/b tiles through host-side TMA tensor
              descriptors (triton.tools.tensor_descriptor.TensorDescriptor), c stored through a descriptor.
  persistent  one program per SM walking tiles with stride NUM_SMS (tutorial 09's layout), host descriptors,
              loop flattening (tl.range(flatten=True)) where this Triton has it; optional epilogue subtiling
              (two half-width stores: less shared memory for c's staging, room for a 4th stage).
  persistent_ws  the same with device-side descriptors (tl.make_tensor_descriptor, triton.set_allocator) and
              tl.range(warp_specialize=True), num_warps=4: on sm_90 Triton 3.6/3.9 then build a producer
              warp group and two consumer groups (12 warps). (Compiled ahead of time for sm_90: with host
              descriptors the warp-specialization pass fails; with num_warps=8 it does nothing.)
  swapab      for small M (decode): c.T = b @ a.T, so N fills wgmma's 64/128-row M side and M (16..128) is
              the narrow side; optional split-K over a grid axis (fp32 partials, then a reduce+epilogue
              kernel). Tried with split_k in {1, 2, 4, 8}, each its own row ("swapab_sk4").
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")

# ----------------------------------------------------------------------------------------- feature detection

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except Exception:  # noqa: BLE001 - older Triton: the descriptor variants are reported unavailable
    TensorDescriptor = None


def _range_kwargs() -> set[str]:
    try:
        return set(inspect.signature(tl.range.__init__).parameters)
    except (TypeError, ValueError):
        return set()


_RANGE_KW = _range_kwargs()
FEATURES = {
    "triton": triton.__version__,
    "host_tensor_descriptor": TensorDescriptor is not None,
    "device_make_tensor_descriptor": hasattr(tl, "make_tensor_descriptor"),
    "set_allocator": hasattr(triton, "set_allocator"),
    "range_flatten": "flatten" in _RANGE_KW,
    "range_warp_specialize": "warp_specialize" in _RANGE_KW,
}
HAS_FLATTEN = FEATURES["range_flatten"]
HAS_WS = FEATURES["range_warp_specialize"]

# ----------------------------------------------------------------------------------------- shared jit helpers


@triton.jit
def _sigmoid(t):
    return 1.0 / (1.0 + tl.exp(-t))


@triton.jit
def _epilogue(acc, bias_ptr, offs_n, n_ok, stride_bias, EPILOGUE: tl.constexpr):
    """kernels.matmul._epilogue: bias, then relu / gelu(tanh) as x * sigmoid(2y) / silu."""
    if EPILOGUE >= 1:
        bias = tl.load(bias_ptr + offs_n * stride_bias, mask=n_ok, other=0.0).to(tl.float32)
        acc = acc + bias[None, :]
    if EPILOGUE == 2:
        acc = tl.maximum(acc, 0.0)
    elif EPILOGUE == 3:
        acc = acc * _sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    elif EPILOGUE == 4:
        acc = acc * _sigmoid(acc)
    return acc


@triton.jit
def _round_to_bf16(y):
    """Interpreter only (its fp32 -> bf16 cast truncates): round to nearest even, still fp32."""
    bits = y.to(tl.uint32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return ((bits >> 16) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _grouped_pid(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    per_group = GROUP_M * num_pid_n
    first_m = (tile_id // per_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % per_group) % group_m
    pid_n = (tile_id % per_group) // group_m
    return pid_m, pid_n


@triton.jit
def _finish(acc, bias_ptr, offs_n, N, stride_bias, EPILOGUE: tl.constexpr, RNE_BF16: tl.constexpr):
    acc = _epilogue(acc, bias_ptr, offs_n, offs_n < N, stride_bias, EPILOGUE)
    if RNE_BF16:
        acc = _round_to_bf16(acc)
    return acc


# ----------------------------------------------------------------------------------------- variant 1: tma


@triton.jit
def _tma_kernel(
    a_desc, b_desc, c_desc, bias_ptr, M, N, K, stride_bias,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPILOGUE: tl.constexpr, RNE_BF16: tl.constexpr, UPCAST_DOT: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = _grouped_pid(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    k_tiles = tl.cdiv(K, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, k_tiles):  # TMA zero-fills outside [M, K] / [N, K]: no masks
        a = a_desc.load([off_m, k * BLOCK_K])
        b = b_desc.load([off_n, k * BLOCK_K])
        if UPCAST_DOT:  # the interpreter's dot reads bf16 as raw bits; in fp32 the products are exact
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b.T, acc)
    acc = _finish(acc, bias_ptr, off_n + tl.arange(0, BLOCK_N), N, stride_bias, EPILOGUE, RNE_BF16)
    c_desc.store([off_m, off_n], acc.to(c_desc.dtype))  # TMA clips rows/columns past M/N


# ----------------------------------------------------------------------------------------- variant 2: persistent


@triton.jit
def _persistent_tile(
    tile_id, tile_id_c, a_desc, b_desc, c_desc, bias_ptr, M, N, K, stride_bias,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr, NUM_SMS: tl.constexpr, EPILOGUE: tl.constexpr, RNE_BF16: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):  # fmt: skip
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = _grouped_pid(tile_id, num_pid_m, num_pid_n, GROUP_M)
    off_am = pid_m * BLOCK_M
    off_bn = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_am, ki * BLOCK_K])
        b = b_desc.load([off_bn, ki * BLOCK_K])
        if UPCAST_DOT:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b.T, acc)
    # tutorial 09: the epilogue recomputes its tile from a second counter, so no value crosses from the loads'
    # prologue to the epilogue (a pipeliner limitation on some targets)
    tile_id_c += NUM_SMS
    pid_m, pid_n = _grouped_pid(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
    off_cm = pid_m * BLOCK_M
    off_cn = pid_n * BLOCK_N
    if EPILOGUE_SUBTILE:  # two BLOCK_M x BLOCK_N/2 stores: half the shared-memory staging of c
        acc3 = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        acc0, acc1 = tl.split(acc3)
        offs_n0 = off_cn + tl.arange(0, BLOCK_N // 2)
        acc0 = _finish(acc0, bias_ptr, offs_n0, N, stride_bias, EPILOGUE, RNE_BF16)
        c_desc.store([off_cm, off_cn], acc0.to(c_desc.dtype))
        acc1 = _finish(acc1, bias_ptr, offs_n0 + BLOCK_N // 2, N, stride_bias, EPILOGUE, RNE_BF16)
        c_desc.store([off_cm, off_cn + BLOCK_N // 2], acc1.to(c_desc.dtype))
    else:
        acc = _finish(acc, bias_ptr, off_cn + tl.arange(0, BLOCK_N), N, stride_bias, EPILOGUE, RNE_BF16)
        c_desc.store([off_cm, off_cn], acc.to(c_desc.dtype))
    return tile_id_c


@triton.jit
def _persistent_kernel(
    a_desc, b_desc, c_desc, bias_ptr, M, N, K, stride_bias,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr, FLATTEN: tl.constexpr, NUM_SMS: tl.constexpr,
    EPILOGUE: tl.constexpr, RNE_BF16: tl.constexpr, UPCAST_DOT: tl.constexpr,
):  # fmt: skip
    start_pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    tile_id_c = start_pid - NUM_SMS
    # static branch: a Triton without tl.range(flatten=) never compiles the keyword (FLATTEN is False there)
    if FLATTEN:
        for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
            tile_id_c = _persistent_tile(tile_id, tile_id_c, a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                                         stride_bias, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EPILOGUE_SUBTILE,
                                         NUM_SMS, EPILOGUE, RNE_BF16, UPCAST_DOT)
    else:
        for tile_id in tl.range(start_pid, num_tiles, NUM_SMS):
            tile_id_c = _persistent_tile(tile_id, tile_id_c, a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                                         stride_bias, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EPILOGUE_SUBTILE,
                                         NUM_SMS, EPILOGUE, RNE_BF16, UPCAST_DOT)


@triton.jit
def _persistent_ws_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, stride_bias,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr, NUM_SMS: tl.constexpr,
    EPILOGUE: tl.constexpr, RNE_BF16: tl.constexpr, UPCAST_DOT: tl.constexpr,
):  # fmt: skip
    """The persistent kernel with device-side descriptors (contiguous a, b, c), for warp specialization: on
    sm_90 Triton 3.6-3.9 specialize only with in-kernel descriptors and num_warps=4 (a producer warp group and
    two consumer groups of BLOCK_M/2 rows: 12 warps); host descriptors fail to compile, num_warps=8 is a no-op."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    start_pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    tile_id_c = start_pid - NUM_SMS
    if WARP_SPECIALIZE:  # static: a Triton without tl.range(warp_specialize=) gets WARP_SPECIALIZE=False
        for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, warp_specialize=True):
            tile_id_c = _persistent_tile(tile_id, tile_id_c, a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                                         stride_bias, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, False,
                                         NUM_SMS, EPILOGUE, RNE_BF16, UPCAST_DOT)
    else:
        for tile_id in tl.range(start_pid, num_tiles, NUM_SMS):
            tile_id_c = _persistent_tile(tile_id, tile_id_c, a_desc, b_desc, c_desc, bias_ptr, M, N, K,
                                         stride_bias, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, False,
                                         NUM_SMS, EPILOGUE, RNE_BF16, UPCAST_DOT)


# ----------------------------------------------------------------------------------------- variant 3: swap-AB


@triton.jit
def _swapab_kernel(
    a_desc, b_desc, bias_ptr, c_ptr, ws_ptr, M, N, K, split_k, stride_bias,
    BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, PARTIAL: tl.constexpr,
    EPILOGUE: tl.constexpr, RNE_BF16: tl.constexpr, UPCAST_DOT: tl.constexpr,
):  # fmt: skip
    """acc[BLOCK_N, BLOCK_M] = b_tile @ a_tile.T over this program's share of K (grid axis 1 splits K).
    PARTIAL: store fp32 partials to ws[split, M, N] (a reduce kernel adds them and applies the epilogue)."""
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    pid_n = pid // num_pid_m  # neighbours share a b tile (the large operand): it is read from DRAM once
    pid_m = pid % num_pid_m
    off_n = pid_n * BLOCK_N
    off_m = pid_m * BLOCK_M
    k_tiles = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(k_tiles, split_k)
    k_lo = pid_k * per_split
    k_hi = tl.minimum(k_lo + per_split, k_tiles)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for kt in tl.range(k_lo, k_hi):
        b = b_desc.load([off_n, kt * BLOCK_K])
        a = a_desc.load([off_m, kt * BLOCK_K])
        if UPCAST_DOT:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(b, a.T, acc)
    acc = tl.trans(acc)  # [BLOCK_M, BLOCK_N], c's orientation
    offs_m = off_m + tl.arange(0, BLOCK_M)
    offs_n = off_n + tl.arange(0, BLOCK_N)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    idx = offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]  # contiguous c / ws planes
    if PARTIAL:
        tl.store(ws_ptr + pid_k.to(tl.int64) * M * N + idx, acc, mask=mask)
    else:
        acc = _finish(acc, bias_ptr, offs_n, N, stride_bias, EPILOGUE, RNE_BF16)
        tl.store(c_ptr + idx, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _splitk_reduce_kernel(
    ws_ptr, bias_ptr, c_ptr, M, N, split_k, stride_bias,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EPILOGUE: tl.constexpr, RNE_BF16: tl.constexpr,
):  # fmt: skip
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    idx = offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
    plane = M * N  # the swap-AB variant runs for M <= 256 only: no int32 overflow
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    p = ws_ptr + idx
    for _s in range(0, split_k):
        acc += tl.load(p, mask=mask, other=0.0)
        p += plane
    acc = _finish(acc, bias_ptr, offs_n, N, stride_bias, EPILOGUE, RNE_BF16)
    tl.store(c_ptr + idx, acc.to(c_ptr.dtype.element_ty), mask=mask)


# ----------------------------------------------------------------------------------------- configs


def _desc_hook(nargs):
    """Autotune pre-hook (tutorial 09's pattern): give the host descriptors this config's block shapes."""
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk]
    if "c_desc" in nargs:
        nargs["c_desc"].block_shape = [bm, bn // 2 if nargs.get("EPILOGUE_SUBTILE") else bn]


_ROLES: dict[int, tuple[str, ...]] = {}  # id(config) -> the M ranges it is tried for


def _cfg(roles, bm, bn, bk, warps, stages, hook=True, **extra) -> triton.Config:
    c = triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, **extra}, num_warps=warps, num_stages=stages,
                      pre_hook=_desc_hook if hook else None)
    _ROLES[id(c)] = tuple(roles.split(","))
    return c


def _role(m: int) -> str:
    return "large" if m >= 1024 else ("mid" if m > 64 else "decode")


class NoConfig(ValueError):
    """No config of the variant has TMA boxes that fit this shape: the (variant, shape) is skipped."""


def _fits(cfg, m: int, n: int, k: int) -> bool:
    """Every descriptor block no larger than its tensor: a TMA box larger than the tensor's extent is an
    invalid tensor map on the GPU (reported to fault with an illegal address, which would end the whole run),
    even though the interpreter zero-fills it. Boxes that start inside and run past the edge are fine."""
    kw = cfg.kwargs
    return kw["BLOCK_M"] <= m and kw["BLOCK_N"] <= n and kw["BLOCK_K"] <= k


def _prune(configs, named_args, **kwargs):
    m, n, k = (int(named_args[x]) for x in ("M", "N", "K"))
    fit = [c for c in configs if _fits(c, m, n, k)]
    if not fit:
        raise NoConfig(f"no config's blocks fit M={m} N={n} K={k}")
    role = _role(m)
    return [c for c in fit if role in _ROLES.get(id(c), ())] or fit


G = 8
# shared memory per stage: (BLOCK_M + BLOCK_N) * BLOCK_K * 2 B, plus c's staging tile for the TMA store;
# sm_90 gives a block up to 227 KiB. A config over it fails to compile and the autotuner skips it (inf).
TMA_CONFIGS = [
    _cfg("large,mid", 128, 256, 64, 8, 3, GROUP_M=G),
    _cfg("large", 256, 128, 64, 8, 3, GROUP_M=G),
    _cfg("large,mid", 128, 128, 64, 8, 4, GROUP_M=G),
    _cfg("large", 128, 128, 64, 4, 4, GROUP_M=G),
    _cfg("mid,decode", 64, 256, 64, 4, 4, GROUP_M=G),
    _cfg("mid,decode", 64, 128, 64, 4, 5, GROUP_M=G),
    _cfg("mid,decode", 64, 64, 128, 4, 4, GROUP_M=G),
    _cfg("decode", 16, 128, 128, 4, 5, GROUP_M=G),  # BLOCK_M < 64: mma.sync, not wgmma (checked in the PTX)
    _cfg("decode", 16, 64, 256, 4, 4, GROUP_M=G),
]


def _pcfg(roles, bm, bn, bk, warps, stages, subtile=False, flatten=True):
    return _cfg(roles, bm, bn, bk, warps, stages, GROUP_M=G, EPILOGUE_SUBTILE=subtile,
                FLATTEN=flatten and HAS_FLATTEN)


PERSISTENT_CONFIGS = [
    _pcfg("large,mid", 128, 256, 64, 8, 3, subtile=True),
    _pcfg("large", 128, 256, 64, 8, 4, subtile=True),
    _pcfg("large,mid", 128, 128, 64, 8, 4),
    _pcfg("large", 128, 128, 64, 4, 4, subtile=True),
    _pcfg("mid", 64, 256, 64, 4, 4, subtile=True),
    _pcfg("mid", 64, 128, 64, 4, 5),
    _pcfg("decode", 16, 128, 128, 4, 5),  # BLOCK_M <= M for the TMA boxes: mma.sync tiles for M = 16
    _pcfg("decode", 16, 64, 256, 4, 4),
]


def _wcfg(roles, bm, bn, bk, warps, stages):
    return _cfg(roles, bm, bn, bk, warps, stages, hook=False, GROUP_M=G, WARP_SPECIALIZE=HAS_WS)


# num_warps=4: with warp specialization the kernel runs 12 warps (BLOCK_M/2 rows per consumer group).
# Needs M >= 128 (TMA boxes no larger than the tensor): no decode config, M = 16 is skipped.
PERSISTENT_WS_CONFIGS = [
    _wcfg("large,mid", 128, 256, 64, 4, 3),
    _wcfg("large,mid", 128, 128, 64, 4, 4),
    _wcfg("large", 128, 128, 64, 4, 5),
    _wcfg("large", 128, 128, 128, 4, 3),
]

# BLOCK_N: rows of b (wgmma's M side, 64 per warpgroup); BLOCK_M: columns of c.T, i.e. rows of a (8..256)
SWAPAB_CONFIGS = [
    _cfg("decode", 16, 64, 128, 4, 6),
    _cfg("decode", 16, 128, 128, 4, 5),
    _cfg("decode", 16, 64, 256, 4, 4),
    _cfg("decode", 16, 128, 64, 4, 8),
    _cfg("mid", 64, 64, 128, 4, 4),
    _cfg("mid", 128, 64, 64, 4, 4),
    _cfg("mid", 128, 128, 64, 8, 4),
    _cfg("mid", 64, 128, 64, 4, 4),
]
SWAPAB_MAX_M = 256
SPLITS = (1, 2, 4, 8)
_REDUCE_BLOCK = (16, 64)

AUTOTUNE_MS = {"warmup": 10, "rep": 40}  # Triton's defaults are 25 / 100 ms per config: the script's time


def _autotune_bench(kernel_call, quantiles):
    """The autotuner's timer: triton.testing.do_bench with shorter windows; the host clock under the
    interpreter (the --smoke run), where do_bench has no device to time."""
    if INTERPRETED:
        t = time.perf_counter()
        kernel_call()
        ms = (time.perf_counter() - t) * 1e3
        return [ms] * len(quantiles) if quantiles else ms
    return triton.testing.do_bench(kernel_call, warmup=AUTOTUNE_MS["warmup"], rep=AUTOTUNE_MS["rep"],
                                   quantiles=quantiles)


def _autotune(configs, key):
    return triton.autotune(configs=configs, key=key, prune_configs_by={"early_config_prune": _prune},
                           do_bench=_autotune_bench)


_KEY = ["M", "N", "K", "EPILOGUE"]
_tma_tuned = _autotune(TMA_CONFIGS, _KEY)(_tma_kernel)
_persistent_tuned = _autotune(PERSISTENT_CONFIGS, _KEY)(_persistent_kernel)
_persistent_ws_tuned = _autotune(PERSISTENT_WS_CONFIGS, _KEY)(_persistent_ws_kernel)
_swapab_tuned = _autotune(SWAPAB_CONFIGS, _KEY + ["split_k", "PARTIAL"])(_swapab_kernel)

# ----------------------------------------------------------------------------------------- launchers


def _flags(a, c, epilogue):
    return {"EPILOGUE": int(epilogue), "RNE_BF16": INTERPRETED and c.dtype == torch.bfloat16,
            "UPCAST_DOT": INTERPRETED and a.dtype == torch.bfloat16}


def _descs(*tensors):
    if TensorDescriptor is None:
        raise RuntimeError(f"triton {triton.__version__} has no triton.tools.tensor_descriptor.TensorDescriptor")
    for t in tensors:
        if not t.is_contiguous():
            raise ValueError("the TMA variants take contiguous operands only")
    return [TensorDescriptor.from_tensor(t, [1, 1]) for t in tensors]  # block shapes: set by _desc_hook


def _launch(tuned, grid, args, flags, config):
    """The autotuned launch (config None; returns the winner), or `config` alone (its hook applied here, as
    the autotuner would): the interpreter self-test and ahead-of-time compiles launch every config this way."""
    if config is None:
        tuned[grid](*args, **flags)
        return tuned.best_config
    nargs = {**dict(zip(tuned.arg_names, args, strict=False)), **flags, **config.kwargs}
    if not _fits(config, nargs["M"], nargs["N"], nargs["K"]):
        raise NoConfig(f"{config_str(config)}: blocks larger than M={nargs['M']} N={nargs['N']} K={nargs['K']}")
    if config.pre_hook is not None:
        config.pre_hook(nargs)
    tuned.fn[grid](*args, **flags, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)
    return config


def _mnk(a, b):
    return a.shape[0], b.shape[0], a.shape[1]


def matmul_tma(*, a, b, bias, c, epilogue=0, config=None):
    M, N, K = _mnk(a, b)
    a_desc, b_desc, c_desc = _descs(a, b, c)

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    return _launch(_tma_tuned, grid, (a_desc, b_desc, c_desc, bias, M, N, K, bias.stride(0)),
                   _flags(a, c, epilogue), config)


def _num_sms(device) -> int:
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 3  # interpreter: a few programs, so each walks several tiles


def matmul_persistent(*, a, b, bias, c, epilogue=0, config=None, num_sms=None):
    M, N, K = _mnk(a, b)
    a_desc, b_desc, c_desc = _descs(a, b, c)
    sms = num_sms or _num_sms(a.device)

    def grid(meta):
        return (min(sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)
    return _launch(_persistent_tuned, grid, (a_desc, b_desc, c_desc, bias, M, N, K, bias.stride(0)),
                   {**_flags(a, c, epilogue), "NUM_SMS": sms}, config)


def matmul_persistent_ws(*, a, b, bias, c, epilogue=0, config=None, num_sms=None):
    M, N, K = _mnk(a, b)
    if not (a.is_contiguous() and b.is_contiguous() and c.is_contiguous()):
        raise ValueError("the TMA variants take contiguous operands only")
    if not hasattr(tl, "make_tensor_descriptor"):
        raise RuntimeError(f"triton {triton.__version__} has no tl.make_tensor_descriptor")
    sms = num_sms or _num_sms(a.device)

    def grid(meta):
        return (min(sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)
    return _launch(_persistent_ws_tuned, grid, (a, b, c, bias, M, N, K, bias.stride(0)),
                   {**_flags(a, c, epilogue), "NUM_SMS": sms}, config)


def matmul_swapab(*, a, b, bias, c, epilogue=0, split_k=1, ws=None, config=None):
    M, N, K = _mnk(a, b)
    if M > SWAPAB_MAX_M:
        raise ValueError(f"swap-AB is for M <= {SWAPAB_MAX_M}")
    if not c.is_contiguous():
        raise ValueError("swap-AB stores a contiguous c")
    a_desc, b_desc = _descs(a, b)
    partial = split_k > 1
    if partial and ws is None:
        ws = torch.empty((split_k, M, N), dtype=torch.float32, device=a.device)
    flags = _flags(a, c, epilogue)

    def grid(meta):
        return (triton.cdiv(N, meta["BLOCK_N"]) * triton.cdiv(M, meta["BLOCK_M"]), split_k)
    best = _launch(_swapab_tuned, grid, (a_desc, b_desc, bias, c, ws if partial else c, M, N, K, split_k,
                                         bias.stride(0)), {**flags, "PARTIAL": partial}, config)
    if partial:
        bm, bn = _REDUCE_BLOCK
        _splitk_reduce_kernel[(triton.cdiv(M, bm), triton.cdiv(N, bn))](
            ws, bias, c, M, N, split_k, bias.stride(0), BLOCK_M=bm, BLOCK_N=bn, EPILOGUE=flags["EPILOGUE"],
            RNE_BF16=flags["RNE_BF16"], num_warps=4)
    return best


def config_str(cfg) -> str:
    if cfg is None:
        return "-"
    kw = cfg.kwargs
    s = f"{kw.get('BLOCK_M')}x{kw.get('BLOCK_N')}x{kw.get('BLOCK_K')} w{cfg.num_warps} s{cfg.num_stages}"
    flags = [k.lower() for k in ("EPILOGUE_SUBTILE", "FLATTEN", "WARP_SPECIALIZE") if kw.get(k)]
    extra = {k: v for k, v in kw.items() if k not in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "EPILOGUE_SUBTILE",
                                                      "FLATTEN", "WARP_SPECIALIZE")}
    return " ".join([s] + flags + [f"{k}={v}" for k, v in extra.items()])


def _timings(tuned) -> dict:
    """The autotuner's timings of the last shape it tuned (ms: median, p20, p80), by config."""
    out = {}
    for cfg, t in (getattr(tuned, "configs_timings", None) or {}).items():
        out[config_str(cfg)] = [None if not math.isfinite(x) else round(x, 5) for x in
                                (t if isinstance(t, (list, tuple)) else [t])]
    return out


# ----------------------------------------------------------------------------------------- GPU run

SHAPES = [  # (M, N, K, epilogue): the spec's bench shapes the brief names
    (4096, 4096, 4096, 0), (8192, 8192, 8192, 0), (4096, 14336, 4096, 0), (4096, 4096, 14336, 0),
    (128, 14336, 4096, 0), (128, 4096, 14336, 0), (16, 14336, 4096, 0), (16, 4096, 14336, 0),
    (4096, 14336, 4096, 3),
]
EXTRA_SHAPES = [(16, 4096, 4096, 0), (16, 14336, 4096, 3)]  # the spec's other bench cases, with --extra
SMOKE_SHAPES = [(150, 264, 512, 0), (16, 264, 1024, 3)]  # --smoke: the runner itself, on a CPU


def _check(got: torch.Tensor, ref: torch.Tensor, k: int, dtype) -> dict:
    atol = 1e-5 + 1e-6 * k
    rtol = 1.6e-2 if dtype == torch.bfloat16 else 1e-3
    g = got.float()
    err = (g - ref).abs()
    ratio = (err / (atol + rtol * ref.abs())).max().item()
    bad = int((err > atol + rtol * ref.abs()).sum().item()) + int((~torch.isfinite(g)).sum().item())
    return {"ok": bad == 0, "max_abs_err": err.max().item(), "max_err_over_bound": ratio, "bad": bad}


def _providers(a, b, bias, c, epi, m, n, k):
    """name -> (launch returning a config or None, tuner to read timings from or None, output tensor)."""
    from kernels import matmul as km

    out = {}
    box = {}

    def cublas():
        box["torch"] = km.matmul_torch(a=a, b=b, bias=bias, c=c, epilogue=epi)
    out["cublas"] = (cublas, None, lambda: box["torch"])

    def current():
        km.matmul(a=a, b=b, bias=bias, c=c, epilogue=epi)
        return getattr(km._matmul_autotuned, "best_config", None)
    out["current"] = (current, km._matmul_autotuned, lambda: c)
    out["tma"] = (lambda: matmul_tma(a=a, b=b, bias=bias, c=c, epilogue=epi), _tma_tuned, lambda: c)
    out["persistent"] = (lambda: matmul_persistent(a=a, b=b, bias=bias, c=c, epilogue=epi), _persistent_tuned,
                         lambda: c)
    out["persistent_ws"] = (lambda: matmul_persistent_ws(a=a, b=b, bias=bias, c=c, epilogue=epi),
                            _persistent_ws_tuned, lambda: c)
    if m <= SWAPAB_MAX_M:
        for s in SPLITS:
            if s > 1 and k < 256 * s:  # at least one 256-deep K block per split
                continue
            ws = torch.empty((s, m, n), dtype=torch.float32, device=a.device) if s > 1 else None
            out[f"swapab_sk{s}"] = ((lambda s=s, ws=ws: matmul_swapab(a=a, b=b, bias=bias, c=c, epilogue=epi,
                                                                       split_k=s, ws=ws)), _swapab_tuned, lambda: c)
    return out


def run(args) -> int:
    from harness.timing.engine import TimingConfig, measure
    from harness.timing.stats import summarize
    from kernels.matmul import matmul_ref

    cfg = TimingConfig(min_samples=10, max_samples=200, min_time_s=0.1, timeout_s=args.timeout_s)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    cuda = not args.smoke
    dev = torch.device("cuda" if cuda else "cpu")
    AUTOTUNE_MS["rep"] = args.autotune_rep_ms
    try:  # an fp32 reference in full precision (torch's default; said explicitly)
        torch.backends.cuda.matmul.allow_tf32 = False
    except Exception:  # noqa: BLE001
        pass
    if cuda and hasattr(triton, "set_allocator"):  # global scratch for the device-side descriptors
        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))
    variants = set(args.variants.split(","))
    out = {"device": torch.cuda.get_device_name() if cuda else "cpu (interpreter smoke run)",
           "capability": list(torch.cuda.get_device_capability()) if cuda else [],
           "num_sms": _num_sms(dev), "torch": torch.__version__, "features": FEATURES, "dtype": args.dtype,
           "timing": {"min_samples": cfg.min_samples, "max_samples": cfg.max_samples,
                      "min_time_s": cfg.min_time_s, "timeout_s": cfg.timeout_s, "autotune_ms": AUTOTUNE_MS},
           "tolerance": "1e-5 + 1e-6 K + rtol |ref|, rtol 1.6e-2 (bf16) / 1e-3 (fp16)", "results": []}
    print(f"device {out['device']} sm_{''.join(map(str, out['capability']))} SMs {out['num_sms']} | torch "
          f"{torch.__version__} | features {FEATURES}", flush=True)
    t0 = time.monotonic()
    shapes = SMOKE_SHAPES if args.smoke else SHAPES + (EXTRA_SHAPES if args.extra else [])
    if args.shapes:
        shapes = [shapes[int(i)] for i in args.shapes.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "matmul_tma.json"
    for (m, n, k, epi) in shapes:
        g = torch.Generator(device=dev).manual_seed(m * 7 + n * 3 + k)
        a = torch.randn(m, k, device=dev, generator=g).to(dtype)
        b = torch.randn(n, k, device=dev, generator=g).to(dtype)
        bias = torch.randn(n, device=dev, generator=g).to(dtype)
        c = torch.empty(m, n, device=dev, dtype=dtype)
        ref = torch.empty(m, n, device=dev, dtype=torch.float32)
        matmul_ref(a=a, b=b, bias=bias, c=ref, epilogue=epi)
        rows, base_us = {}, None
        for name, (fn, tuner, result) in _providers(a, b, bias, c, epi, m, n, k).items():
            if name != "cublas" and name not in variants and not (name.startswith("swapab") and "swapab" in variants):
                continue
            row = {"M": m, "N": n, "K": k, "epilogue": epi, "variant": name}
            if time.monotonic() - t0 > args.budget_s:
                row["skipped"] = f"time budget {args.budget_s:.0f} s spent"
                rows[name] = row
                continue
            try:
                c.fill_(float("nan"))
                t1 = time.monotonic()
                best = fn()
                if cuda:
                    torch.cuda.synchronize()
                row["first_call_s"] = round(time.monotonic() - t1, 2)  # compile + autotune
                row["best_config"] = config_str(best) if best is not None else "-"
                if tuner is not None and name != "current":
                    row["autotune_ms"] = _timings(tuner)
                row["check"] = _check(result(), ref, k, dtype)
                st = summarize(measure(fn, device=dev, config=cfg).samples_us)
                row["median_us"] = st.median
                row["tflops"] = 2 * m * n * k / st.median / 1e6
                if name == "cublas":
                    base_us = st.median
                row["ratio_to_cublas"] = base_us / st.median if base_us else None
            except NoConfig as exc:
                row["skipped"] = str(exc)
            except Exception as exc:  # noqa: BLE001 - recorded; the others go on
                row["error"] = f"{type(exc).__name__}: {exc}"[:2000]
                row["traceback"] = traceback.format_exc()[-4000:]
            rows[name] = row
            _print_row(row)
        out["results"].extend(rows.values())
        del a, b, bias, c, ref
        if cuda:
            torch.cuda.empty_cache()
        out["wall_s"] = time.monotonic() - t0
        path.write_text(json.dumps(out, indent=2, default=str))  # after every shape: a crash keeps the rest
    _print_summary(out["results"])
    print(f"matmul_tma: {out['wall_s']:.0f} s, wrote {path}")
    return 0


def _print_row(r: dict) -> None:
    shape = f"{r['M']}x{r['N']}x{r['K']} e{r['epilogue']}"
    if "median_us" in r:
        ratio = f"{r['ratio_to_cublas']:.3f}" if r.get("ratio_to_cublas") else "-"
        chk = "ok" if r["check"]["ok"] else f"FAIL({r['check']['max_err_over_bound']:.2f}x bound)"
        print(f"{shape:24s} {r['variant']:12s} {r['median_us']:10.1f} us {r['tflops']:7.1f} TF/s  x{ratio:>6s}  "
              f"{chk:5s} {r.get('best_config', '-')}  [first call {r.get('first_call_s', 0):.1f} s]", flush=True)
    else:
        msg = r.get("error") or r.get("skipped", "")
        first = (msg.splitlines() or [""])[0][:150]
        print(f"{shape:24s} {r['variant']:12s} {'ERROR' if 'error' in r else 'SKIP'}: {first}", flush=True)


def _print_summary(results: list[dict]) -> None:
    print("\n== summary: shape | variant | median us | TFLOP/s | cuBLAS time / variant time | check | best config")
    for r in results:
        _print_row(r)


# ----------------------------------------------------------------------------------------- CPU self-test


def selftest() -> int:
    """Every config of every variant, under the interpreter, against the fp32 reference (bf16 inputs)."""
    from kernels.matmul import matmul_ref

    assert INTERPRETED, "run with TRITON_INTERPRET=1"
    g = torch.Generator().manual_seed(0)
    fails = 0

    def case(label, fn, m, n, k, epi):
        nonlocal fails
        a = torch.randn(m, k, generator=g).to(torch.bfloat16)
        b = torch.randn(n, k, generator=g).to(torch.bfloat16)
        bias = torch.randn(n, generator=g).to(torch.bfloat16)
        c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
        ref = torch.empty(m, n)
        matmul_ref(a=a, b=b, bias=bias, c=ref, epilogue=epi)
        t = time.monotonic()
        try:
            fn(a=a, b=b, bias=bias, c=c, epilogue=epi)
            r = _check(c, ref, k, torch.bfloat16)
            ok = r["ok"]
            msg = f"max err/bound {r['max_err_over_bound']:.3f}"
        except Exception as exc:  # noqa: BLE001
            ok, msg = False, f"{type(exc).__name__}: {exc}"[:300]
        fails += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {label:60s} M={m} N={n} K={k} e{epi}  {msg}  "
              f"({time.monotonic() - t:.1f} s)", flush=True)

    # ragged M, N and K (partial last tiles and K block), every epilogue over the configs; every block fits
    for i, cfg in enumerate(TMA_CONFIGS):
        case(f"tma {config_str(cfg)}", lambda cfg=cfg, **kw: matmul_tma(config=cfg, **kw), 300, 520, 600, i % 5)
    for i, cfg in enumerate(PERSISTENT_CONFIGS):
        case(f"persistent {config_str(cfg)}",
             lambda cfg=cfg, **kw: matmul_persistent(config=cfg, num_sms=3, **kw), 300, 520, 600, i % 5)
    for i, cfg in enumerate(PERSISTENT_WS_CONFIGS):
        case(f"persistent_ws {config_str(cfg)}",
             lambda cfg=cfg, **kw: matmul_persistent_ws(config=cfg, num_sms=3, **kw), 300, 520, 600, (i + 2) % 5)
    for i, cfg in enumerate(SWAPAB_CONFIGS):
        m = 16 if cfg.kwargs["BLOCK_M"] == 16 else 130
        for s in (1, 3):
            case(f"swapab sk{s} {config_str(cfg)}",
                 lambda cfg=cfg, s=s, **kw: matmul_swapab(config=cfg, split_k=s, **kw), m, 264, 1000, (i + s) % 5)
    # the guard: a 128-row box on M = 16 is refused before any launch, and the autotuner's prune refuses a
    # shape no config fits
    for label, launch in (("tma", lambda **kw: matmul_tma(config=TMA_CONFIGS[0], **kw)),
                          ("persistent_ws (autotuned)", lambda **kw: matmul_persistent_ws(num_sms=3, **kw))):
        a, b = torch.zeros(16, 256, dtype=torch.bfloat16), torch.zeros(512, 256, dtype=torch.bfloat16)
        try:
            launch(a=a, b=b, bias=torch.zeros(512, dtype=torch.bfloat16), c=torch.empty(16, 512, dtype=torch.bfloat16),
                   epilogue=0)
            ok, msg = False, "launched"
        except NoConfig as exc:
            ok, msg = True, f"refused: {exc}"
        fails += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {label} M=16 through 128-row boxes: {msg}")
    print(f"selftest: {fails} failed | features {FEATURES}")
    return 1 if fails else 0


def aot(arch: str) -> int:
    """No GPU needed: every config of every variant (epilogues 0 and 3; swap-AB with and without split-K)
    compiled ahead of time with the harness (harness.aot: Triton's compiler, ptxas -v, cuobjdump), one row each:
    registers, spills, shared memory. Launches are recorded on meta tensors at 4096^3 / decode shapes."""
    from harness.aot.launches import record_launches
    from harness.aot.triton import check, compile_all, render_table, table_rows

    def rec(fn, m, n, k, **kw):
        meta = {x: torch.empty(*shape, dtype=torch.bfloat16, device="meta")
                for x, shape in (("a", (m, k)), ("b", (n, k)), ("bias", (n,)), ("c", (m, n)))}
        return record_launches(lambda a, b, bias, c: fn(a=a, b=b, bias=bias, c=c, **kw), meta)

    records = []
    for epi in (0, 3):
        records += [r for cfg in TMA_CONFIGS for r in rec(matmul_tma, 4096, 4096, 4096, epilogue=epi, config=cfg)]
        records += [r for cfg in PERSISTENT_CONFIGS for r in rec(matmul_persistent, 4096, 4096, 4096, epilogue=epi,
                                                                  config=cfg, num_sms=132)]
        records += [r for cfg in PERSISTENT_WS_CONFIGS for r in rec(matmul_persistent_ws, 4096, 4096, 4096,
                                                                     epilogue=epi, config=cfg, num_sms=132)]
        for cfg in SWAPAB_CONFIGS:
            m = 16 if cfg.kwargs["BLOCK_M"] == 16 else 128
            for s in (1, 4):
                records += rec(matmul_swapab, m, 4096, 14336, epilogue=epi, config=cfg, split_k=s)
    t = time.monotonic()
    results = compile_all(records, archs=[arch])
    print(f"triton {triton.__version__}: {len(records)} launches, {len(results)} compiled for {arch} in "
          f"{time.monotonic() - t:.0f} s")
    print(render_table(table_rows(results, allow_spills=True)))
    problems = [p for r in results for p in check(r)]
    print("\n".join(problems) if problems else "no problems (no compile error, no spill, within the arch's limits)")
    return 1 if problems else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="directory for matmul_tma.json (GPU run)")
    p.add_argument("--selftest", action="store_true", help="CPU: every config under TRITON_INTERPRET=1")
    p.add_argument("--variants", default="current,tma,persistent,persistent_ws,swapab",
                   help="comma list from current,tma,persistent,persistent_ws,swapab (cuBLAS always runs)")
    p.add_argument("--shapes", default="", help=f"comma list of indices into {SHAPES} (+ --extra) (default: all)")
    p.add_argument("--extra", action="store_true", help=f"also {EXTRA_SHAPES}")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--budget-s", type=float, default=200.0, help="start no new case after this many seconds")
    p.add_argument("--timeout-s", type=float, default=3.0, help="timing engine: wall-clock limit per case")
    p.add_argument("--autotune-rep-ms", type=float, default=40.0, help="do_bench window per autotune config")
    p.add_argument("--aot", metavar="ARCH", help="no GPU: compile every config for ARCH (e.g. sm_90), print resources")
    p.add_argument("--smoke", action="store_true",
                   help="CPU, TRITON_INTERPRET=1: the runner on tiny shapes (host timing, numbers meaningless)")
    args = p.parse_args()
    if args.selftest:
        return selftest()
    if args.aot:
        return aot(args.aot)
    if args.out is None:
        p.error("--out DIR is required")
    if args.smoke != INTERPRETED:
        p.error("--smoke goes with TRITON_INTERPRET=1, and only it")
    if not args.smoke and not torch.cuda.is_available():
        p.error("the GPU run needs CUDA (on a CPU: TRITON_INTERPRET=1 ... --selftest or --smoke)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
