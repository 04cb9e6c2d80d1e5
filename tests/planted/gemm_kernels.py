"""Planted GEMM bugs for the K-scaled tolerance (tests/test_tolerance_rules.py): kernels.matmul's kernel launched
so that it drops the last, partial K block, and a GEMM whose accumulator is rounded to the inputs' 16-bit dtype
after every K block. tests/specs/planted_matmul.toml declares them (``{impl}`` filled in by the test).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import needs_bf16_rounding, round_to_bf16
from kernels.matmul import MatmulConfig, _matmul_kernel, epilogue_code, fused_epilogue, matmul, matmul_ref
from kernels.splitk import unused

__all__ = ["matmul", "matmul_ref", "matmul_drops_k_tail", "matmul_16bit_accumulator"]


def matmul_drops_k_tail(*, a, b, bias, c, epilogue) -> None:
    """The real kernel told K is a whole number of blocks: the ragged last block is never loaded."""
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0:
        return
    cfg = MatmulConfig.interpreted(m, n, k)
    grid = (triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n),)
    ws, cnt = unused(a.device)  # unsplit: the split-K workspace is never touched
    _matmul_kernel[grid](a, b, bias, c, ws, cnt, m, n, k // cfg.block_k * cfg.block_k, a.stride(0), a.stride(1),
                         b.stride(0), b.stride(1), bias.stride(0), c.stride(0), c.stride(1),
                         BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=1,
                         EPILOGUE=epilogue_code(epilogue), RNE_BF16=needs_bf16_rounding(c),
                         UPCAST_DOT=a.dtype == torch.bfloat16)


@triton.jit
def _acc16_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, sam, sak, sbn, sbk, sbias, scm, scn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EPILOGUE: tl.constexpr,
                  RNE_BF16: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok, n_ok = offs_m < M, offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = k0 + offs_k < K
        a = tl.load(a_ptr + offs_m[:, None] * sam + (k0 + offs_k)[None, :] * sak, mask=m_ok[:, None] & k_ok[None, :],
                    other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs_n[None, :] * sbn + (k0 + offs_k)[:, None] * sbk, mask=k_ok[:, None] & n_ok[None, :],
                    other=0.0).to(tl.float32)
        acc = tl.dot(a, b, acc)
        acc = round_to_bf16(acc) if RNE_BF16 else acc.to(tl.float16).to(tl.float32)  # the bug: a 16-bit accumulator
    acc = fused_epilogue(acc, bias_ptr, offs_n, n_ok, sbias, EPILOGUE)
    if RNE_BF16:
        acc = round_to_bf16(acc)
    tl.store(c_ptr + offs_m[:, None] * scm + offs_n[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


def matmul_16bit_accumulator(*, a, b, bias, c, epilogue) -> None:
    """Each 32-deep K block's partial product is added into an accumulator held in the inputs' dtype."""
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0:
        return
    grid = (triton.cdiv(m, 64), triton.cdiv(n, 64))
    _acc16_kernel[grid](a, b, bias, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        bias.stride(0), c.stride(0), c.stride(1), BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,
                        EPILOGUE=epilogue_code(epilogue), RNE_BF16=a.dtype == torch.bfloat16)
