"""The launchers' host-side helpers (kernels/common.py): Triton's integer helpers' twins, and the autotuner's
config cache that keeps Autotuner.run's per-call key building off the launch path."""

from __future__ import annotations

import pytest
import torch
import triton

import kernels.common as common
from kernels.common import CachedAutotune, cdiv, next_power_of_2


@pytest.mark.parametrize("n", [*range(-3, 70), 1023, 1024, 1025, 2**31 - 1, 2**31, 2**40 + 3])
def test_next_power_of_2_is_tritons(n):
    assert next_power_of_2(n) == triton.next_power_of_2(n)


@pytest.mark.parametrize("a", [0, 1, 7, 8, 9, 4095, 4096, 4097, 2**33 + 1])
@pytest.mark.parametrize("b", [1, 2, 8, 64, 132])
def test_cdiv_is_tritons(a, b):
    assert cdiv(a, b) == triton.cdiv(a, b)


class _Config:
    def __init__(self, name, hook_log=None):
        self.name, self.hook_log = name, hook_log
        self.pre_hook = None if hook_log is None else (lambda nargs: hook_log.append(dict(nargs)))

    def all_kwargs(self):
        return {"BLOCK": self.name, "num_warps": 4}


class _Kernel:
    """Stands for the JITFunction: records each launch."""

    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))


class _Autotuner:
    """Stands for triton's Autotuner: arg_names, keys, fn, best_config, and a launch that "tunes" (counted)."""

    def __init__(self, picks, hook_log=None):
        self.arg_names, self.keys = ["x", "M", "N", "FLAG"], ["M", "N"]
        self.fn, self.tuned, self._picks, self._hook_log = _Kernel(), [], iter(picks), hook_log

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.tuned.append((grid, args, kwargs))
            self.best_config = _Config(next(self._picks), self._hook_log)
        return run


@pytest.fixture
def on_cuda(monkeypatch):
    monkeypatch.setattr(common, "_on_cuda", lambda args: True)


def test_a_key_is_tuned_once_then_launched_with_its_config(on_cuda):
    tuner = _Autotuner(["A", "B"])
    launch = CachedAutotune(tuner)
    x = torch.zeros(2, dtype=torch.float16)
    launch[(4,)](x, 64, 128, FLAG=True)
    launch[(4,)](x, 64, 128, FLAG=True)
    launch[(8,)](x, 64, 128, FLAG=True)
    assert len(tuner.tuned) == 1
    assert tuner.fn.launches == [((4,), (x, 64, 128), {"FLAG": True, "BLOCK": "A", "num_warps": 4}),
                                 ((8,), (x, 64, 128), {"FLAG": True, "BLOCK": "A", "num_warps": 4})]


@pytest.mark.parametrize("change", ["key value", "dtype", "keyword"])
def test_what_the_autotuners_key_tells_apart_is_tuned_apart(on_cuda, change):
    tuner = _Autotuner(["A", "B"])
    launch = CachedAutotune(tuner)
    x = torch.zeros(2, dtype=torch.float16)
    launch[(1,)](x, 64, 128, FLAG=True)
    other = {"key value": ((x, 64, 256), {"FLAG": True}),
             "dtype": ((x.to(torch.bfloat16), 64, 128), {"FLAG": True}),
             "keyword": ((x, 64, 128), {"FLAG": False})}[change]
    launch[(1,)](*other[0], **other[1])
    assert len(tuner.tuned) == 2 and tuner.fn.launches == []
    launch[(1,)](*other[0], **other[1])
    assert tuner.fn.launches[-1][2]["BLOCK"] == "B"  # the second key's own pick


def test_a_cached_config_runs_its_pre_hook_as_the_autotuner_would(on_cuda):
    hooks = []
    tuner = _Autotuner(["A"], hooks)
    launch = CachedAutotune(tuner)
    x = torch.zeros(2)
    launch[(1,)](x, 1, 2, FLAG=False)
    launch[(1,)](x, 1, 2, FLAG=False)
    assert hooks == [{"x": x, "M": 1, "N": 2, "FLAG": False, "BLOCK": "A", "num_warps": 4}]


def test_launches_off_a_gpu_always_go_through_the_autotuner():
    tuner = _Autotuner(["A", "B"])
    launch = CachedAutotune(tuner)
    x = torch.zeros(2, device="meta")  # `harness matrix` records every config through the autotuner's run
    launch[(1,)](x, 64, 128, FLAG=True)
    launch[(1,)](x, 64, 128, FLAG=True)
    assert len(tuner.tuned) == 2 and tuner.fn.launches == []
