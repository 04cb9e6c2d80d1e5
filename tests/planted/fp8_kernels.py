"""Planted FP8 GEMM bugs for tests/test_fp8.py, each a mistake FP8 kernels are known for: one scale for every
output channel where the scales are per row, the operand's bits read as the other FP8 format, the ragged last K
block dropped (kernels.matmul_fp8's kernel told K is whole blocks), and a bf16 accumulator. specs/matmul_fp8.toml
with its backend pointed here runs the generated checks on them.
"""

from __future__ import annotations

import torch
import triton

from kernels.common import needs_bf16_rounding
from kernels.matmul import MatmulConfig
from kernels.matmul_fp8 import _matmul_fp8_kernel, _scale_stride, matmul_fp8, matmul_fp8_ref

__all__ = ["matmul_fp8", "matmul_fp8_ref", "first_scale_only", "e5m2_bits", "drops_k_tail", "bf16_accumulator"]


def first_scale_only(*, a, b, scale_a, scale_b, c) -> None:
    """Per-tensor code path taken for per-row scales: every column scaled by channel 0's scale."""
    c.copy_((a.float() @ b.float().T) * scale_a.float() * scale_b.float()[0])


def e5m2_bits(*, a, b, scale_a, scale_b, c) -> None:
    """The weight's bytes read as e5m2 (the other OCP format): the mix-up of a checkpoint's dtype flag."""
    w = b.view(torch.uint8).view(torch.float8_e5m2).float()
    c.copy_((a.float() @ w.T) * scale_a.float() * scale_b.float().T)


def drops_k_tail(*, a, b, scale_a, scale_b, c) -> None:
    """The real kernel with K rounded down to whole blocks: a ragged last K block is never loaded."""
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0:
        return
    cfg = MatmulConfig.interpreted(m, n, k)
    grid = (triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n),)
    _matmul_fp8_kernel[grid](a, b, scale_a, scale_b, c, m, n, k // cfg.block_k * cfg.block_k, a.stride(0),
                             a.stride(1), b.stride(0), b.stride(1), _scale_stride(scale_a, m, "scale_a"),
                             _scale_stride(scale_b, n, "scale_b"), c.stride(0), c.stride(1),
                             BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=1,
                             RNE_BF16=needs_bf16_rounding(c), IMPRECISE_ACC=None)


def bf16_accumulator(*, a, b, scale_a, scale_b, c) -> None:
    """Partial sums kept in bf16 after every 32 products (a register-saving accumulator)."""
    acc = torch.zeros(a.shape[0], b.shape[0], dtype=torch.bfloat16)
    for k0 in range(0, a.shape[1], 32):
        acc = (acc.float() + a[:, k0:k0 + 32].float() @ b[:, k0:k0 + 32].float().T).to(torch.bfloat16)
    c.copy_(acc.float() * scale_a.float() * scale_b.float().T)
