"""`matmul`'s Hopper path: the same GEMM with TMA tensor descriptors, persistent over the SMs (the spec's
``triton_tma`` backend, sm_90 and newer).

``c = act(a @ b.T + bias)`` exactly as :mod:`kernels.matmul` defines it (same epilogue codes, same fp32
accumulation, same reference). What differs is how operands reach the tensor cores: a and b tiles are copied
by the TMA engine from host-built descriptors (no address arithmetic or masks in registers, and Triton's
pipeliner feeds wgmma from shared memory), one program per SM walks the output tiles with stride NUM_SMS
(no tail wave, the next tile's loads start under this one's epilogue), and the 128 x 256 tile stores c in two
halves so its staging buffer leaves room for a 4th stage. Measured on the H200 against cuBLAS in
the TMA experiment (reports/h200/experiments/matmul_tma/matmul_tma.log): 0.99-1.03x at 4096^3, 8192^3,
4096x14336x4096 and 4096x4096x14336, where the pointer kernel reached 0.75-0.85x.

A launch this path does not take goes to :func:`kernels.matmul.matmul`, the pointer kernel, so the backend is
correct for every layout and shape (:func:`takes` says which):
* TMA needs 16-byte aligned bases and row strides and unit last strides on a, b and c (a padded or unaligned
  row, a transposed weight, fp32 c: the pointer kernel);
* on a GPU, a TMA box must not be larger than its tensor, so M, N and K must hold one tile;
* on a GPU, M below :data:`MIN_M`: the measured crossover. At M = 128 the pointer kernel was as fast or
  faster (0.79 against 0.60 of cuBLAS at 128x4096x14336), and at M = 16 both are near cuBLAS.
Under the Triton interpreter (CPU) the shape rule is only that a 16-element box fits, so the generated tests
check this kernel's numerics on every aligned case, ragged edges and several tiles per program included.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.common import (
    CachedAutotune,
    Plans,
    cdiv,
    cuda_capability,
    interpreted,
    needs_bf16_rounding,
    rebaser,
    round_to_bf16,
    signature,
    sm_count,
)
from kernels.matmul import check_operands, epilogue_code, fused_epilogue, grouped_tile
from kernels.matmul import plan as pointer_plan

try:  # Triton 3.4+ (the GPU machine's 3.6 and the newest both have it)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # an older Triton: every launch goes to the pointer kernel
    TensorDescriptor = None

# The smallest M this path takes on a GPU (see the module docstring for the measurements behind it).
MIN_M = 1024
_GROUP_M = 8
# Under the interpreter, two programs walk several tiles each.
_INTERP_SMS = 2
_INTERP_BLOCK = 64


@dataclass(frozen=True)
class PersistentConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    subtile: bool           # store c as two BLOCK_M x BLOCK_N/2 halves: half of c's shared-memory staging

    def shared_bytes(self, itemsize: int = 2) -> int:
        """The stages' a and b tiles plus c's staging tile for the TMA store."""
        c_cols = self.block_n // 2 if self.subtile else self.block_n
        return (self.num_stages * (self.block_m + self.block_n) * self.block_k + self.block_m * c_cols) * itemsize

    def fits(self, m: int, n: int, k: int) -> bool:
        """Every box no larger than its tensor: on a GPU a larger box is an invalid tensor map."""
        return self.block_m <= m and self.block_n <= n and self.block_k <= k

    def as_triton(self) -> triton.Config:
        return triton.Config({"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k,
                              "GROUP_M": _GROUP_M, "EPILOGUE_SUBTILE": self.subtile},
                             num_warps=self.num_warps, num_stages=self.num_stages, pre_hook=_set_boxes)

    @classmethod
    def interpreted(cls, m: int, n: int, k: int) -> PersistentConfig:
        """The interpreter's config: power-of-two boxes no larger than the tensor (so edge tiles are partial, as
        on a GPU), at most _INTERP_BLOCK, so a test case spans several tiles and K blocks."""
        def box(size: int) -> int:
            return min(1 << (size.bit_length() - 1), _INTERP_BLOCK)
        bn = box(n)
        return cls(box(m), bn, box(k), 4, 1, bn >= 32)


# The autotuner's candidates: the four that won or came second at the large shapes in the H200 experiment.
# 128 x 256 x 64 with 4 stages and a split c store is 224 KiB of shared memory, within sm_90/sm_100's 227 KiB.
CONFIGS = (
    PersistentConfig(128, 256, 64, 8, 3, True),
    PersistentConfig(128, 256, 64, 8, 4, True),
    PersistentConfig(128, 128, 64, 8, 4, False),
    PersistentConfig(128, 128, 64, 4, 4, True),
)


def _boxes(meta) -> tuple[list[int], list[int], list[int]]:
    """The a, b and c descriptors' box shapes for a config's meta-parameters."""
    bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    return [bm, bk], [bn, bk], [bm, bn // 2 if meta["EPILOGUE_SUBTILE"] else bn]


def _set_boxes(nargs) -> None:
    """Autotune pre-hook (Triton's tutorial 09 pattern): the host descriptors get this config's box shapes."""
    nargs["a_desc"].block_shape, nargs["b_desc"].block_shape, nargs["c_desc"].block_shape = _boxes(nargs)


def _programs(m: int, n: int, sms: int, meta) -> int:
    """One program per SM, or per output tile where there are fewer tiles."""
    return min(sms, cdiv(m, meta["BLOCK_M"]) * cdiv(n, meta["BLOCK_N"]))


def prune_boxes(configs, named_args, **kwargs):
    """Only configs whose boxes fit the tensors (takes() has checked that one does)."""
    m, n, k = (int(named_args[x]) for x in ("M", "N", "K"))
    return [c for c in configs if c.kwargs["BLOCK_M"] <= m and c.kwargs["BLOCK_N"] <= n and c.kwargs["BLOCK_K"] <= k]


@triton.jit
def _finish(acc, bias_ptr, offs_n, N, stride_bias, EPILOGUE: tl.constexpr, RNE_BF16: tl.constexpr):
    acc = fused_epilogue(acc, bias_ptr, offs_n, offs_n < N, stride_bias, EPILOGUE)
    if RNE_BF16:
        acc = round_to_bf16(acc)
    return acc


@triton.jit
def _persistent_kernel(
    a_desc, b_desc, c_desc, bias_ptr, M, N, K, stride_bias,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr, NUM_SMS: tl.constexpr,
    EPILOGUE: tl.constexpr, RNE_BF16: tl.constexpr, UPCAST_DOT: tl.constexpr,
):  # fmt: skip
    start_pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    # The epilogue finds its tile from a second counter (Triton's tutorial 09): with the loop flattened, the
    # next tile's loads are issued before this tile's epilogue, so no value may cross from one to the other.
    tile_id_c = start_pid - NUM_SMS
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_am = pid_m * BLOCK_M
        off_bn = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BLOCK_K)):  # TMA zero-fills past M, N and K: no masks
            a = a_desc.load([off_am, ki * BLOCK_K])
            b = b_desc.load([off_bn, ki * BLOCK_K])
            if UPCAST_DOT:  # the interpreter's dot reads bf16 as raw bits; in fp32 the products are exact
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b.T, acc)
        tile_id_c += NUM_SMS
        pid_m, pid_n = grouped_tile(tile_id_c, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_cm = pid_m * BLOCK_M
        off_cn = pid_n * BLOCK_N
        if EPILOGUE_SUBTILE:
            acc0, acc1 = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            offs_n0 = off_cn + tl.arange(0, BLOCK_N // 2)
            acc0 = _finish(acc0, bias_ptr, offs_n0, N, stride_bias, EPILOGUE, RNE_BF16)
            c_desc.store([off_cm, off_cn], acc0.to(c_desc.dtype))
            acc1 = _finish(acc1, bias_ptr, offs_n0 + BLOCK_N // 2, N, stride_bias, EPILOGUE, RNE_BF16)
            c_desc.store([off_cm, off_cn + BLOCK_N // 2], acc1.to(c_desc.dtype))  # TMA clips past M and N
        else:
            acc = _finish(acc, bias_ptr, off_cn + tl.arange(0, BLOCK_N), N, stride_bias, EPILOGUE, RNE_BF16)
            c_desc.store([off_cm, off_cn], acc.to(c_desc.dtype))


_persistent_autotuned = triton.autotune(
    configs=[c.as_triton() for c in CONFIGS], key=["M", "N", "K", "EPILOGUE"],
    prune_configs_by={"early_config_prune": prune_boxes},
)(_persistent_kernel)
_persistent_launch = CachedAutotune(_persistent_autotuned)
_persistent_fast = _persistent_launch.fast  # the bare kernel's launches, shared with the autotuner's replays

# A call's plan, per call signature (shapes, strides, dtypes, the operands' 16-byte alignment, device,
# epilogue): the pointer kernel's (kernels/matmul.py) where this path does not take the operands; on a GPU, once
# the autotuner has picked, the boxes, the grid and every keyword of the TMA launch. A later call with that
# signature would pass the same checks, take the same route and get the same config, so it skips them and the
# autotuner's key and pre-hook: builds its three descriptors and launches. On the H100 the launcher's Python had
# been 33 us of its 57 us a call at 4096^3 (bench/gpu_launch_paths.py; reports/h100/README.md).
_PLANS = Plans()


def _signature(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, c: torch.Tensor, epilogue) -> tuple:
    return signature(a, b, bias, c), type(epilogue), epilogue


def _tma_ready(t: torch.Tensor) -> bool:
    """What a TMA descriptor needs of a 2-d tensor: unit last stride, 16-byte aligned row stride and base."""
    size = t.element_size()
    aligned_base = t.device.type == "meta" or t.data_ptr() % 16 == 0
    return t.dim() == 2 and t.stride(1) == 1 and (t.stride(0) * size) % 16 == 0 and aligned_base


def descriptor_path(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, configs=CONFIGS) -> bool:
    """Whether a persistent TMA kernel with these ``configs`` can and should take a [M, K], b [N, K] and
    c [M, N]: descriptors for all three, and the shape rule of the module docstring."""
    if TensorDescriptor is None or not all(_tma_ready(t) for t in (a, b, c)):
        return False
    (m, k), n = a.shape, b.shape[0]
    if interpreted(a):
        return min(m, n, k) >= 16
    if a.device.type == "cuda" and cuda_capability(a.device)[0] < 9:
        return False
    return m >= MIN_M and any(cfg.fits(m, n, k) for cfg in configs)


def takes(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> bool:
    """Whether :func:`matmul_tma` runs the TMA kernel for these operands (else the pointer kernel)."""
    sixteen = (torch.float16, torch.bfloat16)
    return a.dtype in sixteen and b.dtype == a.dtype and c.dtype in sixteen and descriptor_path(a, b, c)


def launch_persistent(kernel, autotuned, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, *args,
                      **constexprs):
    """Launch a persistent kernel ``kernel(a_desc, b_desc, c_desc, *args, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M,
    EPILOGUE_SUBTILE, NUM_SMS, **constexprs)``: on a GPU (or meta tensors) its ``autotuned`` form, one program
    per SM, boxes set by each config's pre-hook; under the interpreter, :meth:`PersistentConfig.interpreted`
    with two programs, so each walks several tiles. Returns the config ``autotuned`` launched with, where it keeps
    one (a CUDA launch), else None."""
    (m, k), n = a.shape, b.shape[0]
    if interpreted(a):
        cfg = PersistentConfig.interpreted(m, n, k)
        boxes = _boxes(cfg.as_triton().kwargs)
        descs = [TensorDescriptor.from_tensor(t, box) for t, box in zip((a, b, c), boxes, strict=True)]
        tiles = cdiv(m, cfg.block_m) * cdiv(n, cfg.block_n)
        kernel[(min(_INTERP_SMS, tiles),)](
            *descs, *args, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=_GROUP_M,
            EPILOGUE_SUBTILE=cfg.subtile, NUM_SMS=_INTERP_SMS, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
            **constexprs)
        return
    sms = sm_count(a.device)
    descs = [TensorDescriptor.from_tensor(t, [1, 1]) for t in (a, b, c)]  # boxes: set by _set_boxes

    def grid(meta):
        return (_programs(m, n, sms, meta),)
    return autotuned[grid](*descs, *args, NUM_SMS=sms, **constexprs)


def matmul_tma(*, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, c: torch.Tensor, epilogue: int | str) -> None:
    """``c = act(a @ b.T + bias)``: the persistent TMA kernel where :func:`takes` allows, else kernels.matmul's."""
    sig = _signature(a, b, bias, c, epilogue)
    _PLANS.run(sig, lambda: _plan(sig, a, b, bias, c, epilogue), a, b, bias, c)


def _plan(sig, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, c: torch.Tensor, epilogue: int | str):
    """The pointer kernel's plan (kernels/matmul.py) where :func:`takes` refuses; else None, having launched the
    persistent kernel (autotuning on a signature's first call) and kept its plan."""
    check_operands(a, b, bias, c)
    code = epilogue_code(epilogue)
    if not takes(a, b, c):
        return pointer_plan(a, b, bias, c, code)
    constexprs = dict(EPILOGUE=code, RNE_BF16=needs_bf16_rounding(c),
                      UPCAST_DOT=interpreted(a) and a.dtype == torch.bfloat16)
    cfg = launch_persistent(_persistent_kernel, _persistent_launch, a, b, c, bias, a.shape[0], b.shape[0],
                            a.shape[1], bias.stride(0), **constexprs)
    if cfg is not None:  # a GPU launch: planned once the autotuner has picked
        _PLANS.keep(sig, _planned(cfg, a, b, c, constexprs))
    return None


def _planned(cfg, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, constexprs: dict):
    """The launch the autotuner's pick ``cfg`` makes for these operands' signature."""
    (m, k), n = a.shape, b.shape[0]
    persistent = persistent_plan(_persistent_fast, cfg, a, b, c, constexprs)

    def launch(a, b, bias, c):
        persistent(a, b, c, bias, m, n, k, bias.stride(0))
    return launch


def persistent_plan(fast, cfg, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, constexprs: dict):
    """A persistent kernel's launch for the call signature of a, b and c once ``cfg`` is picked (what
    :func:`launch_persistent` returned): ``launch(a, b, c, *args)``, the kernel's arguments after its three
    descriptors being ``args``. ``fast`` is the bare kernel's FastLaunch (CachedAutotune.fast)."""
    meta, sms = cfg.all_kwargs(), sm_count(a.device)
    grid = (_programs(a.shape[0], b.shape[0], sms, meta),)
    # the planning call's descriptors, each call's over its own bases (kernels.common.rebaser)
    ra, rb, rc = (rebaser(TensorDescriptor.from_tensor(t, box)) for t, box in zip((a, b, c), _boxes(meta), strict=True))
    # the signature fixes every part of FastLaunch's key: the launch is kept per device and stream
    pinned = fast.pinned(grid, **meta, **constexprs, NUM_SMS=sms)

    def launch(a, b, c, *args):
        pinned(ra(a), rb(b), rc(c), *args)
    return launch
