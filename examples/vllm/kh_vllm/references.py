"""Plain-torch references of the vendored vLLM kernels, one per spec, written from the math, not from vLLM's code.

Each takes the spec's keyword arguments and writes its outputs in place. The harness calls it on copies of the
inputs at the reference precision (fp32 for 16-bit cases, fp64 for fp32 cases), so everything here computes in
the dtype it is given.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448


def _grouped(t: torch.Tensor, group_size: int) -> torch.Tensor:
    """[..., groups * group_size] as [..., groups, group_size]; the group count is explicit, so 0 columns work."""
    return t.reshape(*t.shape[:-1], t.shape[-1] // group_size, group_size)


def per_token_group_quant_fp8(*, x, q, scale, group_size, eps, column_major, ue8m0):
    """Per group of ``group_size`` columns: scale = max(max |x|, eps) / 448, rounded up to a power of two when
    ``ue8m0`` (DeepGEMM's scale format); q = the e4m3 value nearest x / scale (ties to even), saturated at
    +-448. ``column_major`` is where the scales are stored, not what they are."""
    groups = _grouped(x, group_size)
    s = groups.abs().amax(dim=-1, keepdim=True).clamp(min=eps) / E4M3_MAX
    if ue8m0:
        s = torch.exp2(torch.ceil(torch.log2(s)))
    quantised = (groups / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    q.copy_(quantised.reshape(x.shape))
    scale.copy_(s.squeeze(-1))


def rms_norm_gated(*, x, z, weight, bias, y, eps, group_size, norm_before_gate):
    """Per group of ``group_size`` columns, x * rsqrt(mean(x^2) + eps), then * weight (+ bias); gated by silu(z)
    after the norm (norm_before_gate) or before it. z and bias are optional (None)."""
    if z is not None and not norm_before_gate:
        x = x * F.silu(z)
    groups = _grouped(x, group_size)
    out = (groups * torch.rsqrt(groups.pow(2).mean(dim=-1, keepdim=True) + eps)).reshape(x.shape) * weight
    if bias is not None:
        out = out + bias
    if z is not None and norm_before_gate:
        out = out * F.silu(z)
    y.copy_(out)
