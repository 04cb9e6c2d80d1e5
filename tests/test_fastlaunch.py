"""kernels/fastlaunch.py: a launch is replayed only for a key that launched before, and only as Triton made it.

Off the GPU, a stand-in kernel passes its launcher what Triton's JITFunction.run passes (grid, stream, function,
metadata, hooks, then every parameter with defaults filled in); the GPU test at the end replays real kernels and
compares bits.
"""

from __future__ import annotations

import pytest
import torch

from kernels.fastlaunch import FastLaunch


class HookChain:  # as Triton 3.5+'s knobs: a chain that is never None, empty unless a profiler adds to it
    def __init__(self):
        self.calls = []


class Runtime:
    def __init__(self):
        self.launch_enter_hook, self.launch_exit_hook = HookChain(), HookChain()


class Knobs:
    def __init__(self):
        self.runtime = Runtime()


class Launcher:
    calls: list = []

    def __call__(self, *args):
        Launcher.calls.append(args)


class StandIn:
    """A kernel with parameters (x, y, n, BLOCK=64): what JITFunction.run does, minus compiling."""

    def __init__(self, knobs, launches_per_call=1, copies_args=False, first_call_launches=None):
        self.knobs, self.launcher, self.through_kernel = knobs, Launcher(), 0
        self.launches_per_call, self.copies_args, self.pre_run_hooks = launches_per_call, copies_args, []
        self.first_call_launches = first_call_launches or launches_per_call
        self.stream = 7  # the current stream, as the backend of Watched below reports it

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.through_kernel += 1
            g = grid(dict(zip(("x", "y", "n"), args, strict=False))) if callable(grid) else grid
            g = (*g, 1, 1)[:3]
            bound = [a.clone() if self.copies_args and isinstance(a, torch.Tensor) else a for a in args]
            bound.append(kwargs.get("BLOCK", 64))
            rt = self.knobs.runtime
            for _ in range(self.first_call_launches if self.through_kernel == 1 else self.launches_per_call):
                self.launcher(*g, self.stream, "function", "packed", {"lazy": "metadata"}, rt.launch_enter_hook,
                              rt.launch_exit_hook, *bound)

        return run


class Watched(FastLaunch):
    """FastLaunch with CPU tensors standing in for device tensors and a stand-in backend."""

    def __init__(self, kernel, **kw):
        super().__init__(kernel, **kw)
        self._backend = (lambda: 0, lambda device: 7, Launcher, kernel.knobs.runtime)

    @staticmethod
    def _on_device(t):
        return True


@pytest.fixture
def kernel():
    Launcher.calls = []
    return StandIn(Knobs())


def test_a_second_call_is_replayed_with_the_new_tensors(kernel):
    launch = Watched(kernel)
    x, y = torch.zeros(8), torch.ones(8)
    launch[(4,)](x, y, 8, BLOCK=32)
    assert kernel.through_kernel == 1 and len(Launcher.calls) == 1
    first = Launcher.calls[0]
    assert first[:3] == (4, 1, 1) and first[3] == 7 and first[-1] == 32
    x2, y2 = torch.zeros(8), torch.ones(8)
    launch[(4,)](x2, y2, 8, BLOCK=32)
    assert kernel.through_kernel == 1, "the second call went through the kernel again"
    replay = Launcher.calls[1]
    assert replay[:6] == first[:6] and replay[6:9] == (None, None, None)  # no hook set: none passed
    assert replay[9] is x2 and replay[10] is y2 and replay[11:] == (8, 32)


@pytest.mark.parametrize("change", ["dtype", "alignment", "subclass", "int", "bool_for_int", "keyword", "grid",
                                    "stream"])
def test_anything_triton_specialises_on_makes_a_new_key(kernel, change):
    launch = Watched(kernel)
    x, y = torch.zeros(16), torch.zeros(16)
    launch[(4,)](x, y, 1, BLOCK=32)
    args, kwargs, grid = [x, y, 1], {"BLOCK": 32}, (4,)
    if change == "dtype":
        args[0] = x.half()
    elif change == "alignment":
        args[0] = x[1:]  # 4 bytes past a 16-byte boundary
    elif change == "subclass":
        args[0] = torch.nn.Parameter(x, requires_grad=False)
    elif change == "int":
        args[2] = 16
    elif change == "bool_for_int":
        args[2] = True  # equal to 1 as a key, not to Triton
    elif change == "keyword":
        kwargs["BLOCK"] = 64
    elif change == "grid":
        grid = (5,)
    elif change == "stream":
        launch._backend = (lambda: 0, lambda device: 8, Launcher, kernel.knobs.runtime)
    launch[grid](*args, **kwargs)
    assert kernel.through_kernel == 2
    if change != "stream":  # (the stand-in launches on stream 7 whatever is current: never kept on 8)
        launch[grid](*args, **kwargs)
        assert kernel.through_kernel == 2  # and kept in turn


