"""harness.aot.workflow: each step of ``matrix`` on its own, with the compilers replaced where a step calls one."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace as NS

import pytest

import harness.aot.triton as aot_triton
from harness.aot import workflow as wf
from harness.aot.launches import LaunchRecord
from harness.aot.nvcc import CudaBuildResult, KernelResources, Resources
from harness.aot.summary import MatrixEntry, cuda_entries, not_applicable
from harness.aot.triton import CompileResult, TableRow
from harness.spec.archs import DEFAULT_ARCHS
from harness.steps import BadInput
from tests.test_matrix import SPEC


def _unused(*_args):
    pytest.fail("this step should not call it")


def _run(**kw) -> wf.MatrixRun:
    return wf.MatrixRun(**{"meta_args": _unused, "write_text": _unused, **kw})


def _backend(name, source=None, requires=("triton",), arch=()):
    return NS(name=name, impl=f"m:{name}", source=source, requires=requires, arch=arch)


def _spec(*backends, waivers=None, cases=None, dtypes=("fp32",)):
    return NS(name="k", waivers=waivers or {}, backends={b.name: b for b in backends}, cases=cases or {},
              dtypes=dtypes, must_refuse=lambda backend, layout: layout != "contiguous")


def _record(name="kern", block=64) -> LaunchRecord:
    return LaunchRecord(name, "m", None, {"x": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": block}, 4, 3, (1, 1, 1))


def _entry(arch, status="ok", problems=()):
    return MatrixEntry("k", "triton", arch, status, 1, "", problems, "" if status in ("ok", "failed") else "why")


def _row(arch="sm_90") -> TableRow:
    return TableRow("k:kern", arch, "BLOCK=64 w4 s3", 32, 0, 0, 0, 0, 0.1, "ok")


def test_pick_archs_defaults_to_every_target_and_refuses_an_unknown_one():
    assert wf.pick_archs(_run()).archs == DEFAULT_ARCHS
    assert wf.pick_archs(_run(arch_options=("gfx942,sm_90", "sm_90"))).archs == ("gfx942", "sm_90")
    with pytest.raises(BadInput, match=r"^--arch: .*'mi300'"):
        wf.pick_archs(_run(arch_options=("mi300",)))


def test_pick_workers_says_how_many(monkeypatch, capsys):
    monkeypatch.setattr(wf.parallel, "fork_available", lambda: True)
    assert wf.pick_workers(_run(jobs=3)).workers == 3
    assert capsys.readouterr().err == "matrix: compiling Triton kernels in 3 worker processes\n"
    monkeypatch.setenv(wf.parallel.JOBS_ENV, "many")
    with pytest.raises(BadInput, match="KH_MATRIX_JOBS"):
        wf.pick_workers(_run())


def test_load_specs_takes_the_kernels_asked_for_bound_to_their_code(tmp_path):
    (tmp_path / "spill.toml").write_text(SPEC.format(name="spill"))
    (tmp_path / "to_fp8.toml").write_text(SPEC.format(name="to_fp8"))
    (spec,) = wf.load_specs(_run(specs_dir=str(tmp_path), kernels=("spill",))).specs
    assert spec.name == "spill"
    assert [s.name for s in wf.load_specs(_run(specs_dir=str(tmp_path))).specs] == ["spill", "to_fp8"]
    with pytest.raises(BadInput, match="no spec for kernel"):
        wf.load_specs(_run(specs_dir=str(tmp_path), kernels=("rope",)))
    (tmp_path / "no_such_kernel.toml").write_text(SPEC.format(name="no_such_kernel"))  # loads, does not import
    (tmp_path / "broken.toml").write_text("[kernel]\n")
    with pytest.raises(BadInput, match="broken.toml"):
        wf.load_specs(_run(specs_dir=str(tmp_path)))
    with pytest.raises(BadInput, match="no_such_kernel"):
        wf.load_specs(_run(specs_dir=str(tmp_path), kernels=("spill", "no_such_kernel")))


def test_plan_backends_applies_waivers_and_what_is_not_applicable():
    cuda = _backend("cuda", source="m:SRC", requires=())
    tma = _backend("triton_tma", arch=(">=sm_90",))
    torch = _backend("torch", requires=("torch",))
    spec = _spec(cuda, tma, torch, waivers={"matrix.gfx950": "no MI350 runner"})
    run = _run(archs=("sm_80", "sm_90", "gfx942", "gfx950"), specs=(spec,))
    jobs = {j.backend.name: j for j in wf.plan_backends(run).backends}
    assert (jobs["cuda"].kind, jobs["cuda"].archs) == (wf.CUDA, ("sm_80", "sm_90"))
    assert jobs["cuda"].entries == (not_applicable("k", "cuda", "gfx942"), not_applicable("k", "cuda", "gfx950"))
    assert (jobs["triton_tma"].kind, jobs["triton_tma"].archs) == (wf.TRITON, ("sm_90", "gfx942"))
    assert [(e.arch, e.status) for e in jobs["triton_tma"].entries] == [("gfx950", "waived"),
                                                                         ("sm_80", "not applicable")]
    assert "does not claim sm_80" in jobs["triton_tma"].entries[1].reason
    assert (jobs["torch"].kind, jobs["torch"].archs) == ("", ())
    assert [(e.arch, e.status, e.reason) for e in jobs["torch"].entries] == [("gfx950", "waived", "no MI350 runner")]
    asked = {j.backend.name: j for j in wf.plan_backends(replace(run, compile_waived=True)).backends}
    assert asked["triton_tma"].archs == ("sm_90", "gfx942", "gfx950") and asked["torch"].entries == ()


def test_build_cuda_backends_prints_and_summarises_each_build(monkeypatch, capsys):
    monkeypatch.setattr(wf, "resolve_import", lambda path: "__global__ void k() {}")
    monkeypatch.setattr(wf, "torch_extension_flags", lambda: ())
    kernel = KernelResources("k_kernel", "sm_80", Resources(40, 0, 0, 0, 0, 1024))
    monkeypatch.setattr(wf, "build_cuda", lambda src, archs, extra_flags: CudaBuildResult(
        "ok", archs, sass_archs=archs, kernels=(kernel,)))
    spec = _spec()
    cuda = wf.BackendJob(spec, _backend("cuda", source="m:SRC"), wf.CUDA, ("sm_80",),
                         (not_applicable("k", "cuda", "gfx942"),))
    idle = wf.BackendJob(spec, _backend("cuda2", source="m:SRC"), wf.CUDA, ())  # every target waived
    triton = wf.BackendJob(spec, _backend("triton"), wf.TRITON, ("sm_80",))
    built, idle2, triton2 = wf.build_cuda_backends(_run(backends=(cuda, idle, triton))).backends
    assert capsys.readouterr().out == ("k cuda: nvcc ok; SASS sm_80; PTX -\n"
                                       "  sm_80 k_kernel: 40 regs, spills 0/0 B, stack 0 B, smem 1024 B\n")
    assert built.entries[0] == cuda.entries[0]
    assert [(e.arch, e.status, e.summary) for e in built.entries[1:]] == [
        ("sm_80", "ok", "<=40 regs, smem <=1024 B, no spills")]
    assert (idle2, triton2) == (idle, triton)


def test_a_cuda_backend_for_sm_90a_builds_as_sm_90a_for_sm_90_alone(monkeypatch, capsys):
    # wgmma and setmaxnreg exist on sm_90a alone: sm_80 and sm_100 are not the backend's, sm_90 builds as sm_90a
    run = _run(archs=("sm_80", "sm_90", "sm_100"), specs=(_spec(_backend("cuda", source="m:SRC", requires=(),
                                                                         arch=("sm_90a",))),))
    (job,) = wf.plan_backends(run).backends
    assert job.archs == ("sm_90",)
    assert [(e.arch, e.status) for e in job.entries] == [("sm_80", "not applicable"), ("sm_100", "not applicable")]
    assert "(sm_90a) does not claim sm_100" in job.entries[1].reason
    asked = []
    monkeypatch.setattr(wf, "resolve_import", lambda path: "__global__ void k() {}")
    monkeypatch.setattr(wf, "torch_extension_flags", lambda: ())
    monkeypatch.setattr(wf, "build_cuda", lambda src, archs, extra_flags: asked.append(archs) or CudaBuildResult(
        "ok", tuple(archs), sass_archs=("sm_90",), ptx_archs=("sm_90",)))
    (built,) = wf.build_cuda_backends(replace(run, backends=(job,))).backends
    assert asked == [["sm_90a"]] and built.entries[-1].arch == "sm_90"
    assert capsys.readouterr().out.startswith("k cuda: nvcc ok (built as sm_90a); SASS sm_90; PTX sm_90\n")


def test_a_cuda_kernel_that_spills_or_overflows_fails_its_target(monkeypatch):
    spills = KernelResources("k_spills", "sm_90", Resources(255, 64, 128, 0, 0, 0))
    big = KernelResources("k_big", "sm_90", Resources(96, 0, 0, 0, 0, 300 * 1024))
    fine = KernelResources("k_fine", "sm_80", Resources(96, 0, 0, 0, 0, 0))
    result = CudaBuildResult("ok", ("sm_80", "sm_90"), sass_archs=("sm_80", "sm_90"), ptx_archs=("sm_90",),
                             kernels=(spills, big, fine))
    ok, failed = cuda_entries("k", "cuda", ("sm_80", "sm_90"), result, {})
    assert (ok.arch, ok.status, ok.problems) == ("sm_80", "ok", ())
    assert failed.status == "failed" and failed.problems == (
        "k sm_90: k_spills: spills 64 B stored / 128 B loaded", f"k sm_90: k_big: shared memory {300 * 1024} B > "
        "sm_90 limit 232448 B")


def test_record_launches_keeps_each_config_once_and_reports_launcher_failures(monkeypatch):
    monkeypatch.setattr(wf, "resolve_import", lambda path: "launcher")

    def record(fn, args):
        if args["case"] == "refused":
            raise AssertionError("`x` groups must be contiguous")  # a refused layout: any exception, as in pytest
        if args["case"] == "broken":
            raise RuntimeError("boom")
        return [_record(block=64), _record(block=128 if args["dtype"] == "bf16" else 64)]

    monkeypatch.setattr(wf, "record_calls", record)
    cases = {"edge": [NS(id="a", layout="contiguous"), NS(id="refused", layout="strided")],
             "ci": [NS(id="broken", layout="contiguous")]}
    spec = _spec(cases=cases, dtypes=("fp32", "bf16"))
    job = wf.BackendJob(spec, _backend("triton"), wf.TRITON, ("sm_90",))
    run = _run(backends=(job,), meta_args=lambda s, case, dtype: {"case": case.id, "dtype": dtype})
    (got,) = wf.record_launches(run).backends
    assert [r.constexprs["BLOCK"] for r in got.records] == [64, 128]
    assert got.errors == ("k triton fp32 broken: launcher failed: RuntimeError: boom",
                          "k triton bf16 broken: launcher failed: RuntimeError: boom")


def test_compile_launches_compiles_a_shared_launch_once(monkeypatch, capsys):
    calls = []

    def compile_all(records, archs, jobs=None):
        calls.append((len(records), tuple(archs), jobs))
        return [CompileResult(r.kernel_name, a, f"BLOCK={r.constexprs['BLOCK']}", True,
                              resources=Resources(32, 0, 0, 0, 0, 0), num_warps=4, record=r)
                for r in records for a in archs]

    monkeypatch.setattr(aot_triton, "compile_all", compile_all)
    spec, shared = _spec(), _record(block=64)
    first = wf.BackendJob(spec, _backend("triton_tma"), wf.TRITON, ("sm_90",), records=(shared,))
    second = wf.BackendJob(spec, _backend("triton"), wf.TRITON, ("sm_80", "sm_90"), records=(shared, _record(block=32)))
    a, b = wf.compile_launches(_run(backends=(first, second), workers=2)).backends
    assert calls == [(1, ("sm_90",), 2), (1, ("sm_80",), 2), (1, ("sm_80", "sm_90"), 2)]
    assert [(r.kernel, r.arch) for r in a.rows] == [("k:kern", "sm_90")]
    assert [(r.arch, r.config) for r in b.rows] == [("sm_80", "BLOCK=64"), ("sm_80", "BLOCK=32"), ("sm_90", "BLOCK=32")]
    assert [(e.arch, e.status, e.configs) for e in b.entries] == [("sm_80", "ok", 2), ("sm_90", "ok", 2)]
    err = capsys.readouterr().err
    assert "k triton: 2 distinct launch configs x 2 archs" in err and "(1 of 4 compiled already" in err


def test_collect_keeps_the_specs_order_and_lists_launcher_failures_first():
    spec = _spec()
    one = wf.BackendJob(spec, _backend("a"), wf.TRITON, entries=(_entry("sm_80", "failed", ("k sm_80: spill",)),),
                        errors=("k a fp32 x: launcher failed",), rows=(_row("sm_80"),))
    two = wf.BackendJob(spec, _backend("b"), wf.TRITON, entries=(_entry("sm_90", "waived", ("k sm_90: LDS",)),),
                        errors=("k b fp32 y: launcher failed",), rows=(_row("sm_90"),))
    run = wf.collect(_run(backends=(one, two)))
    assert [e.arch for e in run.entries] == ["sm_80", "sm_90"] and [r.arch for r in run.rows] == ["sm_80", "sm_90"]
    assert run.problems == ("k a fp32 x: launcher failed", "k b fp32 y: launcher failed", "triton k sm_80: spill")


def test_print_summary_lists_the_table_the_notes_and_the_problems(capsys):
    entries = (_entry("gfx942", "not applicable"), _entry("gfx950", "waived"),
               _entry("sm_90", "waived", ("k sm_90: LDS",)))
    wf.print_summary(_run(rows=(_row(),), entries=entries, problems=("spilled",)))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["kernel", "arch", "config"] and lines[2].startswith("k:kern")
    assert lines[3:] == ["NOT APPLICABLE: k triton on gfx942: why",
                         "WAIVED: k triton on gfx950: why (not compiled; --compile-waived shows its problems)",
                         "WAIVED: k triton on sm_90: why (k sm_90: LDS)", "PROBLEM: spilled"]
    wf.print_summary(_run())
    assert capsys.readouterr().out == ""


def test_write_entries_writes_the_report_s_json_through_the_given_writer(tmp_path, capsys):
    written = {}
    run = _run(out=str(tmp_path / "sub" / "matrix.json"), archs=("sm_90",), entries=(_entry("sm_90"),),
               write_text=lambda path, text: written.setdefault(path, text))
    wf.write_entries(run)
    ((path, text),) = written.items()
    doc = json.loads(text)
    assert path.parent.is_dir() and doc["archs"] == ["sm_90"] and doc["entries"][0]["arch"] == "sm_90"
    assert capsys.readouterr().out == f"wrote {path}\n"
    assert wf.write_entries(_run()) == _run()  # no --out: nothing written
    with pytest.raises(BadInput, match="is a folder"):
        wf.write_entries(_run(out=str(tmp_path)))


def test_print_totals_counts_configs_problems_waivers(capsys):
    entries = (_entry("sm_90"), _entry("gfx950", "waived"), _entry("gfx942", "not applicable"))
    wf.print_totals(_run(archs=("sm_90", "gfx942", "gfx950"), rows=(_row(), _row()), entries=entries,
                         problems=("p",)))
    assert capsys.readouterr().out == ("matrix: 2 compiled kernel configs x archs (sm_90, gfx942, gfx950), "
                                       "1 problem(s), 1 waived, 1 not applicable\n")



def test_a_standalone_backward_kernel_is_a_matrix_backend_of_its_own_with_its_own_waivers():
    """[backward.backends.<name>] kernel compiles as "<name> backward", launched with the backward's meta
    arguments; backward.matrix.<target> waives it alone, the forward keeps that target."""
    from harness.spec.model import Backend

    triton = Backend("triton", "m:fwd", requires=("triton",))
    bwd = NS(backends={"triton": NS(kernel="m:bwd")})
    spec = NS(**vars(_spec(triton, waivers={"backward.matrix.rocm": "not tuned for AMD"})), backward=bwd)
    run = _run(archs=("sm_90", "gfx942"), specs=(spec,), meta_backward_args=lambda s, c, d: {"bwd": c})
    jobs = {j.backend.name: j for j in wf.plan_backends(run).backends}
    assert jobs["triton"].archs == ("sm_90", "gfx942") and not jobs["triton"].backward
    back = jobs["triton backward"]
    assert (back.backward, back.backend.impl, back.archs) == (True, "m:bwd", ("sm_90",))
    assert [(e.arch, e.status, e.reason) for e in back.entries] == [("gfx942", "waived", "not tuned for AMD")]
    assert "triton backward" not in {j.backend.name for j in wf.plan_backends(replace(run, meta_backward_args=None))
                                     .backends}


def test_the_backward_matrix_waiver_is_a_valid_key_and_a_bad_target_is_not():
    from harness.spec.waivers import key_problem

    assert key_problem("backward.matrix.gfx942") == "" and key_problem("backward.matrix.rocm") == ""
    assert "not a matrix target: 'mi300'" in key_problem("backward.matrix.mi300")
