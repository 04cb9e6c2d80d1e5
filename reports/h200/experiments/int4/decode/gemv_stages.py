"""Where the decode GEMV's time goes beyond its loads, and what a factored dequantisation would win.

The sweep (int4_decode_sweep.py) found the GEMV at M = 1 about 4.5 us above its XOR floor (the same loop with no
arithmetic) at 4096 x 4096 on an H100. Two variants of that loop, same grid, split and loads, split that gap:

- ``dequant``: every word dequantised as the GEMV does (``word_values``: rounded once to the activations' type)
  and widened to fp32, the values summed; no activations read, no multiply-adds. Its time over the XOR floor is
  the dequantisation's; the GEMV's time over it is the activations' and the multiply-adds'.
- ``factored``: the quantisation group factored out, as exllama-style GEMV kernels do: per word the eight nibbles
  are placed under the exponent of 128.0 in fp32 (a shift and a lop3 each: 128 + q exactly), multiplied into
  a's values and summed; per word and row then one multiply-add takes away (128 + z) times the sum of those
  eight activations, and one more applies the scale. About half the instructions per weight, and no rounding of
  the weight: it computes a @ ((q - z) * s).T exactly up to fp32 summation, which is not the spec's contract (the
  weight rounded once to a's type, as the tensor-core tile kernel must). Its error is reported against both: the
  contract's reference, with the spec's tolerance, and an fp64 product of the exact dequantised weight.

M = 1 only, one quantisation group (16 words) a block, the split of K summed in the same launch as the GEMV does.
From the repository root, ``TRITON_INTERPRET=1 python3 reports/h200/experiments/int4/decode/gemv_stages.py
--cpu-check`` runs both variants under the Triton interpreter against fp64 (no GPU); on the GPU,
``int4_decode_sweep.py --part stages`` times them.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
from kernels import int4_gemv as gv  # noqa: E402
from kernels import int4_matmul as q4  # noqa: E402
from kernels.common import cdiv, interpreted, needs_bf16_rounding, round_to_bf16  # noqa: E402
from kernels.int4_dequant import word_values  # noqa: E402

MODES = {"factored": 0, "dequant": 1}
_PAIR_MAGIC = 0x43004300  # a kernel argument, not a constant: LOP3 reads it from the constant bank (an immediate
# would be rematerialised into a register for every use)
_MAGIC = tl.constexpr(0x43000000)  # 128.0 in fp32: a nibble placed at bits 16..19 under it reads 128 + q exactly


@triton.jit
def _nibble(b, i: tl.constexpr):
    """128 + nibble i of each word, in fp32, from its bits: one shift (none for i = 4) and one and-or."""
    if i < 4:
        x = b << (16 - 4 * i)
    elif i == 4:
        x = b
    else:
        x = b >> (4 * i - 16)
    return ((x & 0x000F0000) | _MAGIC).to(tl.float32, bitcast=True)


@triton.jit
def _nibble_pair(b, j: tl.constexpr, magic):
    """128 + nibbles j and j + 4 of each word, in fp32: one and-or puts both under 128.0 as two bf16 halves
    (0x4300 | q), each then widened by a shift or a mask."""
    x = ((b >> (4 * j)) & 0x000F000F) | magic
    return (x << 16).to(tl.float32, bitcast=True), (x & -65536).to(tl.float32, bitcast=True)


@triton.jit
def _block(w_rows, s_rows, z_rows, u0, u_hi, offs_u, stride_sg, stride_zg):
    """The words of block [u0, u0 + BLOCK_U) of each row, with its group's scale and zero point (past the end: no
    words, and the last group's parameters again, unused)."""
    u = u0 + offs_u
    b = tl.load(w_rows + u[None, :], mask=(u < u_hi)[None, :], other=0)
    g = min(u0, u_hi - 1) // offs_u.shape[0]
    return b, tl.load(s_rows + g * stride_sg), tl.load(z_rows + g * stride_zg)