def test_a_callable_grid_is_kept_with_the_arguments(kernel):
    launch = Watched(kernel)
    grid = lambda meta: (meta["n"] // 4,)  # noqa: E731
    launch[grid](torch.zeros(8), torch.zeros(8), 8)
    launch[grid](torch.zeros(8), torch.zeros(8), 8)
    launch[grid](torch.zeros(8), torch.zeros(8), 12)
    assert kernel.through_kernel == 2
    assert [c[0] for c in Launcher.calls] == [2, 2, 3]


@pytest.mark.parametrize("why", ["two_launches", "arguments_copied", "pre_run_hook"])
def test_a_launch_not_made_from_the_callers_arguments_is_never_kept(why):
    Launcher.calls = []
    kernel = StandIn(Knobs(), launches_per_call=2 if why == "two_launches" else 1,
                     copies_args=why == "arguments_copied")
    if why == "pre_run_hook":
        kernel.pre_run_hooks.append(lambda *a, **k: None)
    launch = Watched(kernel)
    for _ in range(5):
        launch[(1,)](torch.zeros(4), torch.zeros(4), 4)
    assert kernel.through_kernel == 5 and not launch._kept


def test_a_key_whose_first_call_autotuned_is_kept_on_its_next():
    Launcher.calls = []
    kernel = StandIn(Knobs(), first_call_launches=6)  # six configs benchmarked, then one launch a call
    launch = Watched(kernel)
    for _ in range(4):
        launch[(1,)](torch.zeros(4), torch.zeros(4), 4)
    assert kernel.through_kernel == 2 and len(Launcher.calls) == 6 + 1 + 2


class Config:
    def __init__(self, pre_hook):
        self.pre_hook = pre_hook


class Heuristics:
    def __init__(self, fn):
        self.fn = fn


@pytest.mark.parametrize("wrapper", ["config_pre_hook", "heuristics"])
def test_a_kernel_that_runs_python_per_launch_is_never_kept(kernel, wrapper):
    """An autotune config's pre_hook (behind CachedAutotune's link), or a heuristic: a replay would skip them."""
    class Cached:
        def __init__(self, autotuned):
            self.autotuned = autotuned

        def __getitem__(self, grid):
            return self.autotuned.fn[grid]

    class Autotuned:
        fn, configs = kernel, [Config(None), Config(lambda nargs: None)]

    wrapped = Cached(Autotuned()) if wrapper == "config_pre_hook" else Heuristics(kernel)
    wrapped.knobs = kernel.knobs
    if wrapper == "heuristics":
        wrapped.__class__.__getitem__ = lambda self, grid: self.fn[grid]
    launch = Watched(wrapped)
    for _ in range(3):
        launch[(1,)](torch.zeros(4), torch.zeros(4), 4)
    assert kernel.through_kernel == 3


def test_a_registered_launch_hook_sees_every_launch_made_by_triton(kernel):
    launch = Watched(kernel)
    launch[(1,)](torch.zeros(4), torch.zeros(4), 4)
    kernel.knobs.runtime.launch_enter_hook.calls.append(print)  # a profiler starts
    launch[(1,)](torch.zeros(4), torch.zeros(4), 4)
    launch[(1,)](torch.zeros(4), torch.zeros(4), 4)
    assert kernel.through_kernel == 3
    kernel.knobs.runtime.launch_enter_hook.calls.clear()
    launch[(1,)](torch.zeros(4), torch.zeros(4), 4)
    assert kernel.through_kernel == 3  # replayed again once it stops


@pytest.mark.parametrize("args", [
    (torch.zeros(4), torch.zeros(4), float("nan")),   # a NaN never equals its own key
    (torch.zeros(4), (1, 2), 4),                       # a tuple: Triton flattens it
    (torch.zeros(4), object(), 4),                     # an object Triton may unpack
    (1, 2, 3),                                         # no tensor: nothing says a GPU is there
])
def test_arguments_outside_the_key_always_launch_through_the_kernel(kernel, args):
    launch = Watched(kernel)
    for _ in range(2):
        launch[(1,)](*args)
    assert kernel.through_kernel == 2


def descriptor(t, box, **kw):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(t, box, **kw)


def test_a_tensor_descriptor_is_replayed_as_passed(kernel):
    launch = Watched(kernel)
    launch[(1,)](descriptor(torch.zeros(8, 16), [4, 8]), torch.zeros(4), 4)
    new = descriptor(torch.zeros(8, 16), [4, 8])
    launch[(1,)](new, torch.zeros(4), 4)
    assert kernel.through_kernel == 1 and Launcher.calls[1][9] is new  # the launcher encodes its tensor map


@pytest.mark.parametrize("change", ["box", "dtype", "rank", "padding", "tf32", "base_not_a_tensor"])
def test_what_triton_specialises_a_descriptor_on_makes_a_new_key(kernel, change):
    launch = Watched(kernel)
    base = torch.zeros(8, 16)
    launch[(1,)](descriptor(base, [4, 8]), torch.zeros(4), 4)
    if change == "box":
        d = descriptor(base, [8, 8])
    elif change == "dtype":
        d = descriptor(base.half(), [4, 8])
    elif change == "rank":
        d = descriptor(torch.zeros(2, 8, 16), [1, 4, 8])
    elif change == "padding":
        d = descriptor(base, [4, 8], padding="nan")
    elif change == "tf32":
        import inspect

        from triton.tools.tensor_descriptor import TensorDescriptor
        if "round_f32_to_tf32" not in inspect.signature(TensorDescriptor.from_tensor).parameters:
            pytest.skip("this Triton's descriptors have no tf32 rounding (3.6's have none)")
        d = descriptor(base, [4, 8], round_f32_to_tf32=True)
    else:
        d = descriptor(base, [4, 8])
        d.base = type("Buffer", (), {"data_ptr": lambda self: 0, "dtype": torch.float32})()
    for _ in range(2 if change == "base_not_a_tensor" else 1):
        launch[(1,)](d, torch.zeros(4), 4)
    assert kernel.through_kernel == (3 if change == "base_not_a_tensor" else 2)


def test_a_picked_config_launches_through_fastlaunch_after_its_pre_hook(kernel):
    """CachedAutotune runs the picked config's pre_hook (a TMA box, say), then replays the bare kernel's launch
    keyed on what the hook set: a box the next call's hook sets differently is a new key."""
    from kernels.common import CachedAutotune

    boxes = [[4, 8]]

    class Picked:
        kwargs, pre_hook = {"BLOCK": 32}, staticmethod(lambda nargs: setattr(nargs["x"], "block_shape", boxes[0]))

        def all_kwargs(self):
            return dict(self.kwargs)

    class Autotuned:
        fn, arg_names, keys, best_config = kernel, ["x", "y", "n"], ["n"], Picked()

        def __getitem__(self, grid):
            return kernel[grid]

    cached = CachedAutotune(Autotuned())
    cached.fast = Watched(kernel)
    calls = lambda: cached[(1,)](descriptor(torch.zeros(8, 16), [1, 1]), torch.zeros(4), 4)  # noqa: E731
    import kernels.common as common
    on_cuda, common._on_cuda = common._on_cuda, lambda args: True  # no CUDA tensor here: pick as on a GPU
    try:
        for _ in range(3):
            calls()
        assert kernel.through_kernel == 2  # the autotuner's call, the kept launch; the third replayed
        assert Launcher.calls[-1][9].block_shape == [4, 8] and Launcher.calls[-1][-1] == 32
        boxes[0] = [8, 8]
        calls()
        assert kernel.through_kernel == 3 and Launcher.calls[-1][9].block_shape == [8, 8]
    finally:
        common._on_cuda = on_cuda


def test_a_tensor_by_keyword_or_an_unhashable_keyword_is_not_kept(kernel):
    launch = Watched(kernel)
    for _ in range(2):
        launch[(1,)](torch.zeros(4), torch.zeros(4), 4, BLOCK=torch.ones(1))
        launch[(1,)](torch.zeros(4), torch.zeros(4), 4, BLOCK=[64])
    assert kernel.through_kernel == 4


def test_at_capacity_new_keys_launch_through_the_kernel(kernel):
    launch = Watched(kernel, capacity=2)
    for n in (1, 2, 3, 1, 2, 3):
        launch[(1,)](torch.zeros(4), torch.zeros(4), n)
    assert kernel.through_kernel == 4  # 1 and 2 kept; 3 every time


def test_cpu_tensors_launch_through_the_kernel_without_asking_for_a_gpu():
    """The interpreter's tensors are on the CPU: no key, and Triton's driver is never looked up."""
    calls = []

    class Kernel:
        def __getitem__(self, grid):
            return lambda *a, **k: calls.append(grid)

    launch = FastLaunch(Kernel())
    launch[(2,)](torch.zeros(4), 3)
    launch[(2,)](torch.zeros(4, device="meta"), 3)
    assert calls == [(2,), (2,)] and launch._backend is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="replays a compiled kernel: needs a GPU")
