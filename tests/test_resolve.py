"""The backend resolver on pretend devices: each fallback step and each reason."""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.bench.plan import arch_matrix_rows
from harness.cli.main import main
from harness.results.model import ArchRow
from harness.spec.archs import build_target, parse_rule
from harness.target import resolve as resolve_mod
from harness.target.device import fake_device
from harness.target.resolve import resolve
from tests.e2e import make_spec, synthetic_results

CUDA_BACKEND = """
[backends.cuda]
impl = "tests.planted.broken_kernels:scale"
arch = [">=sm_80"]
requires = ["torch"]
tools = ["{tool}"]
"""


def spec_with_cuda(tmp_path, tool="sh", triton_arch='["cpu", ">=sm_80"]'):
    make_spec(tmp_path, "scale")
    text = (tmp_path / "scale.toml").read_text()
    text = text.replace('fallback = ["triton", "reference"]', 'fallback = ["cuda", "triton", "reference"]')
    text = text.replace('arch = ["cpu", ">=sm_80"]', f"arch = {triton_arch}")
    (tmp_path / "scale.toml").write_text(text + CUDA_BACKEND.replace("{tool}", tool))
    from harness.spec.load import load as load_spec

    return load_spec(tmp_path / "scale.toml")


def selected(statuses):
    return next(s.backend for s in statuses if s.selected)


@pytest.mark.parametrize("rule, arch, expected", [
    (">=sm_80", "sm_75", False), (">=sm_80", "sm_80", True), (">=sm_80", "sm_100", True),
    ("<sm_100", "sm_90", True), ("<sm_100", "sm_100", False), ("sm_80..sm_90", "sm_86", True),
    ("sm_80..sm_90", "sm_100", False), ("cpu", "cpu", True), (">=sm_80", "cpu", False), ("sm_90", "sm_90", True),
])
def test_arch_rules(rule, arch, expected):
    assert parse_rule(rule).matches(arch) is expected


@pytest.mark.parametrize("rules, target, built", [
    (("sm_90a",), "sm_90", "sm_90a"),       # arch-specific instructions: built as sm_90a
    (("cpu", "sm_90a", ">=sm_100"), "sm_100", "sm_100"),
    ((">=sm_90",), "sm_90", "sm_90"),       # a comparison names no suffix to build with
    (("sm_100f",), "sm_100", "sm_100f"),
    (("sm_90a",), "gfx942", "gfx942"),
])
def test_a_target_builds_under_the_suffix_its_rule_names(rules, target, built):
    assert build_target(rules, target) == built


def test_sm90_runs_cuda(tmp_path):
    statuses = resolve(spec_with_cuda(tmp_path), fake_device("sm_90"))
    assert selected(statuses) == "cuda"
    assert all(s.runnable for s in statuses)


def test_sm100_runs_cuda(tmp_path):
    assert selected(resolve(spec_with_cuda(tmp_path), fake_device("sm_100"))) == "cuda"


def test_sm80_runs_cuda(tmp_path):
    assert selected(resolve(spec_with_cuda(tmp_path), fake_device("sm_80"))) == "cuda"


def test_sm75_falls_back_to_reference_with_arch_reasons(tmp_path):
    statuses = {s.backend: s for s in resolve(spec_with_cuda(tmp_path), fake_device("sm_75"))}
    assert statuses["reference"].selected
    assert statuses["cuda"].reason == "architecture sm_75 is outside >=sm_80"
    assert statuses["triton"].reason == "architecture sm_75 is outside cpu, >=sm_80"


def test_cpu_falls_back_to_triton_interpreter(tmp_path):
    statuses = {s.backend: s for s in resolve(spec_with_cuda(tmp_path), fake_device("cpu"))}
    assert statuses["triton"].selected
    assert "outside >=sm_80" in statuses["cuda"].reason


