# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
#
# Vendored from vLLM, https://github.com/vllm-project/vllm (Apache License 2.0):
#   vllm/model_executor/layers/mamba/mamba_mixer2.py at commit 1133c1f545812bc0f45513acfc1eb67005c321ff, the class
#   Mixer2RMSNormGated (Mamba2's gated RMSNorm layer), as it is: its forward_native is the plain-torch path vLLM
#   itself runs when the layer's groups are more than one or tensor parallelism is on. Only the imports of vLLM
#   internals are replaced, each by the smallest local equivalent below, all for one process (tensor-parallel
#   world size 1); nothing of the class is changed, so its typing.Union stays (ruff's UP007 is off here).
# ruff: noqa: UP007

from typing import Union

import torch
from torch import nn

from .layernorm_gated import rms_norm_gated  # was: from vllm.model_executor.layers.mamba.ops.layernorm_gated ...


# was: from vllm.distributed import (get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size,
#                                    tensor_model_parallel_all_gather, tensor_model_parallel_all_reduce)
def get_tensor_model_parallel_world_size() -> int:
    return 1


def get_tensor_model_parallel_rank() -> int:
    return 0


def tensor_model_parallel_all_reduce(x: torch.Tensor) -> torch.Tensor:
    return x  # one rank: the sum over ranks is the local value


def tensor_model_parallel_all_gather(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return x  # one rank: the gather is the local tensor


# was: from vllm.model_executor.custom_op import CustomOp (forward() dispatches to forward_cuda on a GPU; here the
# caller picks forward_native or forward_cuda itself)
class CustomOp(nn.Module):
    @staticmethod
    def register(name: str):
        return lambda cls: cls


# was: from vllm.model_executor.model_loader.weight_utils import sharded_weight_loader (rank 0 of 1: a plain copy)
def sharded_weight_loader(shard_axis: int):
    def loader(param: torch.Tensor, loaded_weight: torch.Tensor) -> None:
        param.data.copy_(loaded_weight)

    return loader


# was: from vllm.model_executor.utils import set_weight_attrs
def set_weight_attrs(weight: torch.Tensor, weight_attrs: dict | None) -> None:
    for key, value in (weight_attrs or {}).items():
        setattr(weight, key, value)


# Adapted from transformers.models.mamba2.modeling_mamba2.MambaRMSNormGated
@CustomOp.register("mixer2_gated_rms_norm")
class Mixer2RMSNormGated(CustomOp):

    def __init__(self,
                 full_hidden_size: int,
                 full_n_groups: int,
                 use_rms_norm: bool = True,
                 eps: float = 1e-6):
        super().__init__()
        self.tp_size = get_tensor_model_parallel_world_size()
        self.tp_rank = get_tensor_model_parallel_rank()
        self.full_hidden_size = full_hidden_size
        self.group_size = full_hidden_size // full_n_groups
        self.per_rank_hidden_size = full_hidden_size // self.tp_size
        self.n_groups = full_hidden_size // self.group_size

        self.variance_epsilon = eps
        self.use_rms_norm = use_rms_norm
        if self.use_rms_norm:
            # Register norm weight only if we're actually applying RMSNorm
            self.weight = nn.Parameter(torch.ones(self.per_rank_hidden_size))
            set_weight_attrs(self.weight,
                             {"weight_loader": sharded_weight_loader(0)})
        else:
            # Avoid checkpoint mismatch by skipping unused parameter
            self.register_parameter("weight", None)
        assert (self.full_hidden_size % self.tp_size == 0
                ), "Tensor parallel world size must divide hidden size."

    def forward_native(
        self,
        x: torch.Tensor,
        gate: torch.Tensor,
    ):
        # Three tensor-parallel cases:
        #   1. n_groups is 1
        #      In this case we parallelize along the reduction dim.
        #      Each rank computes a local sum of squares followed by AllReduce
        #   2. tp_size divides n_groups
        #      Each rank only reduces within its local group(s).
        #      No collective ops necessary.
        #   3. The general case can be pretty complicated so we AllGather
        #      the input and then redundantly compute the RMSNorm.
        input_dtype = x.dtype
        x = x * nn.functional.silu(gate.to(torch.float32))
        if not self.use_rms_norm:
            return x.to(input_dtype)

        if self.n_groups == 1:
            if self.tp_size > 1:
                # Compute local sum and then reduce to obtain global sum
                local_sums = x.pow(2).sum(dim=-1, keepdim=True)
                global_sums = tensor_model_parallel_all_reduce(local_sums)
                # Calculate the variance
                count = self.tp_size * x.shape[-1]
                variance = global_sums / count

            else:
                variance = x.pow(2).mean(-1, keepdim=True)
            x = x * torch.rsqrt(variance + self.variance_epsilon)
        else:
            redundant_tp: bool = self.n_groups % self.tp_size != 0
            if redundant_tp:
                # To handle the general case, redundantly apply the variance
                x = tensor_model_parallel_all_gather(x, -1)

            *prefix_dims, hidden_dim = x.shape
            group_count = hidden_dim // self.group_size
            x_grouped = x.view(*prefix_dims, group_count, self.group_size)
            variance = x_grouped.pow(2).mean(-1, keepdim=True)
            x_grouped = x_grouped * torch.rsqrt(variance +
                                                self.variance_epsilon)
            x = x_grouped.view(*prefix_dims, hidden_dim)

            if redundant_tp:
                start = self.per_rank_hidden_size * self.tp_rank
                end = start + self.per_rank_hidden_size
                x = x[..., start:end]

        return self.weight * x.to(input_dtype)

    def forward_cuda(
        self,
        x: torch.Tensor,
        gate: torch.Tensor,
    ) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        input_dtype = x.dtype
        if not self.use_rms_norm:
            # Keep gate in float32 for numerical stability during silu
            return x * nn.functional.silu(gate.to(
                torch.float32)).to(input_dtype)

        if self.tp_size > 1 or self.n_groups != 1:
            return self.forward_native(x, gate)

        return rms_norm_gated(x,
                              self.weight.data,
                              bias=None,
                              z=gate,
                              eps=self.variance_epsilon,
                              norm_before_gate=False)
