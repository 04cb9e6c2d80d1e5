"""The int4 decode GEMV (kernels/int4_gemv.py) under the Triton interpreter: right against the reference at the
spec's tolerance for every kind of launch (split or not, a partial last group, a ragged last block of rows, one or
several groups a block, activations read in pairs or one by one), the same bits on every call, and the per-tile
counters of its one-launch split reduction left at zero for the next launch.

The generated int4_matmul tests reach the GEMV only where a case has M = 1 and K a multiple of 8; these cover
its launch shapes directly."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from harness.correctness.numerics import mismatch
from harness.spec.load import load as load_spec
from harness.spec.model import Case
from kernels import int4_gemv as gv
from kernels import int4_matmul as q4

SPEC = load_spec(Path(__file__).resolve().parents[1] / "specs" / "int4_matmul.toml")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _inputs(n: int, k: int, dtype: torch.dtype, seed: int = 0, m: int = 1):
    gen = torch.Generator().manual_seed(seed)
    groups = -(-k // 128)
    lo, hi = 0.05 / math.sqrt(k + 1), 0.2 / math.sqrt(k + 1)
    a = torch.randn(m, k, generator=gen).to(dtype)
    w = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    s = (torch.rand(n, groups, generator=gen) * (hi - lo) + lo).to(dtype)
    z = torch.randint(0, 16, (n, groups), generator=gen, dtype=torch.uint8)
    return a, w, s, z


def _run(a, w, s, z, cfg) -> torch.Tensor:
    c = torch.full((a.shape[0], w.shape[0]), float("nan"), dtype=a.dtype)
    gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=cfg)
    return c


def _problem(c, a, w, s, z, dtype_name) -> str | None:
    ref = torch.empty_like(c)
    q4.int4_matmul_ref(a=a, w=w, scales=s, zeros=z, c=ref)
    case = Case("edge", (("M", a.shape[0]), ("N", w.shape[0]), ("K", a.shape[1])))
    return mismatch(c, ref, SPEC.tolerance(dtype_name, "c", case))


LAUNCHES = [  # (M, N, K, config): what each one reaches
    (1, 65, 256, gv.GemvConfig(32, 16, 1, 2)),  # no split; a ragged last block of rows
    (1, 40, 1000, gv.GemvConfig(16, 16, 3, 2)),  # a split of 3 ranges; the last group 104 wide
    (1, 33, 1024, gv.GemvConfig(16, 32, 4, 1)),  # two groups a block, loaded per word; a split of 4
    (1, 17, 384, gv.GemvConfig(16, 64, 2, 2)),  # a block wider than a split's range
    (1, 1, 8, gv.GemvConfig(16, 16, 1, 1)),  # one word
    (2, 40, 1000, gv.GemvConfig(16, 16, 3, 2)),  # two accumulators, split
    (3, 33, 256, gv.GemvConfig(16, 32, 1, 2)),  # four accumulators, the fourth row past M (never stored)
    (4, 40, 1000, gv.GemvConfig(32, 16, 5, 1)),  # four rows, a split of 5 (its partials [5, 4, N])
]


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize(("m", "n", "k", "cfg"), LAUNCHES,
                         ids=[f"M{m}-N{n}-K{k}-{c.block_n}x{c.block_u}s{c.split_k}" for m, n, k, c in LAUNCHES])
def test_the_gemv_matches_the_reference_and_repeats_bitwise(m, n, k, cfg, dtype_name):
    a, w, s, z = _inputs(n, k, DTYPES[dtype_name], m=m)
    c = _run(a, w, s, z, cfg)
    assert _problem(c, a, w, s, z, dtype_name) is None
    assert torch.equal(_run(a, w, s, z, cfg).view(torch.int16), c.view(torch.int16))


def test_the_split_reduction_leaves_its_counters_at_zero():
    a, w, s, z = _inputs(40, 1000, torch.bfloat16)
    _run(a, w, s, z, gv.GemvConfig(16, 16, 3, 2))
    ws, cnt = gv.scratch(a.device, 0, 0)
    assert cnt.abs().sum().item() == 0
    # a counter not reset would make a later launch's second program of that tile sum before the third has
    # written its partial: the check must see it (the workspace is cleared, so no stale partial stands in)
    cnt[1] = 1
    ws.fill_(float("nan"))
    c = _run(a, w, s, z, gv.GemvConfig(16, 16, 3, 2))
    cnt.zero_()
    assert _problem(c, a, w, s, z, "bf16") is not None


def test_strided_activations_are_read_one_by_one():
    a, w, s, z = _inputs(24, 512, torch.bfloat16)
    strided = torch.empty(1, 1024, dtype=a.dtype)[:, ::2]
    strided.copy_(a)
    c = _run(strided, w, s, z, gv.GemvConfig(16, 16, 2, 2))
    assert _problem(c, a, w, s, z, "bf16") is None


def test_int4_matmul_sends_one_row_with_word_readable_weights_to_the_gemv(monkeypatch):
    from kernels.common import Plans

    calls = []
    monkeypatch.setattr(q4, "_PLANS", Plans())  # no plan of an earlier test's
    monkeypatch.setattr(q4, "gemv_plan", lambda *args: calls.append(args) or (lambda *operands: None))
    a, w, s, z = _inputs(8, 256, torch.bfloat16)
    q4.int4_matmul(a=a, w=w, scales=s, zeros=z, c=torch.empty(1, 8, dtype=a.dtype))
    assert len(calls) == 1
    q4.int4_matmul(a=a.expand(2, -1), w=w, scales=s, zeros=z, c=torch.empty(2, 8, dtype=a.dtype))
    odd = _inputs(8, 258, torch.bfloat16)  # K not a multiple of 8: w is read as bytes, by the tile kernel
    q4.int4_matmul(a=odd[0], w=odd[1], scales=odd[2], zeros=odd[3], c=torch.empty(1, 8, dtype=a.dtype))
    assert len(calls) == 1
