"""vLLM's vendored kernels and torch paths under the harness's calling convention.

The harness calls every implementation with keyword arguments only: each tensor of the spec's [inputs] and
[outputs] by name, each [params] entry by name (docs/spec.md). vLLM's launchers take positional arguments and
allocate their outputs, so each adapter maps the names onto vLLM's call and returns vLLM's own tensors (a dict
by output name); the harness checks what a backend returns. Where a launcher takes an output buffer
(per_token_group_quant_fp8's out_q), it is given the harness's, so that buffer sits between guard bands.

Nothing here works around a vLLM defect. An optional tensor (the gated norm's z and bias, `present` in its spec)
arrives as None where the case leaves it out, as vLLM's call takes it.

One workaround off the GPU, not of vLLM: _layer_norm_fwd launches inside ``with torch.cuda.device(x.device.index)``,
and a CPU or meta tensor's index is None, which torch 2.13 rejects (``TypeError: '<' not supported between
instances of 'NoneType' and 'int'`` in torch.cuda._exchange_device, where the docstring promises a no-op). For a
tensor that is not on a CUDA device (the Triton interpreter's CPU tensors, the compile matrix's meta tensors), and
only for the call, ``torch.cuda.device(None)`` is made that no-op.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from kh_vllm.block_fp8_native import native_per_token_group_quant_fp8
from kh_vllm.fp8_utils import per_token_group_quant_fp8 as _vllm_quant
from kh_vllm.layernorm_gated import rms_norm_gated as _vllm_rms_norm_gated
from kh_vllm.mamba_mixer2 import Mixer2RMSNormGated


def per_token_group_quant_fp8(*, x, q, scale, group_size, eps, column_major, ue8m0):
    """fp8_utils.per_token_group_quant_fp8(x, group_size, eps, dtype, column_major_scales, out_q, use_ue8m0):
    its Triton path (the vendored platform has no CUDA extension), q written into the harness's buffer."""
    x_q, x_s = _vllm_quant(x, group_size, eps=eps, column_major_scales=column_major, out_q=q, use_ue8m0=ue8m0)
    return {"q": x_q, "scale": x_s}


def per_token_group_quant_fp8_test_native(*, x, q, scale, group_size, eps, column_major, ue8m0):
    """vLLM's test reference, native_per_token_group_quant_fp8(x, group_size, eps): row-major scales only."""
    if column_major or ue8m0:
        raise ValueError("native_per_token_group_quant_fp8 has row-major, unrounded scales only "
                         f"(column_major={column_major}, ue8m0={ue8m0})")
    x_q, x_s = native_per_token_group_quant_fp8(x, group_size, eps=eps)
    return {"q": x_q, "scale": x_s}


@contextlib.contextmanager
def _no_device_index_is_a_no_op(x: torch.Tensor):
    if x.device.type == "cuda":
        yield
        return
    real = torch.cuda.device
    torch.cuda.device = lambda index: contextlib.nullcontext() if index is None else real(index)
    try:
        yield
    finally:
        torch.cuda.device = real


def rms_norm_gated(*, x, z, weight, bias, y, eps, group_size, norm_before_gate):
    """layernorm_gated.rms_norm_gated(x, weight, bias, z, eps, group_size, norm_before_gate)."""
    with _no_device_index_is_a_no_op(x):
        out = _vllm_rms_norm_gated(x, weight, bias, z=z, eps=eps, group_size=group_size,
                                   norm_before_gate=norm_before_gate)
    return {"y": out}


@functools.lru_cache(maxsize=32)
def _mixer2(hidden: int, groups: int, eps: float) -> Mixer2RMSNormGated:
    return Mixer2RMSNormGated(full_hidden_size=hidden, full_n_groups=groups, eps=eps)


def mixer2_rms_norm_gated_native(*, x, z, weight, bias, y, eps, group_size, norm_before_gate):
    """Mixer2RMSNormGated.forward_native(x, gate), one process: Mamba2's layer gates before the norm, has a gate
    and no bias, so any other case is refused."""
    if bias is not None or z is None or norm_before_gate:
        raise ValueError("Mixer2RMSNormGated gates before the norm, with a gate and no bias "
                         f"(z given: {z is not None}, bias given: {bias is not None}, "
                         f"norm_before_gate={norm_before_gate})")
    layer = _mixer2(x.shape[-1], x.shape[-1] // group_size, eps)
    layer.weight.data = weight  # as vLLM's own test loads it (test_mamba_mixer2.py)
    with torch.no_grad():  # vLLM runs its layers without autograd; the weight is an nn.Parameter
        return {"y": layer.forward_native(x, z)}
