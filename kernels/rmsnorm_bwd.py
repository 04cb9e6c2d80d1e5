"""RMSNorm backward: dx and dweight in Triton, the closed-form reference, and an autograd.Function.

The forward (kernels/rmsnorm.py) computes ``y = x * rstd * w`` per row, ``rstd = rsqrt(mean(x**2) + eps)``.
With ``xhat = x * rstd`` and ``g = dy * w``:

    dx = rstd * (g - xhat * mean(g * xhat))        (mean over the row)
    dw = sum over the rows of dy * xhat

**Saved tensors: x and weight; rstd is recomputed.** The backward cannot write any dx of a row before it has
read that row of x and dy in full (``mean(g * xhat)`` is a row reduction), and ``sum(x**2)`` comes out of that
same read, so recomputing rstd costs no memory traffic: on a row kept in registers it is one more reduction, on
a long row it is summed in the same pass as ``sum(g * x)``. Saving it would cost the forward a second output,
and make the backward take a tensor that must agree with x, which a caller of another forward (torch's,
Liger's) or a test that draws x and dy independently cannot give it.

**dweight is reduced in two deterministic stages, without atomics.** Each program of the first kernel owns a
fixed chunk of consecutive rows (``rows_per_program``): it writes their dx and one row of dweight partial sums
(fp32, fp64 for fp64 inputs) into a workspace ``[programs, hidden]``. The second kernel sums the workspace
down its rows in a fixed order. Same inputs, same bits, on every run (the chunking follows the GPU's SM count,
so two GPU models may differ in the last bits).

**Launch configuration** (:class:`NormBwdConfig`, shared with the LayerNorm backward). The first kernel is
persistent: two programs per SM, each looping over its chunk of rows, so the partials are ``programs x hidden x
4`` bytes (1.6% of the traffic at 16384 x 4096 bf16, 264 programs) and every SM has rows in flight for the
whole launch. A row of up to 8192 columns stays in registers between its reductions and the dx they feed (x
and dy read once), and the row loop is software-pipelined (``tl.range(num_stages=...)``: up to 3 rows' loads
in flight). A longer row is read twice in blocks, the second pass walking backwards so that it finds the blocks
the first read last still in L2; its partial row is read, added to and written back per pair of rows (it stays
in L2 too), with a barrier so every thread sees the last pair's stores.

Measured on an H200 (Triton 3.6; 20 back-to-back launches, best of 4; bytes: x, dy, dx, w and dw once each),
against the 4260 GB/s of a device copy in the same run: 16384 x 4096 bf16 114.2 us, 3527 GB/s (83%); fp32
210.5 us, 3827 GB/s (90%); 32768 x 4096 bf16 210.7 us (90%); 8192 x 8192 bf16 150.2 us (63%). Rows longer than
8192 columns fall well short: 198 us (48%) at 4096 x 16384 with blocks of 4096 at 16 warps, which spilled on
sm_100 (the shipped blocks of 2048 at 8 warps are not measured yet).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.common import (
    Plans,
    accumulation_dtype,
    cdiv,
    dependent_launch,
    interpreted,
    next_power_of_2,
    no_launch,
    signature,
    sm_count,
)
from kernels.fastlaunch import FastLaunch
from kernels.norm_autograd import NormLaunchers, NormPlans, PlannedFunction
from kernels.rmsnorm import forward_plan as _fwd_plan


@dataclass(frozen=True)
class NormBwdLimits:
    """What differs between the RMSNorm and LayerNorm backwards' launch configurations. Each choice was the
    fastest measured on the H200 (sweeps of block, warps, stages and programs per SM) among those that compile
    without spills for sm_80/sm_90/sm_100 in the contiguous and padded layouts."""

    max_block_n: int  # longest row kept in registers
    long_block_n: int  # a longer row's column block (two rows per iteration)
    max_stages: int  # row tiles of x and dy the row loop keeps in flight (tl.range num_stages), at most
    stage_bytes: int  # ... and at most this many bytes of them


# RMSNorm keeps rows of up to 8192 columns in registers (at 32 warps: 16 spilled on unaligned rows); LayerNorm,
# with a second accumulator (dbias), up to 4096 (8192 spilled at 16 and 32 warps), and takes longer rows in
# blocks of 4096 at 16 warps, where RMSNorm's spilled and it takes blocks of 2048 at 8 warps.
# Stages: at 16384 x 4096 bf16, 3 took RMSNorm from 156 us (1 stage) to 113 us. LayerNorm's first kernel given
# the forward's mean and rstd is fastest at 3 too (101.0 us; 2: 129.3, 4: 103.5); recomputing them, with a mean
# summed before the centred sums, it went from 108.6 us at 3 to 105.7 us at 5
# (reports/h200/experiments/backward/layernorm_probe*.log). Either way two programs' buffers fit an SM's shared
# memory on sm_80 too (5 stages keep 4 tiles of 16 KiB: 128 KiB for two programs, of 164).
RMSNORM_LIMITS = NormBwdLimits(max_block_n=8192, long_block_n=2048, max_stages=3, stage_bytes=64 << 10)
LAYERNORM_LIMITS = NormBwdLimits(max_block_n=4096, long_block_n=4096, max_stages=3, stage_bytes=64 << 10)
LAYERNORM_RECOMPUTE_LIMITS = dataclasses.replace(LAYERNORM_LIMITS, max_stages=5, stage_bytes=80 << 10)
# Elements per iteration on a row kept in registers: one row of 4096 or 8192 columns, several shorter ones.
_TILE = 4096
_LONG_BLOCK_M = 2
# Persistent programs per SM: 2 (1 or 4 were slower at 16384 x 4096 and 4096 x 16384), or 1 for a program of 32
# warps, of which one fits an SM.
_PROGRAMS_PER_SM = 2
# Elements of each tile a thread holds: 16 (two 16-byte loads of a 16-bit row), 8 on 8192-column rows.
_PER_THREAD = 16
_PER_THREAD_WIDE = 8
# The interpreter runs programs one after another at a high cost each: a few programs, each a few row tiles.
_INTERPRETED_PROGRAMS = 4
_INTERPRETED_BLOCK_M = 8


@dataclass(frozen=True)
class NormBwdConfig:
    block_m: int  # rows per iteration
    block_n: int  # columns per iteration, a power of two
    num_warps: int
    single_pass: bool  # the whole row fits one block: x and dy are read once
    rows_per_program: int  # the chunk of consecutive rows one program reduces into one partial row
    num_stages: int = 1  # loads of this many iterations in flight (the row loop's, or a long row's block loops')

    @classmethod
    @functools.lru_cache(maxsize=256)
    def for_shape(cls, n_rows: int, n_cols: int, sms: int, bytes_per_element: int = 4,
                  interpreted: bool = False, limits: NormBwdLimits = RMSNORM_LIMITS) -> NormBwdConfig:
        """``bytes_per_element``: of x and grad_out together (4 for bf16)."""
        block_n = max(next_power_of_2(max(n_cols, 1)), 16)
        single_pass = block_n <= limits.max_block_n
        block_n = block_n if single_pass else limits.long_block_n
        per_thread = _PER_THREAD_WIDE if single_pass and block_n > _TILE else _PER_THREAD
        if interpreted:
            block_m = min(_INTERPRETED_BLOCK_M, next_power_of_2(max(n_rows, 1)))
            programs = _INTERPRETED_PROGRAMS
        else:
            programs = sms * (1 if per_thread == _PER_THREAD_WIDE else _PROGRAMS_PER_SM)
            per_program = cdiv(max(n_rows, 1), programs)
            # a tile of up to _TILE elements (two rows of a long one), no taller than a program's share of the rows
            block_m = max(1, min(_TILE // block_n if single_pass else _LONG_BLOCK_M,
                                 1 << (per_program.bit_length() - 1)))
        rows_per_program = cdiv(cdiv(max(n_rows, 1), programs), block_m) * block_m
        num_warps = min(max(block_m * block_n // (32 * per_thread), 1), 32)
        stages = 1
        # pipelined where that measured faster: not a long row's short block loops, nor 8192-column rows at 32
        # warps (RMSNorm 8192 x 8192 bf16: 150 us unpipelined, 163 us with 2 stages)
        if single_pass and per_thread == _PER_THREAD and not interpreted:
            stages = max(1, min(limits.max_stages, limits.stage_bytes // (block_m * block_n * bytes_per_element)))
        return cls(block_m=block_m, block_n=block_n, num_warps=num_warps, single_pass=single_pass,
                   rows_per_program=rows_per_program, num_stages=stages)

    def even(self, n_cols: int) -> bool:
        """A row kept in registers is exactly one block: the kernels drop their column masks."""
        return self.single_pass and self.block_n == n_cols

    def programs(self, n_rows: int) -> int:
        return cdiv(n_rows, self.rows_per_program)

    def check(self, n_cols: int, who: str) -> None:
        if self.single_pass and self.block_n < n_cols:
            raise ValueError(f"{who}: a single-pass config needs block_n >= hidden, got {self.block_n} < {n_cols}")
        if self.rows_per_program % self.block_m:
            raise ValueError(f"{who}: rows_per_program {self.rows_per_program} is not a multiple of block_m "
                             f"{self.block_m}")


def accumulator(t: torch.Tensor):
    """The kernels' accumulation type for ``t`` (kernels.common.accumulation_dtype), in torch and in Triton."""
    acc = accumulation_dtype(t)
    return acc, (tl.float64 if acc == torch.float64 else tl.float32)