def test_missing_tool_falls_back_to_triton(tmp_path):
    statuses = {s.backend: s for s in resolve(spec_with_cuda(tmp_path, tool="no-such-compiler-xyz"),
                                              fake_device("sm_90"))}
    assert statuses["triton"].selected
    assert statuses["cuda"].reason == "tool no-such-compiler-xyz not found"


def test_missing_module_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(resolve_mod, "module_available", lambda name: name != "triton")
    statuses = {s.backend: s for s in resolve(spec_with_cuda(tmp_path, tool="no-such-compiler-xyz"),
                                              fake_device("sm_90"))}
    assert statuses["triton"].reason == "module triton not importable"
    assert statuses["reference"].selected


def test_build_failure_falls_back(tmp_path, monkeypatch):
    monkeypatch.setattr(resolve_mod, "_build", lambda path, dev: "RuntimeError: nvcc exited with 1")
    import dataclasses

    spec = spec_with_cuda(tmp_path)
    device = dataclasses.replace(fake_device("sm_90"), fake=False)  # a real device runs build hooks
    spec = dataclasses.replace(spec, backends={**spec.backends, "cuda": dataclasses.replace(
        spec.backends["cuda"], build="tests.planted.broken_kernels:scale")})
    statuses = {s.backend: s for s in resolve(spec, device)}
    assert statuses["cuda"].reason == "build failed: RuntimeError: nvcc exited with 1"
    assert statuses["triton"].selected


def test_arch_matrix_says_ran_only_for_the_first_choice(tmp_path):
    spec = spec_with_cuda(tmp_path)
    assert arch_matrix_rows(resolve(spec, fake_device("sm_90"))) == [
        ArchRow("scale", "sm_90", "cuda", "ran", ""),
        ArchRow("scale", "sm_90", "triton", "skipped", "available, but cuda comes first"),
        ArchRow("scale", "sm_90", "reference", "skipped", "available, but cuda comes first")]


def test_arch_matrix_marks_a_fallback_with_what_it_fell_back_past(tmp_path):
    spec = spec_with_cuda(tmp_path, tool="no-such-compiler-xyz")
    rows = {r.backend: r for r in arch_matrix_rows(resolve(spec, fake_device("sm_90")))}
    assert rows["triton"] == ArchRow("scale", "sm_90", "triton", "fallback",
                                     "cuda: tool no-such-compiler-xyz not found")
    assert rows["cuda"].status == "unavailable" and rows["reference"].status == "skipped"
    rows = {r.backend: r for r in arch_matrix_rows(resolve(spec_with_cuda(tmp_path), fake_device("sm_75")))}
    assert rows["reference"].status == "fallback"
    assert rows["reference"].reason == ("cuda: architecture sm_75 is outside >=sm_80; "
                                        "triton: architecture sm_75 is outside cpu, >=sm_80")
    assert [rows[b].status for b in ("cuda", "triton")] == ["unavailable", "unavailable"]


def test_report_renders_a_fallback_from_the_plan(tmp_path, monkeypatch):
    from harness.report import render
    from harness.report.plots import Plots

    monkeypatch.setattr(render, "render_plots", lambda results, out: Plots(notes=("plots off in this test",)))
    rows = arch_matrix_rows(resolve(spec_with_cuda(tmp_path, tool="no-such-compiler-xyz"), fake_device("sm_90")))
    text = render.render_report(replace(synthetic_results(), arch_matrix=tuple(rows)), tmp_path).read_text()
    arch = text[text.index("\n## Architecture matrix\n"):]
    arch = arch[:arch.find("\n## ", 1)]
    assert "fell back to `triton` because cuda: tool no-such-compiler-xyz not found" in arch
    assert "`cuda` unavailable: tool no-such-compiler-xyz not found; fell back to triton" in arch


def test_resolve_command_prints_another_arch_without_running(capsys):
    assert main(["resolve", "--arch", "sm_75", "--kernel", "rmsnorm"]) == 0
    out = capsys.readouterr().out
    assert "rmsnorm" in out and "sm_75" in out and "RUNS" in out
    assert "architecture sm_75 is outside >=sm_80" in out
