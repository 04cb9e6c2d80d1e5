"""Launchers whose keyword parameters match, or do not match, tests/test_spec_language.py's spec."""

from __future__ import annotations

import torch


def quant_ref(*, x, q, scale):
    xf = x.to(torch.float32)
    absmax = xf.abs().amax(dim=-1, keepdim=True) if x.shape[-1] else torch.zeros_like(scale)
    scale.copy_(absmax / 127)
    q.copy_(torch.round(xf * torch.where(absmax == 0, 0, 127 / absmax.clamp_min(1e-30))).to(torch.int8))


def quant_wrong_name(*, x, q, scales):  # the spec says "scale"
    quant_ref(x=x, q=q, scale=scales)


def quant_positional(x, /, *, q, scale):
    quant_ref(x=x, q=q, scale=scale)


def quant_any(**kwargs):
    quant_ref(**kwargs)