def config_for(x: torch.Tensor, grad_out: torch.Tensor, config: NormBwdConfig | None, who: str,
               limits: NormBwdLimits = RMSNORM_LIMITS) -> NormBwdConfig:
    n_rows, n_cols = x.shape
    itemsize = x.element_size() + grad_out.element_size()
    cfg = config or NormBwdConfig.for_shape(n_rows, n_cols, sm_count(x.device), itemsize, interpreted=interpreted(x),
                                            limits=limits)
    cfg.check(n_cols, who)
    return cfg


# Building blocks of the RMSNorm and LayerNorm backward kernels (kernels/layernorm_bwd.py imports them).


@triton.jit
def row_chunk(rows_per_program, n_rows, TRIGGER: tl.constexpr):
    """This program's id (int64) and its chunk of rows, [start, end). With ``TRIGGER``, the partial sum's launch
    may begin (programmatic dependent launch): its programs take the SMs' free slots and wait there for this
    kernel's end, so neither its launch nor its programs' start comes after this kernel's last program."""
    if TRIGGER:
        tl.extra.cuda.gdc_launch_dependents()
    pid = tl.program_id(0).to(tl.int64)
    start = pid * rows_per_program
    return pid, start, tl.minimum(start + rows_per_program, n_rows)


@triton.jit
def load_x_dy(x_ptr, dy_ptr, rows, c, row_end, n_cols, stride_xm, stride_xn, stride_dym, stride_dyn,
              ACC: tl.constexpr, EVEN_N: tl.constexpr):
    """The [rows, c] tiles of x and dy in ACC, 0 outside the chunk's rows and the row, and their mask (with
    ``EVEN_N``, a row exactly one block wide, the rows' alone: [rows, 1])."""
    if EVEN_N:
        # no per-element column test: at 16384 x 4096 the LayerNorm backward was issue-bound (0.59 of a
        # scheduler's slots), and the masks and selects were instructions of every element
        mask = (rows < row_end)[:, None]
    else:
        mask = (rows < row_end)[:, None] & (c < n_cols)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_xm + c[None, :] * stride_xn, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + rows[:, None] * stride_dym + c[None, :] * stride_dyn, mask=mask, other=0.0)
    return x.to(ACC), dy.to(ACC), mask


