"""A Triton launch sent straight to the compiled kernel's launcher once the same arguments have launched before.

Each call through ``JITFunction.run`` binds every argument, specialises it, hashes the specialisation, looks the
kernel up, calls the grid, builds launch metadata and walks Triton's (usually empty) launch hook chains. For a
decode-sized kernel that is most of the host time per call: an eager caller waits on it, and a 16-argument
GEMV lost to ``F.linear`` on host time alone (bench/gpu_host_profile.py). A CUDA launch of torch's costs a few
microseconds; Triton's launcher object itself, given its argument list, costs about that too.

``FastLaunch(kernel)`` stands where ``kernel`` did (``launch[grid](*args, **kwargs)``). The first call with a
given key goes through ``kernel`` as before while the backend's launcher class is watched; if that call made
exactly one launch, and the launch's argument list is the caller's positional arguments in place followed by
values fixed by the key, the launch is kept. Later calls with the same key rebuild nothing: the launcher is called
with the kept prefix (grid, stream, function, metadata) and the caller's arguments.

The key is at least as fine as Triton's specialisation, so a kept launch is the kernel Triton would pick:
each tensor's dtype and whether its address is 16-byte aligned (all Triton specialises a pointer on), every other
positional argument's exact value and type (Triton looks at ints' value 1, divisibility by 16 and range; floats,
bools and None by type), every keyword argument's exact value (constexprs, num_warps...), the grid when it is a
tuple, and the current device and stream. A callable grid is called by Triton with the arguments only, so it is
kept with them; a grid that reads anything else must be passed as a tuple.

A host-side tensor descriptor (``triton.tools.tensor_descriptor.TensorDescriptor``) is keyed as Triton specialises
it, by its base's dtype, block shape and padding, plus its base's alignment and device; its base, shape and
strides are the launcher's to encode on every launch, so a replay passed a new descriptor is a new tensor map.

Not kept, so launched through ``kernel`` every time: tensors not on a GPU (the interpreter, meta tensors under
`harness matrix`), any other argument type (tuples, say), a tensor passed by keyword, a key
whose first three calls each made no launch or several (an autotuner benchmarks on its first), a kernel with
Python run per launch (pre-run hooks, autotune configs' pre_hooks, heuristics), and every call while
a launch hook is registered (a profiler such as proton sees every launch as Triton makes it). The cache holds
at most ``capacity`` keys per kernel; past that, new keys launch through ``kernel``.

``pinned(grid, **kwargs)`` is for a caller that already knows its calls share a key (a plan per call signature,
kernels.common.Plans): its launch is found by the current device and stream alone, the key not rebuilt per call.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import torch

try:  # Triton 3.4+: host-side TMA descriptors, which the launcher encodes into a tensor map on every launch
    from triton.tools.tensor_descriptor import TensorDescriptor as _Descriptor
except ImportError:
    _Descriptor = None

__all__ = ["FastLaunch", "recorded_launches"]

_EXACT = (int, float, bool, str, type(None))
_PREFIX = 9  # gridX, gridY, gridZ, stream, function, packed metadata, launch metadata, enter hook, exit hook
# KH_FAST_LAUNCH=0 launches everything through Triton: to rule this module out, or to time what it saves
ENABLED = os.environ.get("KH_FAST_LAUNCH", "1") != "0"
_TRIES = 3   # calls of a key that may launch other than once (an autotuner benchmarks on its first) before it is
             # launched through the kernel for good


def recorded_launches(fn: Callable[[], Any]) -> list[tuple[Any, tuple]]:
    """(launcher, its arguments) of every Triton launch one call of ``fn`` makes: the backend's launcher object
    (a compiled kernel's ``run``) with exactly what Triton passed it."""
    from triton.runtime import driver

    return _watched(driver.active.launcher_cls, fn)


def _watched(cls: type, fn: Callable[[], Any]) -> list[tuple[Any, tuple]]:
    seen, original = [], cls.__call__

    def watched(self, *args):
        seen.append((self, args))
        return original(self, *args)

    cls.__call__ = watched
    try:
        fn()
    finally:
        cls.__call__ = original
    return seen


def _hooked(kernel) -> bool:
    """Whether a launch through ``kernel`` runs Python a replay would skip: a JITFunction's pre-run hooks, an
    autotuner config's pre_hook (a TMA descriptor's box, say), a heuristic computing constexprs from the
    arguments. Looked for through the wrappers' own links (CachedAutotune.autotuned, Autotuner.fn...)."""
    for _ in range(4):
        if kernel is None:
            return False
        if getattr(kernel, "pre_run_hooks", None) or type(kernel).__name__ == "Heuristics":
            return True
        if any(getattr(c, "pre_hook", None) is not None for c in getattr(kernel, "configs", ())):
            return True
        kernel = getattr(kernel, "autotuned", None) or getattr(kernel, "fn", None)
    return False


def _hooks_set(runtime) -> bool:
    """Whether a launch hook is registered (None, or from Triton 3.5 an empty HookChain, is none)."""
    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    return (enter is not None and getattr(enter, "calls", True)) or \
        (leave is not None and getattr(leave, "calls", True))


_TENSOR = torch.Tensor
_SCALARS = frozenset(_EXACT)


def _other_part(a) -> tuple:
    """The key part of an argument that is neither a plain tensor nor a scalar: a tensor subclass (a Parameter),
    a host TMA descriptor, or anything else (never kept: FastLaunch._keyable, so never equal to a kept part)."""
    if isinstance(a, torch.Tensor):
        return (type(a), a.dtype, a.data_ptr() & 15 == 0, a.is_cuda)
    if type(a) is _Descriptor:
        base = a.base
        if not isinstance(base, torch.Tensor):
            return (_Descriptor, None)
        # (the block shape's length is the rank: TensorDescriptor checks that they agree)
        return (_Descriptor, base.dtype, base.data_ptr() & 15 == 0, base.is_cuda, tuple(a.block_shape),
                getattr(a, "padding", "zero"), getattr(a, "round_f32_to_tf32", False))
    return (type(a), a)


class FastLaunch:
    """``kernel`` (a JITFunction, or an autotuned launch object called the same way), replayed through its
    launcher for keys it has launched before."""

    def __init__(self, kernel, capacity: int = 512) -> None:
        self.kernel = kernel
        self.capacity = capacity
        self._kept: dict[tuple, tuple] = {}  # key -> (launcher, prefix, arguments after the caller's)
        self._misses: dict[tuple, int] = {}  # key -> calls whose launches could not be kept
        self._hooked = _hooked(kernel)
        self._backend = None                 # (current device, current stream, launcher class, runtime knobs)

    def __getitem__(self, grid):
        return functools.partial(self._launch, grid)

    def _launch(self, grid, *args, **kwargs):
        key = None
        if self._kept and ENABLED:  # never on the CPU: nothing is kept there, so no GPU driver is asked for a stream
            key = self._key(grid, args, kwargs)
            if key is not None:
                try:
                    kept = self._kept.get(key)
                except TypeError:  # an unhashable keyword value
                    kept = None
                if kept is not None:
                    launcher, prefix, tail = kept
                    launcher(*prefix, *args, *tail)
                    return
        if ENABLED and not self._hooked and self._keyable(args, kwargs) and len(self._kept) < self.capacity:
            key = key or self._key(grid, args, kwargs)  # a miss above has built it already
            if key is not None and self._misses.get(key, 0) < _TRIES and key not in self._kept:
                self._keep(key, grid, args, kwargs)
                return
        self.kernel[grid](*args, **kwargs)

    # --------------------------------------------------------------------------------------------- the key

    @staticmethod
    def _on_device(t: torch.Tensor) -> bool:
        return t.is_cuda  # ROCm's tensors too; CPU (the interpreter) and meta tensors never launch a kernel

    def _keyable(self, args: tuple, kwargs: dict) -> bool:
        """Whether a call's key holds all Triton would specialise on (see the module's docstring). Asked only
        before keeping a launch: a key of anything else never equals a kept one (its parts differ in kind)."""
        descriptors = [a.base for a in args if type(a) is _Descriptor]
        if not all(isinstance(b, torch.Tensor) for b in descriptors):
            return False
        tensors = [a for a in args if isinstance(a, torch.Tensor)] + descriptors
        if not tensors or not all(self._on_device(t) for t in tensors):
            return False  # no tensor on a device: nothing says a GPU is there to ask for its stream
        if any(type(a) not in _EXACT or a != a for a in args
               if not isinstance(a, torch.Tensor) and type(a) is not _Descriptor):
            return False  # a NaN would never find its own key; other types Triton may flatten or unpack
        if any(isinstance(v, torch.Tensor) for v in kwargs.values()):
            return False
        try:
            hash(tuple(kwargs.items()))
        except TypeError:
            return False
        return True

    def _key(self, grid, args: tuple, kwargs: dict) -> tuple | None:
        """None while a launch hook is set: every launch then goes through Triton, for the hook to see."""
        device_of, stream_of, _, runtime = self._backend or self._resolve()
        if _hooks_set(runtime):
            return None
        # The type beside each value: True == 1 == 1.0 as keys, not as kernel arguments. Exact type tests first:
        # isinstance against torch.Tensor goes through its metaclass, a third of the key's time on a CPU.
        parts = tuple([(a.dtype, a.data_ptr() & 15 == 0, a.is_cuda) if type(a) is _TENSOR
                       else (type(a), a) if type(a) in _SCALARS else _other_part(a) for a in args])
        device = device_of()
        return device, stream_of(device), None if callable(grid) else grid, parts, tuple(kwargs.items())

    def _resolve(self):
        from triton import knobs
        from triton.runtime import driver

        active = driver.active
        self._backend = (active.get_current_device, active.get_current_stream, active.launcher_cls, knobs.runtime)
        return self._backend

    # ------------------------------------------------------------------------------------------ pinned calls

    def pinned(self, grid: tuple, **kwargs) -> Callable[..., None]:
        """``launch(*args)``, the same as ``self[grid](*args, **kwargs)``, for a caller whose every call passes
        arguments with the same key (a plan per call signature, kernels.common.Plans: its scalars fixed, its
        tensors' dtypes and alignment in the signature; a float may change, Triton keys it by type only). The
        kept launch is looked up by the current device and stream alone, not by a key rebuilt from the arguments
        on every call. Launch hooks and KH_FAST_LAUNCH are honoured as for any call."""
        kept_at: dict[tuple, tuple] = {}

        def launch(*args):
            if self._kept and ENABLED:  # something kept: a GPU, whose backend _resolve has read
                device_of, stream_of, _, runtime = self._backend
                if not _hooks_set(runtime):
                    device = device_of()
                    kept = kept_at.get((device, stream_of(device)))
                    if kept is not None:
                        launcher, prefix, tail = kept
                        launcher(*prefix, *args, *tail)
                        return
            self._launch(grid, *args, **kwargs)
            if self._kept and ENABLED and len(kept_at) < 8:  # (streams per device: a handful in practice)
                key = self._key(grid, args, kwargs)
                try:
                    kept = None if key is None else self._kept.get(key)
                except TypeError:  # an unhashable keyword value: never kept
                    kept = None
                if kept is not None:
                    kept_at[key[:2]] = kept

        return launch

    # ------------------------------------------------------------------------------------- keeping a launch

    def _keep(self, key: tuple, grid, args: tuple, kwargs: dict) -> None:
        _, _, launcher_cls, runtime = self._backend
        launches = _watched(launcher_cls, lambda: self.kernel[grid](*args, **kwargs))
        kept = self._replayable(launches, key, args, runtime)
        if kept is None:
            if len(self._misses) < self.capacity:
                self._misses[key] = self._misses.get(key, 0) + 1
        else:
            self._kept[key] = kept

    @staticmethod
    def _replayable(launches, key: tuple, args: tuple, runtime) -> tuple | None:
        """(launcher, prefix, tail) when the one launch made is the caller's arguments in place, else None."""
        if len(launches) != 1:
            return None
        launcher, passed = launches[0]
        prefix, rest = passed[:_PREFIX], passed[_PREFIX:]
        _, stream, grid = key[0], key[1], key[2]
        if len(prefix) != _PREFIX or len(rest) < len(args) or prefix[3] != stream:
            return None
        if grid is not None and tuple(prefix[:3]) != (tuple(grid) + (1, 1))[:3]:
            return None
        if prefix[7] is not runtime.launch_enter_hook or prefix[8] is not runtime.launch_exit_hook:
            return None
        if any(r is not a for r, a in zip(rest, args, strict=False)):
            return None
        # no hook is set (the key says so): the launcher skips them and their metadata when given None
        return launcher, (*prefix[:6], None, None, None), tuple(rest[len(args):])
