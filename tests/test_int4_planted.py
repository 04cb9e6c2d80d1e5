"""Planted int4_matmul bugs: each must fail the generated correctness checks of specs/int4_matmul.toml, at the
spec's own tolerance, with the numerics check's message; the correct kernel (Triton, and a torch control built
like the planted ones) must pass every edge and ci case.

The planted implementations are plain torch (reference speed is plenty for the CPU tier's shapes): unpack, pick
each k's group, dequantise, round the weight to the activations' dtype, matmul in fp32, one rounding into c; each
bug is one switch of :func:`_int4_matmul_torch`. A copy of the spec (tmp_path/int4_matmul.toml) names them as its
triton backend; everything else, the reference, the cases and the tolerance, is the spec's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from harness.spec.load import load as load_spec
from tests.e2e import run_all, with_backend

SPEC = Path(__file__).resolve().parents[1] / "specs" / "int4_matmul.toml"
GROUP = 128


def _int4_matmul_torch(a, w, scales, zeros, c, *, swap_nibbles=False, zero="zeros", group=GROUP, floor_groups=False):
    """c = a @ dequant(w).T in torch, with switches for the planted bugs: the nibble order swapped, the zero point
    ignored (``zero`` = "none") or taken as the symmetric 8 (``"eight"``), groups of ``group`` k, and the group
    count floored (``floor_groups``: a partial last group gets the previous group's scale and zero point)."""
    n, k = w.shape[0], 2 * w.shape[1]
    wi = w.to(torch.int32)
    lo, hi = wi & 0xF, wi >> 4
    if swap_nibbles:
        lo, hi = hi, lo
    q = torch.stack((lo, hi), dim=-1).reshape(n, k).to(torch.float32)
    g = torch.arange(k, device=w.device) // group
    if floor_groups:
        g = g.clamp(max=max(k // GROUP - 1, 0))
    g = g.clamp(max=max(scales.shape[1] - 1, 0))  # k // 64 runs past the last group: clamp, do not crash
    z = {"zeros": zeros[:, g].to(torch.float32), "none": 0.0, "eight": 8.0}[zero]
    w_deq = ((q - z) * scales[:, g].to(torch.float32)).to(a.dtype)
    c.copy_(a.to(torch.float32) @ w_deq.to(torch.float32).T)


def correct_torch(*, a, w, scales, zeros, c):
    _int4_matmul_torch(a, w, scales, zeros, c)


def swapped_nibbles(*, a, w, scales, zeros, c):
    """The high nibble taken as the even k (the AWQ/GPTQ int32 packings differ in order; a port gets it wrong)."""
    _int4_matmul_torch(a, w, scales, zeros, c, swap_nibbles=True)


def zero_point_ignored(*, a, w, scales, zeros, c):
    _int4_matmul_torch(a, w, scales, zeros, c, zero="none")


def symmetric_zero_point(*, a, w, scales, zeros, c):
    """The zero point taken as 8, as a symmetric (GPTQ sym=True) kernel does, instead of the stored one."""
    _int4_matmul_torch(a, w, scales, zeros, c, zero="eight")


def group_size_64(*, a, w, scales, zeros, c):
    """k // 64 instead of k // 128: from k = 64 on, each k reads a later group's scale and zero point."""
    _int4_matmul_torch(a, w, scales, zeros, c, group=64)


def floored_group_count(*, a, w, scales, zeros, c):
    """G = K // 128 instead of ceil(K / 128): the partial last group uses the previous group's scale and zero."""
    _int4_matmul_torch(a, w, scales, zeros, c, floor_groups=True)


def planted_spec(tmp_path: Path, impl: str):
    """specs/int4_matmul.toml with its triton backend ``tests.test_int4_planted:<impl>`` (the name must stay)."""
    return with_backend(tmp_path, "int4_matmul", "kernels.int4_matmul:int4_matmul", f"tests.test_int4_planted:{impl}")


def _cases(messages: list[str]) -> set[str]:
    return {m.partition(":")[0] for m in messages}


def _nonempty(spec, tiers=("edge", "ci")) -> set[str]:
    """Case ids with an output to compare and a K to sum over."""
    return {c.id for t in tiers for c in spec.cases[t] if all(c.values[s] > 0 for s in ("M", "N", "K"))}


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["int4_matmul", "correct_torch"])
def test_correct_kernels_pass(tmp_path, impl):
    """The Triton kernel (interpreted on a CPU) and the torch control the planted bugs are built from."""
    spec = planted_spec(tmp_path, impl) if impl != "int4_matmul" else load_spec(SPEC)
    assert run_all(spec) == {}


@pytest.mark.parametrize("impl", ["swapped_nibbles", "zero_point_ignored", "symmetric_zero_point"])
def test_every_value_wrong_fails_numerics_on_every_case(tmp_path, impl):
    """Bugs that change most weights: every case with something to compute fails, in both dtypes, on numerics
    (nothing else: the outputs are written, in bounds, deterministic), with the spec's K-scaled bound."""
    spec = planted_spec(tmp_path, impl)
    failures = run_all(spec)
    assert sorted(failures) == [("bf16", "numerics"), ("fp16", "numerics")], failures
    for (dtype, _), messages in failures.items():
        assert _cases(messages) == _nonempty(spec), (dtype, sorted(_nonempty(spec) - _cases(messages)))
        for m in messages:
            assert "numerics: c: " in m and " outside atol=" in m and f"dtype={dtype}" in m, m
            assert "first bad index (" in m and "got " in m and "expected " in m, m


def test_group_size_64_fails_exactly_where_k_reaches_64(tmp_path):
    """k // 64: k < 64 still reads group 0, so K = 2 passes; every case with K >= 64 fails."""
    spec = planted_spec(tmp_path, "group_size_64")
    failures = run_all(spec)
    assert sorted(failures) == [("bf16", "numerics"), ("fp16", "numerics")], failures
    want = {i for i in _nonempty(spec) if int(re.search(r"K=(\d+)", i).group(1)) > 64}
    assert want and "M=3,N=65,K=2" not in want
    for messages in failures.values():
        assert _cases(messages) == want
        assert all("numerics: c: " in m and " outside atol=" in m for m in messages)


def test_floored_group_count_fails_exactly_the_cases_with_a_partial_last_group(tmp_path):
    """Only the tail group is wrong: the generated edge cases with K % 128 != 0 (2, 130, 258, 200, 1000, 300)
    catch it, and the ones with whole groups (256, 384, 4096) cannot."""
    spec = planted_spec(tmp_path, "floored_group_count")
    failures = run_all(spec)
    assert sorted(failures) == [("bf16", "numerics"), ("fp16", "numerics")], failures
    want = {i for i in _nonempty(spec) if int(re.search(r"K=(\d+)", i).group(1)) % GROUP}
    whole = _nonempty(spec) - want
    assert {"M=3,N=65,K=256", "M=3,N=65,K=384", "M=1,N=256,K=4096"} <= whole
    # K = 2: one partial group and no previous one, so the floored count clamps back to group 0: right by luck
    want.discard("M=3,N=65,K=2")
    for messages in failures.values():
        assert _cases(messages) == want
        assert all("numerics: c: " in m and " outside atol=" in m for m in messages)