@triton.jit
def load_vector(ptr, c, stride, n_cols, ACC: tl.constexpr):
    """``ptr[c]`` as a [1, block] row in ACC (0 past the row)."""
    return tl.load(ptr + c * stride, mask=c < n_cols, other=0.0).to(ACC)[None, :]


@triton.jit
def store_dx(dx_ptr, rows, c, stride_dxm, stride_dxn, dx, mask):
    tl.store(dx_ptr + rows[:, None] * stride_dxm + c[None, :] * stride_dxn, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def add_to_partial(part_ptr, c, n_cols, tile):
    """Add a tile's column sums into this program's partial row (a long row's read, add, write back)."""
    ok = c < n_cols
    tl.store(part_ptr + c, tl.load(part_ptr + c, mask=ok, other=0.0) + tl.sum(tile, axis=0), mask=ok)


# a row count of 1 specialised (decode) made ptxas pick other, spilling register budgets
@triton.jit(do_not_specialize=["n_rows", "rows_per_program"])
def _rmsnorm_bwd_kernel(
    x_ptr, w_ptr, dy_ptr, dx_ptr, part_ptr, n_rows, n_cols, rows_per_program,
    stride_xm, stride_xn, stride_w, stride_dym, stride_dyn, stride_dxm, stride_dxn, eps,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_PASS: tl.constexpr, ACC: tl.constexpr,
    STAGES: tl.constexpr, EVEN_N: tl.constexpr, TRIGGER: tl.constexpr,
):  # fmt: skip
    pid, row_start, row_end = row_chunk(rows_per_program, n_rows, TRIGGER)
    part_row = part_ptr + pid * n_cols
    # int64 columns: a column-major tensor's column stride is `tokens`, which times hidden passes 2**31
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    if SINGLE_PASS:
        w = load_vector(w_ptr, cols, stride_w, n_cols, ACC)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)
        for r0 in tl.range(row_start, row_end, BLOCK_M, num_stages=STAGES):
            rows = r0 + tl.arange(0, BLOCK_M)
            x, dy, mask = load_x_dy(x_ptr, dy_ptr, rows, cols, row_end, n_cols, stride_xm, stride_xn, stride_dym,
                                    stride_dyn, ACC, EVEN_N)
            g = dy * w
            # mean(g * xhat) = rstd * mean(g * x): both row sums at once, neither waiting for the other
            rstd = tl.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)[:, None]
            mean_gxhat = (tl.sum(g * x, axis=1) / n_cols)[:, None] * rstd
            xhat = x * rstd
            store_dx(dx_ptr, rows, cols, stride_dxm, stride_dxn, (g - xhat * mean_gxhat) * rstd, mask)
            acc += dy * xhat
        tl.store(part_row + cols, tl.sum(acc, axis=0), mask=cols < n_cols)
    else:
        for c0 in range(0, n_cols, BLOCK_N):
            tl.store(part_row + c0 + cols, tl.zeros([BLOCK_N], dtype=ACC), mask=c0 + cols < n_cols)
        n_blocks = tl.cdiv(n_cols, BLOCK_N)
        for r0 in range(row_start, row_end, BLOCK_M):
            rows = r0 + tl.arange(0, BLOCK_M)
            ss = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)  # sum of x**2
            gx = tl.zeros([BLOCK_M, BLOCK_N], dtype=ACC)  # sum of g * x
            for c0 in tl.range(0, n_cols, BLOCK_N, num_stages=STAGES):
                x, dy, _ = load_x_dy(x_ptr, dy_ptr, rows, c0 + cols, row_end, n_cols, stride_xm, stride_xn,
                                     stride_dym, stride_dyn, ACC, False)
                ss += x * x
                gx += dy * load_vector(w_ptr, c0 + cols, stride_w, n_cols, ACC) * x
            rstd = tl.rsqrt(tl.sum(ss, axis=1) / n_cols + eps)[:, None]
            mean_gxhat = (tl.sum(gx, axis=1) / n_cols)[:, None] * rstd  # mean(g * xhat)
            # every thread's partial-row stores of the last iteration are visible before this one reads them
            tl.debug_barrier()
            for i in tl.range(0, n_blocks, num_stages=STAGES):
                c = (n_blocks - 1 - i) * BLOCK_N + cols
                x, dy, mask = load_x_dy(x_ptr, dy_ptr, rows, c, row_end, n_cols, stride_xm, stride_xn, stride_dym,
                                        stride_dyn, ACC, False)
                xhat = x * rstd
                g = dy * load_vector(w_ptr, c, stride_w, n_cols, ACC)
                store_dx(dx_ptr, rows, c, stride_dxm, stride_dxn, (g - xhat * mean_gxhat) * rstd, mask)
                add_to_partial(part_row, c, n_cols, dy * xhat)


