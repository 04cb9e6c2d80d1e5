"""matmul's split-K (kernels/matmul.py with kernels/splitk.py) under the Triton interpreter: right against the
reference at the spec's tolerance with every epilogue applied after the sum, the same bits on every call, the
counters left at zero, a counter left set caught by the generated check, and split configs offered to the
autotuner only for the shapes they are for."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.correctness.numerics import mismatch
from harness.spec.load import load as load_spec
from harness.spec.model import Case
from kernels import matmul as mm
from kernels import splitk

SPEC = load_spec(Path(__file__).resolve().parents[1] / "specs" / "matmul.toml")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _inputs(m: int, n: int, k: int, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=gen) / k ** 0.5).to(dtype)
    b = torch.randn(n, k, generator=gen).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype)
    return a, b, bias


def _run(a, b, bias, epilogue) -> torch.Tensor:
    c = torch.full((a.shape[0], b.shape[0]), float("nan"), dtype=a.dtype)
    mm.matmul(a=a, b=b, bias=bias, c=c, epilogue=epilogue)
    return c


def _problem(c, a, b, bias, epilogue, dtype_name) -> str | None:
    ref = torch.empty_like(c)
    mm.matmul_ref(a=a, b=b, bias=bias, c=ref, epilogue=epilogue)
    case = Case("edge", (("M", a.shape[0]), ("N", b.shape[0]), ("K", a.shape[1]), ("epilogue", epilogue)))
    return mismatch(c, ref, SPEC.tolerance(dtype_name, "c", case))


def _split_launches(monkeypatch) -> list[int]:
    """The SPLIT_K of every interpreted launch of _matmul_kernel."""
    seen, original = [], mm._matmul_kernel.run

    def watched(*args, **kwargs):
        seen.append(kwargs.get("SPLIT_K", 1))
        return original(*args, **kwargs)

    monkeypatch.setattr(mm._matmul_kernel, "run", watched)
    return seen


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize("epilogue", [0, 1, 3, 4])
def test_a_split_launch_matches_the_reference_and_repeats_bitwise(monkeypatch, epilogue, dtype_name):
    seen = _split_launches(monkeypatch)
    a, b, bias = _inputs(40, 72, 300, DTYPES[dtype_name])  # K: two ranges of whole 128-blocks, the last partial
    c = _run(a, b, bias, epilogue)
    assert seen == [2]  # the interpreter splits wherever a GPU launch could
    assert _problem(c, a, b, bias, epilogue, dtype_name) is None
    assert torch.equal(_run(a, b, bias, epilogue).view(torch.int16), c.view(torch.int16))
    ws, cnt = splitk.scratch(a.device, 0, 0)
    assert cnt.abs().sum().item() == 0


def test_a_counter_left_set_is_caught():
    a, b, bias = _inputs(40, 72, 300, torch.bfloat16)
    _run(a, b, bias, 1)
    ws, cnt = splitk.scratch(a.device, 0, 0)
    # the first split of tile 0 would draw the last ticket and sum before the second has written its partial
    cnt[0] = 1
    ws.fill_(float("nan"))
    c = _run(a, b, bias, 1)
    cnt.zero_()
    assert _problem(c, a, b, bias, 1, "bf16") is not None


def test_split_configs_are_offered_only_for_few_tiles_over_a_long_k():
    t = torch.empty(16, dtype=torch.bfloat16)
    configs = [c.as_triton() for c in mm.CONFIGS + mm.SPLIT_CONFIGS]

    def offered(m, n, k):
        named = {"M": m, "N": n, "K": k, "a_ptr": t, "b_ptr": t, "stride_ak": 1, "stride_bk": 1,
                 "stride_am": k, "stride_bn": k}
        return sorted({c.kwargs.get("SPLIT_K", 1) for c in mm.prune_configs(configs, named)})

    assert offered(128, 4096, 14336) == [1, 2, 4]
    assert offered(16, 4096, 14336) == [1]      # decode: no split helped there
    assert offered(128, 4096, 4096) == [1]      # K too short to split
    assert offered(4096, 4096, 14336) == [1]    # tiles enough
    assert offered(256, 16384, 14336) == [1]    # the workspace would pass 32 MiB
