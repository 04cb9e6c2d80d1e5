"""Per-row FP8 quantisers in plain torch (q = x / s in e4m3, s = amax / 448), correct and with planted bugs,
for tests/test_fp8_outputs.py: every generated check must handle an FP8 output without a harness crash."""

from __future__ import annotations

import torch

E4M3_MAX = 448.0


def quant_ref(*, x, q, s):
    amax = x.float().abs().amax(dim=-1, keepdim=True) if x.numel() else x.float().abs()
    scale = torch.clamp(amax, min=1e-12) / E4M3_MAX
    s.copy_(scale.reshape(s.shape))
    q.copy_((x.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(q.dtype))


def quant(*, x, q, s):
    if x.numel() == 0:
        return
    quant_ref(x=x, q=q, s=s)


def quant_skips_last_row(*, x, q, s):
    """A grid one row short: the last row of q keeps whatever was there."""
    if x.shape[0] > 1:
        quant(x=x[:-1], q=q[:-1], s=s[:-1])
        s[-1:].copy_(x[-1:].float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-12).reshape(-1) / E4M3_MAX)


def quant_nan_scale(*, x, q, s):
    """No floor under the scale: an all-zero row gets scale 0 and q = 0 / 0 = NaN (vLLM's fp16 reference)."""
    if x.numel() == 0:
        return
    amax = x.float().abs().amax(dim=-1, keepdim=True)
    x = x.clone()
    x[0].zero_()
    amax[0] = 0
    s.copy_((amax / E4M3_MAX).reshape(s.shape))
    q.copy_((x.float() / (amax / E4M3_MAX)).to(q.dtype))


def quant_fnuz_max(*, x, q, s):
    """Scales to e4m3fnuz's largest value (240, AMD's encoding) while storing e4m3fn, whose largest is 448."""
    if x.numel() == 0:
        return
    scale = x.float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 240.0
    s.copy_(scale.reshape(s.shape))
    q.copy_((x.float() / scale).to(q.dtype))


def quant_noisy(*, x, q, s):
    """A result that changes from run to run (an unordered reduction's last bit, here made visible)."""
    quant(x=x, q=q, s=s)
    if x.numel():
        s.add_(torch.rand(s.shape, dtype=s.dtype) * 1e-7 * s)
