"""Helpers shared by the kernel modules: whether a launch runs under the Triton interpreter, the bf16 rounding
that gives interpreted runs GPU numerics, the SM count, and building a CUDA C++ backend.

They live here, not in one kernel's module, so a kernel that needs them does not import (and, for
``harness affected``, depend on) another kernel. Kernel modules never import the harness, and neither does this.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

from kernels.fastlaunch import FastLaunch

# An H100/H200's SM count, standing in for a GPU's where launches are recorded on meta tensors (`harness matrix`).
_RECORDING_SMS = 132


# Host-side integer helpers for launchers. triton.cdiv and triton.next_power_of_2 are the same arithmetic, but
# from Triton 3.5 they are constexpr functions whose __call__ unwraps constexpr arguments first: on the H200's
# host, cProfile put three such calls at a tenth of layernorm's launcher (bench/gpu_host_profile.py).
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The least power of two >= n (0 for n <= 0, as Triton's)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


class CachedAutotune:
    """An autotuned kernel launched through the config its autotuner picked, after the first launch of a key.

    Triton's Autotuner.run rebuilds its key on every call (a dict of every argument, each dtype as a string), and
    on the H200's host that was as long as the launch itself (bench/gpu_host_profile.py). The key here is at least
    as fine as the autotuner's: its key arguments' values and every argument's dtype. Only a CUDA launch is
    cached; elsewhere (meta tensors under `harness matrix`, which records every config) the autotuner runs as
    it is. ``launch = CachedAutotune(autotuned)``, then ``launch[grid](*args, **kwargs)`` as with the autotuner.

    The picked config launches through :class:`~kernels.fastlaunch.FastLaunch` of the bare kernel, after its
    pre_hook has run here: so a kernel whose configs set TMA descriptors' boxes (which FastLaunch leaves to
    Triton when it wraps the autotuner) still skips Triton's binder on a replay, keyed on the boxes just set.
    """

    def __init__(self, autotuned) -> None:
        self.autotuned = autotuned
        names = list(autotuned.arg_names)
        self._keys = [(names.index(k), k) for k in autotuned.keys]
        self._picked: dict[tuple, tuple] = {}  # key -> (config, its launch keyword arguments)
        self.fast = FastLaunch(autotuned.fn)  # the picked configs' launches

    def __getitem__(self, grid):
        return functools.partial(self._launch, grid)

    def _launch(self, grid, *args, **kwargs):
        """Launches; returns the config launched with, where it is kept (a CUDA launch), else None."""
        key = (tuple(args[i] if i < len(args) else kwargs.get(name) for i, name in self._keys),
               tuple(getattr(a, "dtype", None) for a in args), tuple(sorted(kwargs.items())))
        picked = self._picked.get(key)
        if picked is None:
            self.autotuned[grid](*args, **kwargs)
            if not _on_cuda(args):
                return None
            cfg = self.autotuned.best_config
            self._picked[key] = (cfg, cfg.all_kwargs())
            return cfg
        cfg, cfg_kwargs = picked
        if cfg.pre_hook is not None:  # as Autotuner.run does before each launch: e.g. a TMA descriptor's box
            cfg.pre_hook({**dict(zip(self.autotuned.arg_names, args, strict=False)), **kwargs, **cfg_kwargs})
        self.fast[grid](*args, **kwargs, **cfg_kwargs)
        return cfg


class Plans:
    """A launcher's plans, one per call signature (:func:`signature`): what it worked out from its operands'
    metadata (checks passed, route, config, grid, scalar arguments) as a callable taking the operands. A later call
    with the same signature would work out the same, so it calls the plan, which binds its tensors and launches:
    the Python a launcher repeats per call is host time an eager caller waits on. Past ``capacity`` signatures,
    new ones are planned on every call. A plan holds no tensor: each call passes its own."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._plans: dict[tuple, object] = {}

    def get(self, sig: tuple):
        return self._plans.get(sig)

    def keep(self, sig: tuple, plan):
        if len(self._plans) < self.capacity:
            self._plans[sig] = plan
        return plan

    def run(self, sig: tuple | None, make: Callable[[], Callable[..., None] | None], *operands) -> None:
        """Launches ``operands`` through the plan kept for ``sig``, else through the plan ``make()`` works out,
        kept unless ``sig`` is None (a call whose options the signature does not cover: a tuning experiment's).
        A ``make`` that returns None launched the call itself (a plan that needs the autotuner's pick first)."""
        launch = None if sig is None else self._plans.get(sig)
        if launch is None:
            launch = make()
            if launch is None:
                return
            if sig is not None:
                self.keep(sig, launch)
        launch(*operands)

    def delegate(self, sig: tuple | None, call: Callable[..., None], planned: Callable[..., Callable | None]):
        """A plan that hands its operands to another launcher (``call``, with plans of its own) until ``planned``
        (the operands) returns that launcher's plan for them, which it then keeps as its own for ``sig``: a call
        one launcher routes to another makes one signature and one plan lookup, not two of each."""
        def launch(*operands) -> None:
            call(*operands)
            plan = None if sig is None else planned(*operands)
            if plan is not None:
                self.keep(sig, plan)
        return launch

    def __contains__(self, sig: tuple) -> bool:
        return sig in self._plans

    def __len__(self) -> int:
        return len(self._plans)