@triton.jit
def _sum_partials_kernel(part_ptr, out0_ptr, out1_ptr, n_parts, n_cols, stride_k, stride_p, stride_o0, stride_o1,
                         BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, WAIT: tl.constexpr):
    if WAIT:  # launched while the first kernel runs (programmatic dependent launch): its partials come after it
        tl.extra.cuda.gdc_wait()
    which = tl.program_id(1)  # the gradient: 0 or 1 (LayerNorm's dbias)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    part = part_ptr + which.to(tl.int64) * stride_k
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=part_ptr.dtype.element_ty)
    for p0 in range(0, n_parts, BLOCK_P):
        p = (p0 + tl.arange(0, BLOCK_P)).to(tl.int64)
        acc += tl.load(part + p[:, None] * stride_p + cols[None, :], mask=(p < n_parts)[:, None] & col_ok[None, :],
                       other=0.0)
    total = tl.sum(acc, axis=0)
    if which == 0:
        tl.store(out0_ptr + cols * stride_o0, total.to(out0_ptr.dtype.element_ty), mask=col_ok)
    else:
        tl.store(out1_ptr + cols * stride_o1, total.to(out1_ptr.dtype.element_ty), mask=col_ok)


# Columns and partial rows per program of the partial sum, the fastest on the H200 at 16384 x 4096 bf16 (261
# partial rows, all summed in one step; reports/h200/experiments/backward/layernorm_probe*.log): 16 x 512 at 4
# warps, 4.9 us for one gradient and 5.7 us for two (16 x 256: 5.2 and 6.0; 32 x 64, the first choice, 7.0 us
# for one); both of LayerNorm's in one launch cost less than a second launch.
_SUM_BLOCK_N = 16
_SUM_BLOCK_P = 512
_SUM_WARPS = 4
# The partial sum as a programmatic dependent launch of the first kernel, where the GPU has it (a switch for the
# probe that measures it: reports/h200/experiments/backward/).
PDL_SUM = True


