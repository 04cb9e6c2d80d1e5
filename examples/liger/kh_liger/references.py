"""Plain-torch references of Liger's forward ops, one per spec, written from the math and not from Liger's code.

Each takes the spec's keyword arguments and writes its outputs in place. The harness calls it on copies of the
inputs at the reference precision (fp32 for 16-bit cases, fp64 for fp32 cases), so everything here computes
in the dtype it is given; the harness rounds nothing.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def rms_norm(*, x, weight, y, eps, offset, casting_mode):
    """x * rsqrt(mean(x^2) + eps) * (offset + weight), without the weight where it is None, exactly (no casting
    mode: how far each of Liger's casting modes may round is the spec's tolerance)."""
    out = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    y.copy_(out * (offset + weight) if weight is not None else out)


def fused_add_rms_norm(*, x, residual, weight, y, s, eps, offset, casting_mode):
    """s = x + residual, y = rms_norm(s) * (offset + weight), from the exact sum."""
    total = x + residual
    s.copy_(total)
    y.copy_(total * torch.rsqrt(total.pow(2).mean(dim=-1, keepdim=True) + eps) * (offset + weight))


def layer_norm(*, x, weight, bias, y, eps):
    y.copy_(F.layer_norm(x, (x.shape[-1],), weight, bias, eps))


def group_norm(*, x, weight, bias, y, num_channels, num_groups, eps):
    """torch's two-pass group norm (mean, then the mean of the squared deviations) on [batch, channels, ...]."""
    y.copy_(F.group_norm(x, num_groups, weight, bias, eps))


def swiglu(*, a, b, c):
    c.copy_(F.silu(a) * b)


def geglu(*, a, b, c):
    c.copy_(F.gelu(a, approximate="tanh") * b)


def dyt(*, x, alpha, gamma, beta, y):
    out = torch.tanh(alpha * x) * gamma
    y.copy_(out + beta if beta is not None else out)


def rope(*, q, k, cos, sin):
    """HF Llama's apply_rotary_pos_emb (rotate_half) on the first rot_dim = 2 * cos.shape[-1] entries of each
    head, the rest unchanged; q and k are [batch, seq, heads, head_dim], cos and sin [seq, rot_dim / 2]."""
    half = cos.shape[-1]
    c = torch.cat((cos, cos), dim=-1)[None, :, None, :]
    s = torch.cat((sin, sin), dim=-1)[None, :, None, :]
    for t in (q, k):
        rot = t[..., :2 * half]
        rotated = torch.cat((-rot[..., half:], rot[..., :half]), dim=-1)
        t[..., :2 * half] = rot * c + rotated * s


def kl_div(*, y_pred, y_true, loss, reduction, log_target, eps):
    """torch.nn.functional.kl_div, except that a target probability below eps is clamped to eps inside the
    log (Liger's documented eps, 1e-10: the drawn targets are never that small)."""
    if log_target:
        pointwise = torch.exp(y_true) * (y_true - y_pred)
    else:
        pointwise = y_true * (torch.log(torch.clamp(y_true, min=eps)) - y_pred)
    if reduction == "none":
        loss.copy_(pointwise)
        return
    total = pointwise.sum()
    if reduction == "mean":
        total = total / pointwise.numel()
    elif reduction == "batchmean":
        total = total / pointwise.shape[0]
    loss.copy_(total)


def jsd(*, input, target, shift_labels, loss, beta, ignore_index):
    """Generalised JSD(beta) of the student's log-probabilities `input` (Q) and the teacher's `target` (P):
    beta * KL(P || M) + (1 - beta) * KL(Q || M), M = beta * P + (1 - beta) * Q; beta = 0 is KL(P || Q) and
    beta = 1 is KL(Q || P). Summed over the tokens whose label is not ignore_index, divided by their number."""
    q, p = input, target
    if beta == 0.0:
        per_elem = torch.exp(p) * (p - q)
    elif beta == 1.0:
        per_elem = torch.exp(q) * (q - p)
    else:
        log_m = torch.logsumexp(torch.stack((p + math.log(beta), q + math.log(1 - beta))), dim=0)
        per_elem = beta * torch.exp(p) * (p - log_m) + (1 - beta) * torch.exp(q) * (q - log_m)
    per_token = per_elem.sum(dim=-1)
    if shift_labels is not None:
        per_token = per_token[shift_labels != ignore_index]
    # the mean over the kept tokens, NaN over none (0 / 0), as torch's mean-reduced losses and Liger's own
    # kl_div (batchmean) give for an empty batch
    loss.copy_(per_token.sum() / per_token.shape[0])


def cross_entropy(*, input, target, loss, ignore_index, label_smoothing, reduction, softcap):
    """torch's cross entropy of the logits, capped first (softcap * tanh(logits / softcap)) unless softcap is None."""
    logits = softcap * torch.tanh(input / softcap) if softcap is not None else input
    loss.copy_(F.cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction,
                               label_smoothing=label_smoothing))