def test_replays_on_the_gpu_are_bitwise_those_of_triton():
    import triton
    import triton.language as tl

    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n
        tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=ok) + tl.load(y_ptr + offs, mask=ok), mask=ok)

    launch = FastLaunch(axpy)
    for n in (1000, 4096, 1000):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        got, want = torch.empty_like(x), torch.empty_like(x)
        launch[(triton.cdiv(n, 256),)](x, y, got, 0.5, n, BLOCK=256)
        launch[(triton.cdiv(n, 256),)](x, y, got, 0.5, n, BLOCK=256)
        axpy[(triton.cdiv(n, 256),)](x, y, want, 0.5, n, BLOCK=256)
        torch.cuda.synchronize()
        assert torch.equal(got, want)
    assert len(launch._kept) == 2 and not launch._misses


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
                    reason="host TMA descriptors: needs sm_90 or newer")
def test_descriptor_replays_on_the_gpu_are_bitwise_those_of_triton():
    import triton
    import triton.language as tl

    @triton.jit
    def scale(in_desc, out_desc, a, BLOCK: tl.constexpr):
        row = tl.program_id(0) * BLOCK
        out_desc.store([row, 0], in_desc.load([row, 0]) * a)

    launch = FastLaunch(scale)
    for rows in (256, 1000, 256):
        x = torch.randn(rows, 32, device="cuda")
        got, want = torch.empty_like(x), torch.empty_like(x)
        for out in (got, got):  # the second call is a replay, with new descriptors
            launch[(triton.cdiv(rows, 64),)](descriptor(x, [64, 32]), descriptor(out, [64, 32]), 0.5, BLOCK=64)
        scale[(triton.cdiv(rows, 64),)](descriptor(x, [64, 32]), descriptor(want, [64, 32]), 0.5, BLOCK=64)
        torch.cuda.synchronize()
        assert torch.equal(got, want) and torch.equal(want, x * 0.5)
    assert len(launch._kept) == 2 and not launch._misses  # grids of 4 and 16 programs: two keys


