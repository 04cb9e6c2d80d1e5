"""flash_attention's TMA route (k and v blocks through descriptors, kernels/flash_attention.py) under the Triton
interpreter: the pointer route's results to the last unit for each layout it takes (heads-major, rows padded,
sequence-major) with causal, GQA and ragged key counts; an inf or NaN stored right after a head's last key (which its
last block's descriptor load reads) kept out of the result; and the layouts it must refuse sent to the pointer route.

The generated tests run the triton_hopper backend on a GPU only (sm_90 tiles); these cover its TMA loads on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.correctness.numerics import mismatch
from harness.spec.load import load as load_spec
from harness.spec.model import Case
from kernels import flash_attention as fa
from tests.e2e import seeded

# on a GPU the compiled kernels, on a CPU the interpreter (tests/conftest.py's on_device)
pytestmark = pytest.mark.usefixtures("on_device")

SPEC = load_spec(Path(__file__).resolve().parents[1] / "specs" / "flash_attention.toml")
TMA = fa.FlashAttentionConfig(32, 32, 4, 1, 1, tma=True)
POINTERS = fa.FlashAttentionConfig(32, 32, 4, 1, 1)


def _tensor(b, h, s, d, layout, dtype, gen):
    if layout == "heads":
        return torch.randn(b, h, s, d, generator=gen).to(dtype)
    if layout == "padded":  # rows of d + 8 values
        return torch.randn(b, h, s, d + 8, generator=gen).to(dtype)[..., :d]
    return torch.randn(b, s, h, d, generator=gen).to(dtype).transpose(1, 2)  # sequence-major, vLLM's


def _ulps_apart(a: torch.Tensor, b: torch.Tensor) -> int:
    """The most units in the last place between two 16-bit results (same-signed, as these are). The interpreter
    runs each dot as an fp32 numpy matmul, and k's tile transposed from a [keys, d] load may be summed in another
    order than the pointer route's [d, keys] load: under pytest one bf16 output in 4096 came out one unit apart.
    Any masking or addressing error moves outputs by far more."""
    return int((a.view(torch.int16).int() - b.view(torch.int16).int()).abs().max())


def _run(q, k, v, causal, cfg):
    out = torch.full_like(q, float("nan"))
    fa.flash_attention(q=q, k=k, v=v, out=out, causal=causal, sm_scale=q.shape[-1] ** -0.5, config=cfg)
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("shape", "causal", "layout"), [
    ((2, 4, 2, 40, 40, 64), True, "heads"),  # GQA 2:1, a ragged last block
    ((1, 2, 2, 33, 70, 64), True, "seq"),  # bottom-right causal, seq_q != seq_kv
    ((2, 2, 1, 48, 50, 64), False, "padded"),
    ((1, 2, 2, 16, 100, 128), True, "heads"),
])
def test_the_tma_route_matches_the_pointer_route(dtype, shape, causal, layout):
    b, hq, hkv, sq, skv, d = shape
    gen = seeded(sum(shape))
    q = _tensor(b, hq, sq, d, layout, dtype, gen)
    k, v = (_tensor(b, hkv, skv, d, layout, dtype, gen) for _ in range(2))
    assert fa._kv_descriptors(k, v, TMA) is not None, "this layout must take the TMA route"
    got = _run(q, k, v, causal, TMA)
    assert _ulps_apart(got, _run(q, k, v, causal, POINTERS)) <= 1
    ref = torch.empty_like(q, dtype=torch.float32)
    fa.flash_attention_ref(q=q.float(), k=k.float(), v=v.float(), out=ref, causal=causal, sm_scale=d ** -0.5)
    case = Case("edge", tuple(zip(("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"), shape, strict=True)))
    name = "bf16" if dtype == torch.bfloat16 else "fp16"
    assert mismatch(got, ref.to(dtype), SPEC.tolerance(name, "out", case)) is None


# the poisoned head computes NaN (numpy warns under the interpreter), as it should; head 0 is what is checked
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
@pytest.mark.parametrize("layout", ["heads", "seq"])
def test_values_stored_after_a_heads_last_key_do_not_reach_its_result(poison, layout):
    """Keys 50..63 of head 0's last block of 32 are head 1's first keys (heads-major) or sequence 1's
    (sequence-major) in the descriptor's 2-D view, which zero-fills only past its last row: their scores are
    masked, and their values must be too, or an inf or NaN there makes head 0's p @ v NaN."""
    gen = seeded(1)
    b, h = (1, 2) if layout == "heads" else (2, 1)
    q = _tensor(b, h, 10, 64, layout, torch.bfloat16, gen)
    k, v = (_tensor(b, h, 50, 64, layout, torch.bfloat16, gen) for _ in range(2))
    second = (slice(None), 1) if layout == "heads" else (1,)
    first = (slice(None), 0) if layout == "heads" else (0,)
    k[second], v[second] = poison, poison
    assert fa._kv_descriptors(k, v, TMA) is not None
    got = _run(q, k, v, False, TMA)[first]
    assert torch.isfinite(got).all()
    assert _ulps_apart(got, _run(q, k, v, False, POINTERS)[first]) <= 1


def test_layouts_without_a_2d_view_take_the_pointer_route():
    base = torch.randn(2, 4, 16, 64, dtype=torch.bfloat16)
    assert fa._kv_view(base) is not None
    assert fa._kv_view(base.transpose(1, 2).contiguous().transpose(1, 2)) is not None  # sequence-major
    assert fa._kv_view(base.transpose(2, 3).contiguous().transpose(2, 3)) is None  # d not unit-stride
    assert fa._kv_view(base[:, ::2]) is None  # every other head: rows of a head are not one run
    assert fa._kv_view(base.flatten()[1:7681].view(2, 4, 15, 64)) is None  # a base 2 bytes past 16-byte alignment
    assert fa._kv_descriptors(base, base, POINTERS) is None  # not asked for
    assert fa._kv_descriptors(base.float(), base.float(), TMA) is None  # fp32 keeps the pointer route


def test_a_planned_tma_call_reads_each_calls_own_k_and_v(monkeypatch):
    """Without a config the launcher plans a signature once: its TMA descriptors are the planning call's fields
    over each later call's own k and v (kernels.common.rebaser). A second call with other tensors matches the
    pointer route on them, so no descriptor still points at the first call's."""
    monkeypatch.setattr(fa, "_PLANS", fa.Plans())
    monkeypatch.setattr(fa.FlashAttentionConfig, "for_shape", classmethod(lambda cls, *a, **kw: TMA))
    gen = seeded(11)

    def qkv():
        return tuple(_tensor(1, 2, 40, 64, "heads", torch.bfloat16, gen) for _ in range(3))

    for q, k, v in (qkv(), qkv()):
        out = torch.full_like(q, float("nan"))
        fa.flash_attention(q=q, k=k, v=v, out=out, causal=True, sm_scale=0.125)
    assert len(fa._PLANS) == 1
    pointers = torch.full_like(q, float("nan"))
    fa.flash_attention(q=q, k=k, v=v, out=pointers, causal=True, sm_scale=0.125, config=POINTERS)
    assert _ulps_apart(out, pointers) <= 1