@triton.jit
def _stages_kernel(a_ptr, w_ptr, s_ptr, z_ptr, c_ptr, ws_ptr, cnt_ptr, N, KU, stride_wn, stride_sn, stride_sg,
                   stride_zn, stride_zg, magic, BLOCK_N: tl.constexpr, BLOCK_U: tl.constexpr, SPLIT_K: tl.constexpr,
                   MODE: tl.constexpr, PREFETCH: tl.constexpr, IS_BF16: tl.constexpr, EMULATE: tl.constexpr,
                   RNE_BF16: tl.constexpr):  # fmt: skip
    """c[0, n-block] for one row of a (passed as int32 pairs), one group of 16 words an iteration; each block's
    words, scales and zero points loaded PREFETCH (1 or 2) iterations ahead."""
    ku_split = tl.cdiv(tl.cdiv(KU, BLOCK_U), SPLIT_K) * BLOCK_U
    split = tl.cdiv(KU, ku_split)
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_u = tl.arange(0, BLOCK_U)
    rn = (offs_n % N).to(tl.int64)
    u_lo = pid_k * ku_split
    u_hi = min(KU, u_lo + ku_split)
    w_rows = w_ptr + rn[:, None] * stride_wn
    s_rows = s_ptr + rn * stride_sn
    z_rows = z_ptr + rn * stride_zn
    b_next, s_next, z_next = _block(w_rows, s_rows, z_rows, u_lo, u_hi, offs_u, stride_sg, stride_zg)
    if PREFETCH == 2:
        b_next2, s_next2, z_next2 = _block(w_rows, s_rows, z_rows, u_lo + BLOCK_U, u_hi, offs_u, stride_sg,
                                           stride_zg)  # fmt: skip
    acc = tl.zeros((BLOCK_N, BLOCK_U), dtype=tl.float32)
    for u0 in range(u_lo, u_hi, BLOCK_U):
        b = b_next
        s_raw = s_next
        z = z_next
        u = u0 + offs_u
        if PREFETCH == 2:
            b_next, s_next, z_next = b_next2, s_next2, z_next2
            b_next2, s_next2, z_next2 = _block(w_rows, s_rows, z_rows, u0 + 2 * BLOCK_U, u_hi, offs_u, stride_sg,
                                               stride_zg)  # fmt: skip
        else:
            b_next, s_next, z_next = _block(w_rows, s_rows, z_rows, u0 + BLOCK_U, u_hi, offs_u, stride_sg, stride_zg)
        ok = u < u_hi
        if MODE == 0:
            a0, a1 = gv._pair(tl.load(a_ptr + 4 * u, mask=ok, other=0), IS_BF16)
            a2, a3 = gv._pair(tl.load(a_ptr + 4 * u + 1, mask=ok, other=0), IS_BF16)
            a4, a5 = gv._pair(tl.load(a_ptr + 4 * u + 2, mask=ok, other=0), IS_BF16)
            a6, a7 = gv._pair(tl.load(a_ptr + 4 * u + 3, mask=ok, other=0), IS_BF16)
            v0, v4 = _nibble_pair(b, 0, magic)
            v1, v5 = _nibble_pair(b, 1, magic)
            v2, v6 = _nibble_pair(b, 2, magic)
            v3, v7 = _nibble_pair(b, 3, magic)
            p = a0[None, :] * v0
            p += a1[None, :] * v1
            p += a2[None, :] * v2
            p += a3[None, :] * v3
            p += a4[None, :] * v4
            p += a5[None, :] * v5
            p += a6[None, :] * v6
            p += a7[None, :] * v7
            sum_a = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))
            p -= (z.to(tl.float32) + 128.0)[:, None] * sum_a[None, :]
            acc += s_raw.to(tl.float32)[:, None] * p
        else:
            s_t = tl.broadcast_to(s_raw[:, None], (BLOCK_N, BLOCK_U))
            z_t = tl.broadcast_to(z[:, None], (BLOCK_N, BLOCK_U))
            w0, w1, w2, w3, w4, w5, w6, w7 = word_values(b, s_t, z_t, IS_BF16, EMULATE)
            acc += (((w0.to(tl.float32) + w1.to(tl.float32)) + (w2.to(tl.float32) + w3.to(tl.float32)))
                    + ((w4.to(tl.float32) + w5.to(tl.float32)) + (w6.to(tl.float32) + w7.to(tl.float32))))
    p0 = tl.sum(acc, axis=1)
    if SPLIT_K == 1:
        gv._store_rows(c_ptr, ws_ptr, 0, p0, p0, p0, p0, offs_n, 1, N, 0, 1, 1, False, RNE_BF16)
    else:  # as the GEMV: partials, a ticket, the last program sums them in split order
        gv._store_rows(c_ptr, ws_ptr, pid_k * N, p0, p0, p0, p0, offs_n, 1, N, 0, 1, 1, True, RNE_BF16)
        tl.debug_barrier()
        ticket = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if ticket == split - 1:
            tl.debug_barrier()
            offs_s = tl.arange(0, 16)
            parts = tl.load(ws_ptr + offs_s[:, None] * N + offs_n[None, :],
                            mask=(offs_s < split)[:, None] & (offs_n < N)[None, :], other=0.0, cache_modifier=".cg")
            total = tl.sum(parts, axis=0)
            if RNE_BF16:
                total = round_to_bf16(total)
            tl.store(c_ptr + offs_n, total.to(c_ptr.dtype.element_ty), mask=offs_n < N)
            tl.atomic_xchg(cnt_ptr + pid_n, 0)


