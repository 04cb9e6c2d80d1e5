"""Static cross-architecture check (harness.aot, harness.cudabuild) on planted kernels, no GPU needed.

The planted module is loaded twice, once with Triton's interpreter on and once off, so both kinds of kernel
object (InterpretedFunction, JITFunction) are covered whatever TRITON_INTERPRET says for this process.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import triton.language as tl
from triton import knobs
from triton.runtime.autotuner import Autotuner
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

from harness.aot import nvcc as cudabuild
from harness.aot import triton as aot
from tests.planted import aot_kernels, sanitizer_kernels

ARCHS = ("sm_80", "sm_90", "sm_100")
PLANTED = Path(aot_kernels.__file__)


def load_planted(interpret: bool):
    name = f"_planted_aot_kernels_{'interpreted' if interpret else 'jit'}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, PLANTED)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        with knobs.runtime.scope():  # triton.jit reads the switch when it decorates
            knobs.runtime.interpret = interpret
            spec.loader.exec_module(mod)
    return sys.modules[name]


def meta(*shape, dtype=torch.float32):
    return torch.empty(*shape, dtype=dtype, device="meta")


@pytest.fixture(params=[False, True], ids=["jit", "interpreted"])
def planted(request):
    return load_planted(request.param)


@pytest.fixture(scope="module")
def compiled():
    """Each planted Triton kernel compiled once for the tests below to share."""
    k = load_planted(False)
    good = aot.record_launches(k.scale_add, dict(x=meta(4096), y=meta(4096), out=meta(4096)))
    fp8 = aot.record_launches(k.to_fp8, dict(x=meta(4096), out=meta(4096, dtype=torch.float8_e4m3fn)))
    spill = aot.record_launches(k.spill, dict(x=meta(2, k.SPILL_BLOCK), out=meta(2, k.SPILL_BLOCK)))
    return {"good": aot.compile_all(good, ARCHS), "fp8": aot.compile_all(fp8, ARCHS),
            "spill": aot.compile_all(spill, ("sm_90",))}


# ---------------------------------------------------------------------------------------------- compile


def test_good_kernel_compiles_clean_on_every_arch(compiled):
    assert [r.arch for r in compiled["good"]] == list(ARCHS)
    for res in compiled["good"]:
        assert res.ok, res.error
        assert res.resources.registers > 0
        assert (res.resources.spill_store_bytes, res.resources.spill_load_bytes) == (0, 0)
        assert aot.check(res, res.arch, allow_spills=False) == []


def test_kernel_from_interpreted_module_compiles(planted):
    rec, = aot.record_launches(planted.scale_add, dict(x=meta(4096), y=meta(4096), out=meta(4096)))
    assert isinstance(rec.jit_fn, InterpretedFunction if planted.__name__.endswith("interpreted")
                      else JITFunction)
    res = aot.compile_launch(rec, "sm_90")
    assert res.ok, res.error
    assert aot.check(res, "sm_90") == []


def test_spilling_kernel_is_reported_as_spilling(compiled):
    res, = compiled["spill"]
    assert res.ok, res.error
    r = res.resources
    assert r.spill_store_bytes > 0 and r.spill_load_bytes > 0   # from ptxas -v
    assert r.stack_bytes > 0                                     # cuobjdump: where the spills live
    assert r.registers > 0
    problems = aot.check(res, "sm_90", allow_spills=False)
    assert len(problems) == 1 and "spills" in problems[0] and "spill_kernel" in problems[0]
    assert aot.check(res, "sm_90", allow_spills=True) == []


def test_fp8_kernel_fails_to_compile_on_sm80_only(compiled):
    by_arch = {r.arch: r for r in compiled["fp8"]}
    bad = by_arch["sm_80"]
    assert not bad.ok and bad.resources is None
    assert "fp8e4nv" in bad.error and "\n" not in bad.error
    problems = aot.check(bad, "sm_80")
    assert len(problems) == 1 and "compile error" in problems[0]
    for arch in ("sm_90", "sm_100"):
        assert by_arch[arch].ok, by_arch[arch].error
        assert aot.check(by_arch[arch], arch) == []


def test_shared_memory_limit_is_per_arch():
    res = aot.CompileResult("k", "sm_90", "BLOCK=1 w4 s3", ok=True,
                            resources=cudabuild.Resources(64, 0, 0, 0, 0, 200_000))
    assert aot.check(res, "sm_90") == []
    (problem,) = aot.check(res, "sm_80")
    assert "shared memory 200000 B > sm_80 limit 166912 B" in problem
    assert aot.check(res, "sm_86") and aot.check(res, "sm_100") == []


def test_table_rows_and_text(compiled):
    results = compiled["good"] + compiled["fp8"] + compiled["spill"]
    rows = aot.table_rows(results)
    assert all(isinstance(r, aot.TableRow) for r in rows) and len(rows) == 7
    assert [f.name for f in dataclasses.fields(aot.TableRow)][:3] == ["kernel", "arch", "config"]
    status = {(r.kernel, r.arch): r.status for r in rows}
    assert status[("scale_add_kernel", "sm_80")] == "ok"
    assert status[("to_fp8_kernel", "sm_80")].startswith("compile error")
    assert status[("spill_kernel", "sm_90")].startswith("spills")
    assert rows[0].config == "BLOCK=1024 w4 s3 [fp32]"
    text = aot.render_table(rows)
    lines = text.splitlines()
    assert lines[0].split()[:4] == ["kernel", "arch", "config", "regs"] and len(lines) == 2 + len(rows)
    assert any("to_fp8_kernel" in ln and "compile error" in ln for ln in lines)


# ---------------------------------------------------------------------------------------------- recording


def test_records_under_interpreter_without_running():
    k = load_planted(True)
    assert isinstance(k.scale_add_kernel, InterpretedFunction)
    x, y = torch.randn(3000), torch.randn(3000)
    out = torch.full((3000,), float("nan"))
    seen = {}

    def launcher(**kw):
        seen.update(kw)
        k.scale_add(**kw)

    rec, = aot.record_launches(launcher, dict(x=x, y=y, out=out))
    assert torch.isnan(out).all()  # untouched: the interpreter never ran
    assert seen["out"].device.type == "meta" and seen["out"].shape == out.shape
    assert rec.kernel_name == "scale_add_kernel" and rec.module == k.__name__
    assert rec.constexprs == {"BLOCK": 1024} and (rec.num_warps, rec.num_stages) == (4, 3)
    assert rec.signature == {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                             "BLOCK": "constexpr"}
    assert rec.grid == (3, 1, 1)
    assert rec.divisible_by_16 == ("x_ptr", "y_ptr", "out_ptr")  # 3000 % 16 != 0
    k.scale_add(x=x, y=y, out=out)  # and, not intercepted, the same call does run
    assert torch.allclose(out, 2 * x + y)


@pytest.mark.parametrize("n, ty, div16, specialised", [
    (1, "constexpr", False, True),
    (4096, "i32", True, False),
    (4095, "i32", False, False),
    (2**31 + 16, "i64", True, False),
])
def test_integer_specialisation_follows_triton(planted, n, ty, div16, specialised):
    rec, = aot.record_launches(planted.scale_add, dict(x=meta(n), y=meta(n), out=meta(n)))
    assert rec.signature["n"] == ty
    assert ("n" in rec.divisible_by_16) == div16
    assert ("n" in rec.specialised) == specialised
    if specialised:
        assert rec.constexprs["n"] == 1 and rec.config_label() == "BLOCK=1,n=1 w1 s3 [fp32]"


def test_specialised_constant_compiles(planted):
    rec, = aot.record_launches(planted.scale_add, dict(x=meta(1), y=meta(1), out=meta(1)))
    res = aot.compile_launch(rec, "sm_80")
    assert res.ok, res.error


def test_autotuned_kernel_records_every_config(planted):
    recs = aot.record_launches(planted.tuned_copy, dict(x=meta(5000), out=meta(5000)))
    got = [(r.autotune_config, r.autotune_count, r.constexprs["BLOCK"], r.constexprs["EVEN"], r.num_warps,
            r.num_stages, r.grid) for r in recs]
    assert got == [(0, 2, 256, False, 2, 3, (20, 1, 1)), (1, 2, 1024, False, 4, 2, (5, 1, 1))]
    assert recs[0].config_label() == "#0 BLOCK=256,EVEN=False w2 s3 [fp32]"
    assert [r.ok for r in aot.compile_all(recs, ("sm_90",))] == [True, True]


def test_cpu_fallback_when_meta_cannot(planted):
    x, out = torch.full((300,), 2.0), torch.zeros(300)
    with pytest.warns(UserWarning, match="CPU tensors"):
        rec, = aot.record_launches(planted.scale_by_first, dict(x=x, out=out))
    assert "recorded with CPU tensors" in rec.note and "meta" in rec.note
    assert rec.signature["scale"] == "fp32" and rec.grid == (2, 1, 1)
    assert torch.equal(out, torch.zeros(300))
    with pytest.raises(RuntimeError, match="CPU fallback limit"):
        aot.record_launches(planted.scale_by_first, dict(x=meta(1 << 24), out=meta(1 << 24)),
                            cpu_fallback_bytes=1 << 20)


def test_interception_is_undone_also_on_errors(planted):
    classes = (JITFunction, Autotuner, InterpretedFunction)
    before = [c.__dict__["run"] for c in classes]

    def failing(**kw):
        planted.scale_add(**kw)
        raise ValueError("launcher bug")

    with pytest.raises(ValueError, match="launcher bug"):
        aot.record_launches(failing, dict(x=meta(8), y=meta(8), out=meta(8)))
    with pytest.raises(KeyError), aot.intercept_launches():
        raise KeyError("inside")
    assert [c.__dict__["run"] for c in classes] == before


# ---------------------------------------------------------------------------------------------- nvcc

needs_nvcc = pytest.mark.skipif(cudabuild.find_nvcc() is None, reason="nvcc not installed")


@needs_nvcc
def test_build_cuda_carries_sass_per_arch_and_ptx_for_newest():
    res = cudabuild.build_cuda(aot_kernels.CUDA_SRC)
    assert res.status == "ok" and res.ok, (res.error, res.problems)
    assert res.sass_archs == ARCHS and res.ptx_archs == ("sm_100",)
    by = {(k.kernel, k.arch): k.resources for k in res.kernels}
    assert set(by) == {(name, a) for name in ("axpy", "reverse256") for a in ARCHS}
    for arch in ARCHS:
        assert by[("axpy", arch)].registers > 0 and by[("axpy", arch)].shared_bytes == 0
        # 256 floats everywhere, although sm_90+ binaries report 1 KiB more (the driver-reserved part)
        assert by[("reverse256", arch)].shared_bytes == 256 * 4
        assert cudabuild.resource_problems(by[("reverse256", arch)], arch, allow_spills=False) == []


@needs_nvcc
def test_build_cuda_syntax_error_is_one_line():
    res = cudabuild.build_cuda(aot_kernels.CUDA_SRC_BAD)
    assert res.status == "error" and not res.ok
    assert "error" in res.error and "\n" not in res.error and "kernel.cu" in res.error
    assert res.stderr_head and not res.kernels


IMPLICIT_BF16 = r"""
#include <cuda_bf16.h>
__global__ void widen(const __nv_bfloat16* x, float* y) { y[threadIdx.x] = static_cast<float>(x[threadIdx.x]); }
"""


@needs_nvcc
def test_build_cuda_with_torch_flags_rejects_what_load_inline_rejects():
    # Plain nvcc accepts the implicit bfloat16 -> float conversion; torch's extension build does not, and
    # the matrix compiles with torch's flags so that it fails here, not in the first GPU test.
    assert cudabuild.build_cuda(IMPLICIT_BF16, ("sm_90",)).status == "ok"
    strict = cudabuild.build_cuda(IMPLICIT_BF16, ("sm_90",), extra_flags=cudabuild.torch_extension_flags())
    assert strict.status == "error" and "bfloat16" in strict.error
    planted = cudabuild.build_cuda(sanitizer_kernels._RACY_SRC, ("sm_90",),
                                   extra_flags=cudabuild.torch_extension_flags())
    assert planted.ok, planted.error


# one of the int4 decode kernel's 56 instantiations as its binary names it (kernels/int4_gemv.cu)
MANGLED = ("_ZN7kh_int445_GLOBAL__N__13a0c060_12_int4_gemv_cu_c23d1c4913int4_gemv_mmaI13__nv_bfloat16Li1ELi1ELi2ELi0E"
           "Lb1EEEvNS0_6ParamsE")


@pytest.mark.skipif(cudabuild.find_tool("cu++filt") is None and cudabuild.find_tool("c++filt") is None,
                    reason="neither cu++filt nor c++filt is installed")
def test_kernel_names_are_printed_as_the_source_spells_them():
    names = cudabuild.readable_names([MANGLED, "reverse256", MANGLED])
    assert names == {MANGLED: "kh_int4::int4_gemv_mma<__nv_bfloat16, 1, 1, 2, 0, true>", "reverse256": "reverse256"}


def test_without_a_demangler_the_binarys_names_stay(monkeypatch):
    monkeypatch.setattr(cudabuild, "find_tool", lambda name, prefer_triton=False: None)
    assert cudabuild.readable_names([MANGLED]) == {MANGLED: MANGLED}


@pytest.mark.parametrize(("demangled", "shown"), [
    ("void ns::f<int, (char)1>(ns::Params)", "ns::f<int, (char)1>"),
    ("ns::g(int (*)(float))", "ns::g"),
    ("reverse256", "reverse256"),
])
def test_the_argument_list_and_a_templates_return_type_are_dropped(demangled, shown):
    assert cudabuild._without_arguments(demangled) == shown


def test_build_cuda_without_nvcc(monkeypatch):
    monkeypatch.setattr(cudabuild, "find_nvcc", lambda: None)
    res = cudabuild.build_cuda(aot_kernels.CUDA_SRC)
    assert res.status == "skipped: nvcc not found" and not res.ok
    assert cudabuild.build_cuda(aot_kernels.CUDA_SRC, nvcc="/nonexistent/nvcc").status.startswith("skipped")


def test_an_interpreted_launch_leaves_triton_language_as_it_found_it():
    """spill_kernel calls tl.sum, one of Triton's own @jit library functions: its call patches the builtins of
    triton.language.core, a scope Triton drops. The layer restores them when the launch ends, so a compile
    after an interpreter run in the same process builds real IR (it failed with "'value' object has no
    attribute 'dtype'" after an xdist worker had run interpreted items)."""
    k = load_planted(True)
    if not isinstance(tl.sum, InterpretedFunction):
        pytest.skip("triton.language was imported without TRITON_INTERPRET=1: no interpreter run possible")
    import harness.interpreter as layer

    layer.install()
    owners = [tl, tl.core, tl.math, tl.core.tensor]
    before = [dict(vars(o)) for o in owners]
    x = torch.randn(2, 16, generator=torch.Generator().manual_seed(0))
    k.spill(x=x, out=torch.empty_like(x))
    changed = [(o.__name__, n) for o, b in zip(owners, before, strict=True) for n, v in vars(o).items()
               if n in b and b[n] is not v]
    assert changed == [], changed[:10]
    rec, = aot.record_launches(load_planted(False).scale_add, dict(x=meta(4096), y=meta(4096), out=meta(4096)))
    assert aot.compile_launch(rec, "sm_80").ok


def test_interpreter_unharmed_by_compiling_interpreted_kernels():
    # spill_kernel calls tl.sum, itself an InterpretedFunction when triton.language was imported with
    # TRITON_INTERPRET=1; compiling swaps in JITFunctions for the time of the compile only
    k = load_planted(True)
    x = torch.randn(2, 16, generator=torch.Generator().manual_seed(0))  # its own seed: independent of test order
    out = torch.empty_like(x)
    rec, = aot.record_launches(k.spill, dict(x=x, out=out))
    assert aot.compile_launch(rec, "sm_80").ok
    if not isinstance(tl.sum, InterpretedFunction):
        pytest.skip("triton.language was imported without TRITON_INTERPRET=1: no interpreter run possible")
    k.spill(x=x, out=out)  # runs in the interpreter, with tl as it was
    xd = x.double()
    s, w = xd.sum(1, keepdim=True), xd * xd
    # fp32 sums of 16 terms against the fp64 value: rounding of order 1e-5 where (x - s) * sum(w) cancels with w;
    # an interpreter harmed by the compile gives garbage or raises, far beyond this
    torch.testing.assert_close(out.double(), (xd - s) * w.sum(1, keepdim=True) + w, rtol=1e-5, atol=1e-4)
