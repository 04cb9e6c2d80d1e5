"""Planted bugs in matmul's persistent TMA kernel (kernels/matmul_tma.py), for tests/test_matmul_tma.py: the
shipped kernel's loop with one switch per bug, launched like the shipped launcher under the interpreter.

* ``stale_tile``: the epilogue stores every tile a program computes at the program's first tile (the second
  counter of tutorial 09 never advances): right only while a program owns one tile.
* ``same_half``: the split c store writes the first half's values into both halves.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import needs_bf16_rounding
from kernels.matmul import epilogue_code, grouped_tile, matmul
from kernels.matmul_tma import _finish, launch_persistent, takes


@triton.jit
def _planted_kernel(
    a_desc, b_desc, c_desc, bias_ptr, M, N, K, stride_bias,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    EPILOGUE_SUBTILE: tl.constexpr,
    NUM_SMS: tl.constexpr, EPILOGUE: tl.constexpr, RNE_BF16: tl.constexpr, UPCAST_DOT: tl.constexpr,
    STALE_TILE: tl.constexpr, SAME_HALF: tl.constexpr,
):  # fmt: skip
    start_pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    tile_id_c = start_pid - NUM_SMS
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = grouped_tile(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(tl.cdiv(K, BLOCK_K)):
            a = a_desc.load([pid_m * BLOCK_M, ki * BLOCK_K])
            b = b_desc.load([pid_n * BLOCK_N, ki * BLOCK_K])
            if UPCAST_DOT:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(a, b.T, acc)
        if STALE_TILE:
            tile_id_c = start_pid
        else:
            tile_id_c += NUM_SMS
        pid_m, pid_n = grouped_tile(tile_id_c, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_cm = pid_m * BLOCK_M
        off_cn = pid_n * BLOCK_N
        if EPILOGUE_SUBTILE:
            acc0, acc1 = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            if SAME_HALF:
                acc1 = acc0
            offs_n0 = off_cn + tl.arange(0, BLOCK_N // 2)
            acc0 = _finish(acc0, bias_ptr, offs_n0, N, stride_bias, EPILOGUE, RNE_BF16)
            c_desc.store([off_cm, off_cn], acc0.to(c_desc.dtype))
            acc1 = _finish(acc1, bias_ptr, offs_n0 + BLOCK_N // 2, N, stride_bias, EPILOGUE, RNE_BF16)
            c_desc.store([off_cm, off_cn + BLOCK_N // 2], acc1.to(c_desc.dtype))
        else:
            acc = _finish(acc, bias_ptr, off_cn + tl.arange(0, BLOCK_N), N, stride_bias, EPILOGUE, RNE_BF16)
            c_desc.store([off_cm, off_cn], acc.to(c_desc.dtype))


def _launch(a, b, bias, c, epilogue, **bugs) -> None:
    code = epilogue_code(epilogue)
    if not takes(a, b, c):
        matmul(a=a, b=b, bias=bias, c=c, epilogue=code)
        return
    launch_persistent(_planted_kernel, None, a, b, c, bias, a.shape[0], b.shape[0], a.shape[1], bias.stride(0),
                      EPILOGUE=code, RNE_BF16=needs_bf16_rounding(c), UPCAST_DOT=a.dtype == torch.bfloat16,
                      **{"STALE_TILE": False, "SAME_HALF": False, **bugs})


def control(*, a, b, bias, c, epilogue):
    _launch(a, b, bias, c, epilogue)


def stale_tile(*, a, b, bias, c, epilogue):
    _launch(a, b, bias, c, epilogue, STALE_TILE=True)


def same_half(*, a, b, bias, c, epilogue):
    _launch(a, b, bias, c, epilogue, SAME_HALF=True)