def stages(a, w, s, z, c, cfg: gv.GemvConfig, mode: str, prefetch: int = 1) -> None:
    """One launch of a variant: a [1, K] contiguous (read as int32 pairs), w readable as words, c [1, N]."""
    n, ku = w.shape[0], w.shape[1] // 4
    if a.shape[0] != 1 or not a.is_contiguous() or not c.is_contiguous() or cfg.block_u != gv.GROUP_WORDS:
        raise ValueError("gemv_stages: one contiguous row of a, a contiguous c, one group (16 words) a block")
    ws, cnt = gv.scratch(a.device, gv.SPLIT_MAX * n, cdiv(n, 16))
    splits = cdiv(ku, cdiv(cdiv(ku, gv.GROUP_WORDS), cfg.split_k) * gv.GROUP_WORDS)
    wu = w.view(torch.int32)
    _stages_kernel[(cdiv(n, cfg.block_n), splits)](
        a.view(torch.int32), wu, s, z, c, ws, cnt, n, ku, wu.stride(0), s.stride(0), s.stride(1), z.stride(0),
        z.stride(1), _PAIR_MAGIC, BLOCK_N=cfg.block_n, BLOCK_U=cfg.block_u, SPLIT_K=cfg.split_k, MODE=MODES[mode],
        PREFETCH=prefetch,
        IS_BF16=a.dtype == torch.bfloat16, EMULATE=interpreted(a), RNE_BF16=needs_bf16_rounding(c),
        num_warps=cfg.num_warps, num_stages=1)  # fmt: skip


def exact(a, w, s, z) -> torch.Tensor:
    """a @ ((q - z) * s).T in fp64, the weight not rounded: what the factored variant approximates."""
    q = q4.unpack(w).double()
    g = torch.arange(q.shape[1], device=w.device) // q4.GROUP_SIZE
    return a.double() @ ((q - z[:, g].double()) * s[:, g].double()).T


def scaled_error(c, ref, a, w, s, z) -> float:
    """max |c - ref| over the largest sum of |a_k w_k| of a row: the error in units of the dot's own scale."""
    q = q4.unpack(w).double()
    g = torch.arange(q.shape[1], device=w.device) // q4.GROUP_SIZE
    scale = a.double().abs() @ ((q - z[:, g].double()) * s[:, g].double()).abs().T
    return float(((c.double() - ref.double()).abs() / scale.clamp_min(1e-30)).max())


def cpu_check() -> int:
    """Both variants under the interpreter at small shapes: factored against fp64 within fp32 summation error,
    dequant against the sum of the contract's dequantised weight."""
    gen = torch.Generator().manual_seed(0)
    bad = 0
    cases = ((33, 512, 2, torch.bfloat16), (16, 384, 1, torch.float16), (70, 1024, 4, torch.bfloat16))
    for n, k, split, dtype in cases:
        a = torch.randn(1, k, generator=gen).to(dtype)
        w = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
        s = (torch.rand(n, k // 128, generator=gen) * 0.01 + 0.005).to(dtype)
        z = torch.randint(0, 16, (n, k // 128), generator=gen, dtype=torch.uint8)
        cfg = gv.GemvConfig(16, 16, split, 1)
        c = torch.empty(1, n, dtype=dtype)
        stages(a, w, s, z, c, cfg, "factored", prefetch=2 if split > 1 else 1)
        err = scaled_error(c, exact(a, w, s, z), a, w, s, z)
        ok = err <= 2 ** -7  # the output's own rounding (2^-9 of |c| for bf16) and fp32 sums
        d = torch.empty(1, n, dtype=dtype)
        stages(a, w, s, z, d, cfg, "dequant", prefetch=2 if split > 1 else 1)
        want = q4.dequantize(w, s, z, dtype).float().sum(dim=1)
        ok_d = torch.allclose(d.float()[0], want, rtol=2 ** -7, atol=1e-3)
        print(f"N={n} K={k} split={split} {dtype}: factored scaled error {err:.2e} {'ok' if ok else 'WRONG'}; "
              f"dequant {'ok' if ok_d else 'WRONG'}")
        bad += (not ok) + (not ok_d)
    return 1 if bad else 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu-check", action="store_true", help="run both variants under the interpreter")
    if not p.parse_args().cpu_check:
        p.error("the GPU timings run from int4_decode_sweep.py --stages; here only --cpu-check")
    sys.exit(cpu_check())