def pdl_sum(t: torch.Tensor) -> bool:
    return PDL_SUM and dependent_launch(t)


_sum_partials_launch = FastLaunch(_sum_partials_kernel)


def _sum_args(partials: torch.Tensor, outs: tuple[torch.Tensor, ...], n_parts: int | None):
    """(grid, scalars, keyword arguments) of the partial sum's launch on these operands."""
    if not 1 <= len(outs) <= 2 or partials.dim() != 3 or partials.shape[0] != len(outs):
        raise ValueError(f"sum_partials: expected [1 or 2, parts, hidden] partials for as many outputs, got "
                         f"{tuple(partials.shape)} for {len(outs)}")
    n_parts = partials.shape[1] if n_parts is None else n_parts
    n_cols = partials.shape[2]
    if interpreted(partials):
        block_n, block_p = next_power_of_2(max(n_cols, 1)), next_power_of_2(max(n_parts, 1))
    else:
        block_n, block_p = _SUM_BLOCK_N, _SUM_BLOCK_P
    wait = pdl_sum(partials)
    scalars = (n_parts, n_cols, partials.stride(0), partials.stride(1), outs[0].stride(0), outs[-1].stride(0))
    kwargs = dict(BLOCK_P=block_p, BLOCK_N=block_n, WAIT=wait, num_warps=_SUM_WARPS,
                  **({"launch_pdl": True} if wait else {}))
    return (cdiv(n_cols, block_n), len(outs)), scalars, kwargs


