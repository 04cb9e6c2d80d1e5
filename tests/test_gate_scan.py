"""The static scan of a pull request's kernel modules (harness.gate.scan): planted modules, one per pattern, each
finding named with its resolved statement; honest kernel code gives none; the base's findings are told apart."""

from __future__ import annotations

import pytest

from harness.gate.scan import CATEGORIES, compare_scans, scan_folders, scan_source

HONEST = '''
import torch
import triton
import triton.language as tl

from kernels.helpers import FACTOR


@triton.jit
def _kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def scale(*, x, out):
    cfg = {"BLOCK": 128}
    cfg["BLOCK"] = 256                      # a local dict, not an imported one
    out.copy_(x * FACTOR)
    torch.cuda.current_device() if torch.cuda.is_available() else None
    return out
'''

PLANTED = [  # (source, category, what the finding says)
    ("import time\ntime.perf_counter_ns = lambda: 0\n", "monkeypatch", "time.perf_counter_ns = ..."),
    ("import time as t\nclock = t\nclock.perf_counter = None\n", "monkeypatch", "time.perf_counter = ..."),
    ("from torch.cuda import Event\nEvent.elapsed_time = lambda a, b: 0.0\n", "monkeypatch",
     "torch.cuda.Event.elapsed_time = ..."),
    ("import harness.timing.sampler as s\ns.SPIN_MIN_US = 0\n", "monkeypatch",
     "harness.timing.sampler.SPIN_MIN_US = ..."),
    ("import torch\nsetattr(torch.cuda, 'synchronize', print)\n", "monkeypatch",
     "setattr(torch.cuda, 'synchronize', ...)"),
    ("import torch\ndef f():\n    del torch.cuda.synchronize\n", "monkeypatch", "del torch.cuda.synchronize"),
    ("from . import helpers\nhelpers.FACTOR = 3\n", "monkeypatch", "kernels.helpers.FACTOR = ..."),
    ("import sys\nsys.modules['harness.gate.verdict'] = None\n", "interpreter", "sys.modules[...] = ..."),
    ("import sys\nsys.modules.pop('harness')\n", "interpreter", "sys.modules.pop(...)"),
    ("import builtins\nbuiltins.len = None\n", "interpreter", "builtins.len = ..."),
    ("import sys\nsys.settrace(None)\n", "interpreter", "sys.settrace(...)"),
    ("__builtins__ = {}\n", "interpreter", "__builtins__ = ..."),
    ("import os\nos.environ['CUDA_LAUNCH_BLOCKING'] = '1'\n", "environment", "os.environ[...] = ..."),
    ("import torch\ns = torch.cuda.Stream()\n", "stream", "torch.cuda.Stream(...)"),
    ("import torch\ndef f(x, s):\n    x.record_stream(s)\n", "stream", "....record_stream(...)"),
    ("import torch\ng = torch.cuda.CUDAGraph()\n", "stream", "torch.cuda.CUDAGraph(...)"),
    ("import threading\nthreading.Thread(target=print).start()\n", "thread", "threading.Thread(...)"),
    ("from concurrent.futures import ThreadPoolExecutor\nThreadPoolExecutor(2)\n", "thread",
     "concurrent.futures.ThreadPoolExecutor(...)"),
    ("import subprocess\n", "thread", "import subprocess"),
    ("import time\nt0 = time.perf_counter()\n", "timer", "time.perf_counter(...)"),
    ("import time\nclock = time.monotonic_ns\n", "timer", "time.monotonic_ns"),
    ("import torch\ne = torch.cuda.Event(enable_timing=True)\n", "timer", "torch.cuda.Event(...)"),
    ("import ctypes\n", "native", "import ctypes"),
    ("from torch.utils.cpp_extension import load_inline\n", "native", "torch.utils.cpp_extension.load_inline"),
    ("x = eval('1 + 1')\n", "dynamic", "eval(...)"),
    ("import importlib\nm = importlib.import_module('kernels.other')\n", "dynamic", "importlib.import_module(...)"),
    ("import sys\nf = sys._getframe(1)\n", "introspection", "sys._getframe(...)"),
    ("import gc\n", "introspection", "import gc"),
    ("import torch\nclass Lazy(torch.Tensor):\n    pass\n", "tensor subclass", "class Lazy(torch.Tensor)"),
    ("class M:\n    def __torch_function__(self, *a):\n        pass\n", "tensor subclass", "M.__torch_function__"),
]


def test_honest_kernel_code_has_no_findings():
    assert scan_source(HONEST, "kernels/honest.py", "kernels") == []


@pytest.mark.parametrize("source, category, what", PLANTED, ids=[f"{c}-{i}" for i, (_, c, _) in enumerate(PLANTED)])
def test_each_planted_pattern_is_found(source, category, what):
    found = scan_source(source, "kernels/planted.py", "kernels")
    assert (category, what) in {(f.category, f.what) for f in found}, found
    assert category in CATEGORIES and all(f.path == "kernels/planted.py" and f.line >= 1 for f in found)


def test_reading_the_environment_or_sys_modules_is_no_finding():
    src = "import os, sys\nx = os.environ.get('A')\ny = sys.modules.get('torch')\nz = 'torch' in sys.modules\n"
    assert scan_source(src, "k.py") == []


def test_tree_prefix_is_read_as_the_package():
    src = "from kh_pr_0123456789ab.kernels import helpers\nhelpers.FACTOR = 3\n"
    assert [f.what for f in scan_source(src, "k.py")] == ["kernels.helpers.FACTOR = ..."]


def test_unparsable_module_is_one_finding():
    (f,) = scan_source("def broken(:\n", "kernels/bad.py")
    assert f.category == "unparsed" and f.line == 1 and "SyntaxError" in f.what


def test_base_findings_are_marked_and_new_copies_are_not(tmp_path):
    base, pr = tmp_path / "base" / "kernels", tmp_path / "pr" / "kernels"
    base.mkdir(parents=True)
    pr.mkdir(parents=True)
    (base / "a.py").write_text("import torch\ns = torch.cuda.Stream()\n")
    (pr / "a.py").write_text("import torch\n\n\ns = torch.cuda.Stream()\nt = torch.cuda.Stream()\n"
                             "import time\ntime.time = None\n")
    (pr / "sub").mkdir()
    (pr / "sub" / "b.py").write_text("import ctypes\n")
    found = compare_scans(scan_folders({"kernels": pr}), scan_folders({"kernels": base}))
    rows = {(f.path, f.line, f.category, f.in_base) for f in found}
    assert rows == {("kernels/a.py", 4, "stream", True), ("kernels/a.py", 5, "stream", False),
                    ("kernels/a.py", 7, "monkeypatch", False), ("kernels/sub/b.py", 1, "native", False)}
