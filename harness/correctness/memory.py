"""Whether a huge case fits the device: the checks hold several copies plus an upcast reference."""

from __future__ import annotations

from harness.correctness.args import full_env
from harness.spec.model import Case, Spec

# args + pristine copy + second run + a chunk's temporaries, and the reference at twice the width.
# Measured on the H200: fused_add_rmsnorm fp32 at 2**31 elements peaked near 6.6x its tensor bytes.
_COPIES = 5
_REF_FACTOR = 2
# A backward item holds more: grad outputs and their pristine copies, two runs' gradients, and the reference's
# autograd graph at twice the width (its saved activations and gradients, about four copies of the case). Measured
# on the H200: layernorm's backward, fp32 at 2**31 elements, ran out of memory past 152 GiB, 8.9x its tensor bytes.
_BACKWARD_COPIES = 12


def case_bytes(spec: Spec, case: Case, dtype: str) -> int:
    env = full_env(spec, case, dtype)
    return sum(env[f"bytes_{t.name}"] for t in spec.tensors)


def huge_case_fits(spec: Spec, case: Case, dtype: str, device, backward: bool = False) -> str | None:
    """None when it fits, else the skip reason."""
    import torch

    need = case_bytes(spec, case, dtype) * (_BACKWARD_COPIES if backward else _COPIES + _REF_FACTOR)
    free, _total = torch.cuda.mem_get_info(device.torch_device)
    if need > free:
        return f"needs about {need / 2**30:.1f} GiB of device memory, {free / 2**30:.1f} GiB free"
    return None