def sum_partials(partials: torch.Tensor, outs: tuple[torch.Tensor, ...], n_parts: int | None = None) -> None:
    """``outs[k][j] = sum_p partials[k, p, j]`` over the first ``n_parts`` rows (default all), in a fixed order;
    ``partials`` is ``[len(outs), programs, hidden]``, one or two gradients, summed in one launch."""
    grid, scalars, kwargs = _sum_args(partials, outs, n_parts)
    _sum_partials_launch[grid](partials, outs[0], outs[-1], *scalars, **kwargs)


def sum_partials_plan(partials: torch.Tensor, outs: tuple[torch.Tensor, ...]):
    """:func:`sum_partials` worked out once for these operands' signature, as ``run(partials, outs)`` (a backward's
    plan, kernels.common.Plans: its partials are new each call, of the same shape)."""
    grid, scalars, kwargs = _sum_args(partials, outs, None)
    fast = _sum_partials_launch.pinned(grid, **kwargs)

    def run(partials, outs):
        fast(partials, outs[0], outs[-1], *scalars)
    return run


def _check_shapes(x, weight, grad_out, grad_x, grad_weight) -> None:
    hidden = x.shape[-1] if x.dim() else -1
    if (x.dim() != 2 or weight.shape != (hidden,) or grad_out.shape != x.shape or grad_x.shape != x.shape
            or grad_weight.shape != (hidden,)):
        raise ValueError(
            f"rmsnorm_bwd: expected x, grad_out and grad_x [tokens, hidden], weight and grad_weight [hidden]; got x "
            f"{tuple(x.shape)}, weight {tuple(weight.shape)}, grad_out {tuple(grad_out.shape)}, grad_x "
            f"{tuple(grad_x.shape)}, grad_weight {tuple(grad_weight.shape)}"
        )


_rmsnorm_bwd_launch = FastLaunch(_rmsnorm_bwd_kernel)


def _partials_args(x, weight, grad_out, grad_x, config: NormBwdConfig | None):
    """(grid, the partials' shape and type, scalars, keyword arguments) of the first stage's launch."""
    n_rows, n_cols = x.shape
    cfg = config_for(x, grad_out, config, "rmsnorm_bwd")
    acc_torch, acc_tl = accumulator(x)
    programs = cfg.programs(n_rows)
    scalars = (n_rows, n_cols, cfg.rows_per_program, x.stride(0), x.stride(1), weight.stride(0),
               grad_out.stride(0), grad_out.stride(1), grad_x.stride(0), grad_x.stride(1))
    kwargs = dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, SINGLE_PASS=cfg.single_pass, ACC=acc_tl,
                  STAGES=cfg.num_stages, EVEN_N=cfg.even(n_cols), TRIGGER=pdl_sum(x), num_warps=cfg.num_warps)
    return (programs,), ((1, programs, n_cols), acc_torch), scalars, kwargs, cfg


def rmsnorm_bwd_partials(*, x, weight, grad_out, grad_x, eps, config: NormBwdConfig | None = None):
    """The first stage: writes grad_x and returns (the partial dweight rows, the config)."""
    grid, (shape, acc), scalars, kwargs, cfg = _partials_args(x, weight, grad_out, grad_x, config)
    partials = torch.empty(shape, dtype=acc, device=x.device)
    _rmsnorm_bwd_launch[grid](x, weight, grad_out, grad_x, partials, *scalars, eps, **kwargs)
    return partials, cfg


_BWD_PLANS = Plans()