def rebaser(descriptor) -> Callable[[torch.Tensor], object]:
    """``rebased(base)``: ``descriptor`` (a host-side TMA descriptor, checked by its constructor once) over
    another base of the same call signature (same shape, strides, dtype and 16-byte alignment, so every other
    field holds), built without the constructor's per-call checks: under cProfile on an H100 those took a quarter
    of a planned TMA launch's host time. It keeps the fields, never the planning call's tensor."""
    cls, fields, new = type(descriptor), {f: v for f, v in vars(descriptor).items() if f != "base"}, object.__new__

    def rebased(base):
        d = new(cls)
        d.__dict__.update(fields)
        d.base = base
        return d
    return rebased


def no_launch(*operands) -> None:
    """The plan of a call with nothing to compute (an empty output)."""


def signature(*tensors: torch.Tensor | None) -> tuple:
    """What a plan may depend on of each tensor: shape, strides, dtype, device, address modulo 16 (None for an
    optional tensor not given)."""
    return tuple([None if t is None else (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() & 15)
                  for t in tensors])


def _on_cuda(args) -> bool:
    t = next((a for a in args if isinstance(a, torch.Tensor)), None)
    return t is not None and t.device.type == "cuda"


def accumulation_dtype(t: torch.Tensor) -> torch.dtype:
    """The norms' accumulation type for ``t`` (their statistics, partial sums): fp32, or fp64 for fp64 tensors (as
    the references' upcast)."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def interpreted(t: torch.Tensor) -> bool:
    """Whether a launch on ``t`` runs under the Triton interpreter.

    Asked of the tensor rather than of TRITON_INTERPRET: the harness interprets exactly when it has no GPU, so
    its tensors are then on the CPU, while `harness matrix` records launches on meta tensors in that same
    process and must get the code a GPU would compile."""
    return t.device.type == "cpu"


def needs_bf16_rounding(t: torch.Tensor) -> bool:
    """The RNE_BF16 flag for a kernel storing into ``t``: the interpreter truncates fp32 -> bf16 where a GPU
    rounds to nearest even, so interpreted kernels round explicitly (:func:`round_to_bf16`) before the cast."""
    return interpreted(t) and t.dtype == torch.bfloat16


@triton.jit
def round_to_bf16(y):
    """fp32 rounded to the nearest bf16 value (ties to even), still fp32: the cast after it is exact."""
    bits = y.to(tl.uint32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return ((bits >> 16) << 16).to(tl.float32, bitcast=True)


def sm_count(device: torch.device) -> int:
    """Multiprocessors of ``device``; a meta (or CPU) device gets an H100/H200's count."""
    if device.type != "cuda":
        return _RECORDING_SMS
    return _cuda_sm_count(_index(device))


def _index(device: torch.device) -> int:
    # resolved before the caches: the current device can change between calls
    return device.index if device.index is not None else torch.cuda.current_device()


def cuda_capability(device: torch.device) -> tuple[int, int]:
    """A CUDA device's compute capability, queried once per device (torch's query reads the device's properties
    on every call: a tenth of a CUDA launcher's host time on the H200's host, bench/gpu_host_profile.py)."""
    return _cuda_capability(_index(device))


def dependent_launch(t: torch.Tensor) -> bool:
    """Whether a launch on ``t`` may be a programmatic dependent launch (``launch_pdl=True``, the kernel calling
    ``gdc_wait`` before it reads what the previous kernel wrote): a compiled launch on Hopper (sm_90) or later."""
    if t.device.type != "cuda":
        return False
    return cuda_capability(t.device)[0] >= 9


@functools.cache
def _cuda_capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


@functools.cache
def _cuda_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


_LOCAL_INCLUDE = re.compile(r'^#include "([^"]+)"[ \t]*$', re.M)


def cuda_source(path: str | Path) -> str:
    """A CUDA C++ source with its local includes (``#include "x.cuh"``, next to it) inlined: one self-contained
    string, as ``load_inline`` and the AOT build (harness/aot/nvcc.py) compile, while the file itself still
    compiles alone with nvcc."""
    path = Path(path)
    return _LOCAL_INCLUDE.sub(lambda m: cuda_source(path.parent / m.group(1)).rstrip("\n"), path.read_text())


def load_cuda_extension(name: str, binding_src: str, cuda_src: str, functions: list[str],
                        capability: tuple[int, int], arch_suffix: str = ""):
    """A torch extension built from inline sources (first call only; torch caches it on disk too) for one
    architecture alone: TORCH_CUDA_ARCH_LIST is set to it for the build and restored after. ``arch_suffix`` "a"
    builds the architecture-specific target (sm_90a), which wgmma and setmaxnreg need."""
    from torch.utils.cpp_extension import load_inline

    saved = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{capability[0]}.{capability[1]}{arch_suffix}"
    try:
        return load_inline(name=f"{name}_sm{capability[0]}{capability[1]}{arch_suffix}", cpp_sources=[binding_src],
                           cuda_sources=[cuda_src], functions=functions, extra_cuda_cflags=["-O3"])
    finally:
        if saved is None:
            os.environ.pop("TORCH_CUDA_ARCH_LIST", None)
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = saved