def test_a_pinned_launch_is_kept_per_stream_and_replayed_with_each_calls_arguments(kernel):
    launch = Watched(kernel)
    pinned = launch.pinned((4,), BLOCK=32)
    pinned(torch.zeros(8), torch.ones(8), 8)
    x, y = torch.zeros(8), torch.ones(8)
    pinned(x, y, 8)
    assert kernel.through_kernel == 1
    assert Launcher.calls[-1][9] is x and Launcher.calls[-1][10] is y and Launcher.calls[-1][11:] == (8, 32)
    runtime = kernel.knobs.runtime
    kernel.stream = 8  # another stream: launched, then kept
    launch._backend = (lambda: 0, lambda device: 8, Launcher, runtime)
    pinned(x, y, 8)
    pinned(x, y, 8)
    assert kernel.through_kernel == 2 and Launcher.calls[-1][3] == 8
    kernel.stream = 7
    launch._backend = (lambda: 0, lambda device: 7, Launcher, runtime)
    pinned(x, y, 8)
    assert kernel.through_kernel == 2 and Launcher.calls[-1][3] == 7


def test_a_pinned_launch_goes_through_triton_while_a_hook_is_set_or_fastlaunch_is_off(kernel, monkeypatch):
    from kernels import fastlaunch

    pinned = Watched(kernel).pinned((4,), BLOCK=32)
    pinned(torch.zeros(8), torch.ones(8), 8)
    kernel.knobs.runtime.launch_enter_hook.calls.append(print)
    pinned(torch.zeros(8), torch.ones(8), 8)
    assert kernel.through_kernel == 2
    kernel.knobs.runtime.launch_enter_hook.calls.clear()
    monkeypatch.setattr(fastlaunch, "ENABLED", False)
    pinned(torch.zeros(8), torch.ones(8), 8)
    assert kernel.through_kernel == 3
    monkeypatch.setattr(fastlaunch, "ENABLED", True)
    pinned(torch.zeros(8), torch.ones(8), 8)
    assert kernel.through_kernel == 3