def rmsnorm_bwd(*, x: torch.Tensor, weight: torch.Tensor, grad_out: torch.Tensor, grad_x: torch.Tensor,
                grad_weight: torch.Tensor, eps: float, config: NormBwdConfig | None = None) -> None:
    """Triton RMSNorm backward into grad_x (x's shape) and grad_weight (weight's); any strides on every tensor,
    grad_out's zero strides (an expanded gradient) included. Deterministic. Planned per call signature
    (kernels.common.Plans), unless ``config`` is given."""
    sig = None if config is not None else signature(x, weight, grad_out, grad_x, grad_weight)
    _BWD_PLANS.run(sig, lambda: _bwd_plan(x, weight, grad_out, grad_x, grad_weight, config),
                   x, weight, grad_out, grad_x, grad_weight, eps)


def _zero_grad_weight(x, weight, grad_out, grad_x, grad_weight, eps) -> None:
    grad_weight.zero_()  # no rows: dweight is an empty sum


def _bwd_plan(x, weight, grad_out, grad_x, grad_weight, config):
    """Checks the operands and works out both launches for their signature: ``launch(x, weight, grad_out, grad_x,
    grad_weight, eps)``."""
    _check_shapes(x, weight, grad_out, grad_x, grad_weight)
    if x.shape[0] == 0:
        return _zero_grad_weight
    if x.shape[1] == 0:
        return no_launch
    grid, (shape, acc), scalars, kwargs, _ = _partials_args(x, weight, grad_out, grad_x, config)
    fast = _rmsnorm_bwd_launch.pinned(grid, **kwargs)
    total = sum_partials_plan(torch.empty(shape, dtype=acc, device=x.device), (grad_weight,))

    def launch(x, weight, grad_out, grad_x, grad_weight, eps):
        partials = torch.empty(shape, dtype=acc, device=x.device)
        fast(x, weight, grad_out, grad_x, partials, *scalars, float(eps))
        total(partials, (grad_weight,))
    return launch


def rmsnorm_bwd_ref(*, x: torch.Tensor, weight: torch.Tensor, grad_out: torch.Tensor, grad_x: torch.Tensor,
                    grad_weight: torch.Tensor, eps: float) -> None:
    """The closed form in plain torch, in fp32 or the inputs' precision if higher."""
    acc = torch.promote_types(x.dtype, torch.float32)
    xf, dy = x.to(acc), grad_out.to(acc)
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    xhat = xf * rstd
    g = dy * weight.to(acc)
    grad_x.copy_(rstd * (g - xhat * (g * xhat).mean(dim=-1, keepdim=True)))
    grad_weight.copy_((dy * xhat).sum(dim=0))


def _forward_plan(rows, weight, bias, out, mean, rstd):
    plan = _fwd_plan(rows, weight, out)
    return lambda rows, weight, bias, out, mean, rstd, eps: plan(rows, weight, out, eps)


def _backward_plan(rows, weight, grad_rows, grad_x, grad_weight, grad_bias, mean, rstd):
    plan = _bwd_plan(rows, weight, grad_rows, grad_x, grad_weight, None)
    return lambda rows, weight, grad_rows, grad_x, grad_weight, grad_bias, mean, rstd, eps: plan(
        rows, weight, grad_rows, grad_x, grad_weight, eps)


_AUTOGRAD = NormPlans(NormLaunchers(forward=_forward_plan, backward=_backward_plan, bias=False, stats=False))


class RMSNormFunction(PlannedFunction):
    """RMSNorm over the last dimension of x (any leading dimensions): the Triton forward, the Triton backward,
    planned per call signature (kernels/norm_autograd.py)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return _AUTOGRAD.forward(ctx, x, weight, None, eps)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        return *_AUTOGRAD.backward(ctx, grad_out), None


def rmsnorm_autograd(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``RMSNormFunction.apply``: a differentiable RMSNorm, as Liger's ``LigerRMSNormFunction``."""
    return RMSNormFunction.apply(x, weight, eps)
