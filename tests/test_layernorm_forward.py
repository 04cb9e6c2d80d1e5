"""LayerNorm's forward at the launch configurations a GPU gets (kernels/layernorm.py's _ONE_PASS), run through
the interpreter: the interpreter's own rule packs rows differently, so without this no CPU test would run the
tuned constexprs (two rows a program, no masks on whole blocks, one pass up to 32768 columns)."""

from __future__ import annotations

import pytest
import torch

import kernels.layernorm as ln
from kernels.rmsnorm import _MIN_PROGRAMS


def _run(rows: int, cols: int, dtype: torch.dtype, cfg, monkeypatch) -> None:
    monkeypatch.setattr(ln, "forward_config", lambda n_rows, n_cols, interpreted=False: cfg)
    torch.manual_seed(rows * 7919 + cols)
    x = torch.randn(rows, cols, dtype=dtype) * 3 + 5  # a mean far from 0: the centring matters
    w, b = torch.randn(cols, dtype=dtype), torch.randn(cols, dtype=dtype)
    out = torch.full_like(x, float("nan"))
    mean, rstd = torch.full((rows,), float("nan")), torch.full((rows,), float("nan"))
    ln.layernorm(x=x, weight=w, bias=b, out=out, eps=1e-5, has_bias=True, mean=mean, rstd=rstd)
    ref = torch.empty(rows, cols, dtype=torch.float64)
    ref_mean, ref_rstd = torch.empty(rows, dtype=torch.float64), torch.empty(rows, dtype=torch.float64)
    ln.layernorm_ref(x=x.double(), weight=w.double(), bias=b.double(), out=ref, eps=1e-5, has_bias=True,
                     mean=ref_mean, rstd=ref_rstd)
    # one rounding of the output in its dtype, fp32 statistics
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.double(), ref, **tol)
    torch.testing.assert_close(mean.double(), ref_mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(rstd.double(), ref_rstd, rtol=1e-5, atol=0)


@pytest.mark.parametrize("cols", sorted(ln._ONE_PASS))
@pytest.mark.parametrize("ragged", [False, True], ids=["whole-blocks", "ragged"])
def test_tuned_one_pass_matches_the_reference(cols, ragged, monkeypatch):
    cfg = ln.forward_config(10**6, cols)
    assert cfg.single_pass and (cfg.block_m, cfg.num_warps) == ln._ONE_PASS[cols]
    # whole blocks take the EVEN path (no masks); a ragged last block and a short row the masked one
    rows, n = (2 * cfg.block_m + 1, cols - 3) if ragged else (2 * cfg.block_m, cols)
    _run(rows, n, torch.float32, cfg, monkeypatch)


def test_tuned_one_pass_bf16(monkeypatch):
    cfg = ln.forward_config(10**6, 4096)
    _run(2 * cfg.block_m, 4096, torch.bfloat16, cfg, monkeypatch)


def test_which_shapes_get_the_tuned_launch():
    assert ln.forward_config(16384, 4096) == ln.forward_config(10**6, 4096)
    assert ln.forward_config(16384, 4096).block_m == ln._ONE_PASS[4096][0]
    # decode-sized batches and the interpreter keep RMSNorm's rule; so do rows with no measured entry
    small = ln.forward_config(64, 4096)
    assert (small.block_m, small.num_warps) == (1, 16)
    assert ln.forward_config(2 * _MIN_PROGRAMS * 2, 4096, interpreted=True).block_m != ln._ONE_PASS[4096][0]
    assert ln.forward_config(16384, 128).block_n == 128 and 128 not in ln._ONE_PASS
    # past the longest entry, rows go blockwise
    assert not ln.forward_config(16384, 65536).single_pass
    assert ln.forward_config(16384, 20000).single_pass  # padded up to 32768 columns, one pass
