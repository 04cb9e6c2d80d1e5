"""AMD in the architecture matrix, with no AMD GPU: the arch grammar (gfx942, gfx950, rocm), resolution on
pretend ROCm devices for every spec in specs/, matrix waivers, and a planted kernel whose LDS fits every
target but gfx942, compiled by Triton's HIP backend on this CPU-only machine."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from harness.aot import amd
from harness.aot import triton as aot
from harness.cli.main import main
from harness.report.matrix import static_matrix
from harness.results.model import ArchRow
from harness.spec.archs import ArchError, parse_arch, parse_rule, parse_targets
from harness.spec.load import load as load_spec
from harness.spec.waivers import matrix_waiver
from harness.target import device as device_mod
from harness.target.device import fake_device
from harness.target.resolve import describe, resolve
from tests.planted import amd_kernels
from tests.test_spec_errors import VALID, _validate

REPO = Path(__file__).resolve().parents[1]
SPECS = sorted((REPO / "specs").glob("*.toml"))

# ---------------------------------------------------------------------------------------------- grammar


@pytest.mark.parametrize("rule, arch, expected", [
    ("gfx942", "gfx942", True), ("gfx942", "gfx950", False), ("gfx950", "gfx950", True),
    ("gfx942", "gfx942:sramecc+:xnack-", True), ("rocm", "gfx942", True), ("rocm", "gfx950", True),
    ("rocm", "sm_90", False), ("rocm", "cpu", False), ("cuda", "sm_80", True), ("cuda", "gfx942", False),
    (">=sm_80", "gfx942", False), ("<sm_100", "gfx950", False), ("sm_80..sm_100", "gfx942", False),
    ("cpu", "gfx942", False), ("gfx942", "sm_90", False), ("gfx942", "cpu", False), ("GFX950", "gfx950", True),
])
def test_amd_rules(rule, arch, expected):
    assert parse_rule(rule).matches(arch) is expected


def test_mixed_rule_lists():
    rules = [parse_rule(r) for r in ("cpu", ">=sm_80", "rocm")]
    assert [any(r.matches(a) for r in rules) for a in ("cpu", "sm_75", "sm_90", "gfx942", "gfx950")] == \
        [True, False, True, True, True]
    only_mi300 = [parse_rule(r) for r in (">=sm_90", "gfx942")]
    assert [any(r.matches(a) for r in only_mi300) for a in ("sm_90", "gfx942", "gfx950")] == [True, True, False]


def test_arch_names():
    assert parse_arch("gfx942:sramecc+:xnack-").name == "gfx942" and parse_arch("gfx90a").vendor == "amd"
    assert parse_arch("sm_90a").vendor == "nvidia" and parse_arch("gfx950").base == "gfx950"
    assert parse_targets(["gfx942,sm_90", "gfx950"]) == ("gfx942", "sm_90", "gfx950")
    for bad in ("gfx", "mi300", "gfx94", "rocm"):
        with pytest.raises(ArchError, match="not an architecture"):
            parse_arch(bad)


@pytest.mark.parametrize("rule, expected", [
    (">=gfx942", "AMD targets have no order"), ("gfx942..gfx950", "AMD targets have no order"),
    ("rocm7", "bad architecture rule 'rocm7'"), ("mi300", "bad architecture rule 'mi300'"),
    ("gfx942:xnack-", "bad architecture rule"),
])
def test_bad_amd_rules(rule, expected):
    with pytest.raises(ArchError, match=expected) as err:
        parse_rule(rule)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("new, expected", [
    ('arch = ["cpu", ">=sm_80", "rocm6"]', "backends.triton.arch[2]: bad architecture rule 'rocm6'"),
    ('arch = ["cpu", ">gfx942"]', "backends.triton.arch[1]: bad architecture rule '>gfx942': AMD targets"),
])
def test_bad_arch_in_spec_is_one_line(tmp_path, capsys, new, expected):
    code, err, path = _validate(tmp_path, capsys, VALID.replace('arch = ["cpu", ">=sm_80"]', new, 1))
    assert code == 2 and len(err) == 1 and err[0].startswith(f"{path}: ") and expected in err[0], err


# ---------------------------------------------------------------------------------------------- waivers


@pytest.mark.parametrize("waive", ['"matrix.gfx950" = "no MI350 runner yet"',
                                   'matrix.gfx950 = "no MI350 runner yet"'])
def test_matrix_waiver_forms(tmp_path, waive):
    path = tmp_path / "scale.toml"
    path.write_text(VALID + f"\n[waive]\n{waive}\n")
    spec = load_spec(path)
    assert spec.waivers == {"matrix.gfx950": "no MI350 runner yet"}
    assert matrix_waiver(spec.waivers, "gfx950") == "no MI350 runner yet"
    assert matrix_waiver(spec.waivers, "gfx942") is None and matrix_waiver({"matrix.rocm": "r"}, "gfx942") == "r"


@pytest.mark.parametrize("waive, expected", [
    ('"matrix.mi300" = "x"', "waive.matrix.mi300: not a matrix target: 'mi300'"),
    ('"matrix.gfx942" = ""', "waive.matrix.gfx942: expected the reason as a non-empty string"),
    ('"matrx.gfx942" = "x"', "waive.matrx.gfx942: not a waivable check"),
])
def test_bad_matrix_waiver_is_one_line(tmp_path, capsys, waive, expected):
    code, err, path = _validate(tmp_path, capsys, VALID + f"\n[waive]\n{waive}\n")
    assert code == 2 and len(err) == 1 and expected in err[0], err


# ---------------------------------------------------------------------------------------------- resolution


def test_detect_reads_a_rocm_build_of_torch(monkeypatch):
    props = types.SimpleNamespace(name="AMD Instinct MI300X", gcnArchName="gfx942:sramecc+:xnack-", major=9,
                                  minor=4, multi_processor_count=304, total_memory=192 << 30, L2_cache_size=4 << 20)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.version, "hip", "6.4.0", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    dev = device_mod.detect.__wrapped__()
    assert (dev.arch, dev.vendor, dev.torch_device, dev.capability) == ("gfx942", "amd", "cuda:0", None)
    assert dev.properties["gcn_arch_name"] == "gfx942:sramecc+:xnack-"


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_specs_resolve_on_pretend_rocm_devices(path, arch):
    spec = load_spec(path)
    dev = fake_device(f"{arch}:sramecc+:xnack-")
    assert (dev.arch, dev.vendor, dev.fake) == (arch, "amd", True)
    statuses = {s.backend: s for s in resolve(spec, dev)}
    for name, b in spec.backends.items():
        s = statuses[name]
        if b.source or "nvcc" in b.tools:
            assert not s.runnable and s.reason == f"CUDA C++ backend (nvcc): not applicable on AMD ({arch})"
        elif b.arch and not any(parse_rule(r).matches(arch) for r in b.arch):
            assert not s.runnable and "AMD GPUs need gfx942, gfx950 or rocm" in s.reason
        elif not s.runnable:  # only a missing module or tool may stop a backend whose rules allow AMD
            assert s.reason.startswith(("module", "tool")), s.reason
    ran = next(s for s in statuses.values() if s.selected)
    line = describe(list(statuses.values()))
    assert line.startswith(f"{spec.name} on {arch}: runs {ran.backend}")
    if "triton" in spec.backends and "rocm" in spec.backends["triton"].arch:
        assert ran.backend == "triton", line


def test_rmsnorm_cuda_backend_says_why_on_amd():
    spec = load_spec(REPO / "specs" / "rmsnorm.toml")
    line = describe(resolve(spec, fake_device("gfx950")))
    assert "cuda (CUDA C++ backend (nvcc): not applicable on AMD (gfx950))" in line, line
    nvidia = {s.backend: s for s in resolve(spec, fake_device("sm_90"))}
    assert "not applicable on AMD" not in nvidia["cuda"].reason


def test_resolve_command_on_pretend_amd(capsys):
    assert main(["resolve", "--arch", "gfx942", "--kernel", "softmax", "--specs-dir", str(REPO / "specs")]) == 0
    out = capsys.readouterr().out
    assert "gfx942" in out and "triton" in out, out


# ---------------------------------------------------------------------------------------------- compile


def meta(*shape):
    return torch.empty(*shape, dtype=torch.float32, device="meta")


@pytest.fixture(scope="module")
def transposes():
    big = aot.record_launches(amd_kernels.transpose, dict(x=meta(256, 512), out=meta(512, 256)))
    small = aot.record_launches(amd_kernels.small_transpose, dict(x=meta(256, 512), out=meta(512, 256)))
    archs = ("sm_80", "sm_90", "gfx942", "gfx950")
    return {"big": aot.compile_all(big, archs), "small": aot.compile_all(small, archs)}


def test_lds_overflow_on_gfx942_only(transposes):
    by = {r.arch: r for r in transposes["big"]}
    for arch in ("gfx942", "gfx950"):
        r = by[arch].resources
        assert by[arch].ok and isinstance(r, amd.AmdResources), by[arch].error
        assert r.vgprs > 0 and r.sgprs > 0 and (r.vgpr_spills, r.sgpr_spills, r.scratch_bytes) == (0, 0, 0)
        assert r.lds_bytes == by[arch].dynamic_shared_bytes > amd.AMD_LIMITS["gfx942"].lds_bytes
    (problem,) = aot.check(by["gfx942"])
    assert "transpose_kernel" in problem and "gfx942" in problem and "LDS" in problem and "limit 65536 B" in problem
    assert by["gfx942"].resources.occupancy == 0
    for arch in ("gfx950", "sm_80", "sm_90"):
        assert aot.check(by[arch]) == [], (arch, aot.check(by[arch]))


def test_small_tile_is_clean_everywhere_and_amd_figures_are_read(transposes):
    for res in transposes["small"]:
        assert res.ok and aot.check(res) == [], (res.arch, res.error)
    amd_rows = [r for r in aot.table_rows(transposes["small"]) if r.arch.startswith("gfx")]
    assert len(amd_rows) == 2
    for row in amd_rows:
        assert row.registers > 0 and row.sgprs > 0 and row.occupancy > 0
        assert (row.vgpr_spills, row.sgpr_spills, row.stack_bytes) == (0, 0, 0)
        assert row.config.endswith("w8 s2 [fp32]")  # HIP's default stages: the launch gave none
    text = aot.render_table(aot.table_rows(transposes["small"]))
    assert "occ" in text.splitlines()[0] and "gfx950" in text


def test_compile_error_on_one_vendor_carries_that_vendors_message():
    recs = aot.record_launches(amd_kernels.tf32_matmul, dict(a=meta(32, 32), b=meta(32, 32), c=meta(32, 32)))
    by = {r.arch: r for r in aot.compile_all(recs, ("sm_80", "gfx942", "gfx950"))}
    assert by["sm_80"].ok and by["gfx942"].ok, (by["sm_80"].error, by["gfx942"].error)
    bad = by["gfx950"]
    assert not bad.ok and "\n" not in bad.error
    assert "input_precision" in bad.error and "tf32" in bad.error, bad.error  # HIP's reason, not the call site
    (problem,) = aot.check(bad)
    assert "gfx950: compile error" in problem and "tf32_matmul_kernel" in problem


def test_amd_metadata_parser_ignores_argument_entries():
    listing = """\
amdhsa.kernels:
  - .agpr_count:     4
    .args:
      - .name:           x_ptr
        .offset:         0
    .group_segment_fixed_size: 512
    .name:           k
    .private_segment_fixed_size: 16
    .sgpr_count:     20
    .sgpr_spill_count: 0
    .vgpr_count:     40
    .vgpr_spill_count: 3
amdhsa.target:   amdgcn-amd-amdhsa--gfx942
\t.amdhsa_kernel k
; Occupancy: 8
"""
    r, err = amd.parse_resources(listing, "k", dynamic_lds=1024, num_warps=4, arch="gfx942")
    assert err == "" and (r.vgprs, r.agprs, r.sgprs, r.vgpr_spills, r.scratch_bytes) == (40, 4, 20, 3, 16)
    assert r.lds_bytes == 1536 and r.occupancy_registers == 8 and r.occupancy == 8
    problems = amd.resource_problems(r, "gfx942", allow_spills=False)
    assert problems == ["spills 3 VGPRs / 0 SGPRs", "scratch 16 B per lane"]
    assert amd.resource_problems(r, "gfx942", allow_spills=True) == []


# ---------------------------------------------------------------------------------------------- matrix

SPEC = """
[kernel]
name = "{name}"
reference = "tests.planted.amd_kernels:transpose_ref"
dtypes = ["fp32"]
layouts = ["padded"]

[backends.triton]
impl = "tests.planted.amd_kernels:{name}"
arch = ["cpu", ">=sm_80", "rocm"]
requires = ["triton"]

[inputs.x]
shape = ["rows", "cols"]

[outputs.out]
shape = ["cols", "rows"]

[cases.edge]
base = {{ rows = 256, cols = 512 }}
vary = {{ rows = [0, 1, 83, 128] }}
{extra}
"""


def _matrix(tmp_path, capsys, name, extra="", archs="gfx942,gfx950,sm_90", *more):
    (tmp_path / f"{name}.toml").write_text(SPEC.format(name=name, extra=extra))
    code = main(["matrix", "--specs-dir", str(tmp_path), "--arch", archs, "--out", str(tmp_path / "m.json"), *more])
    return code, capsys.readouterr().out


def test_matrix_fails_on_gfx942_naming_it(tmp_path, capsys):
    code, out = _matrix(tmp_path, capsys, "transpose")
    problems = [ln for ln in out.splitlines() if ln.startswith("PROBLEM:")]
    assert code == 1 and problems, out
    assert all("gfx942" in p and "LDS" in p for p in problems), problems
    doc = json.loads((tmp_path / "m.json").read_text())
    status = {e["arch"]: e["status"] for e in doc["entries"]}
    assert status == {"gfx942": "failed", "gfx950": "ok", "sm_90": "ok"}, status


def test_matrix_waiver_turns_the_failure_into_a_listed_waiver(tmp_path, capsys):
    waiver = '[waive]\n"matrix.gfx942" = "MI300 runs the small tile"'
    code, out = _matrix(tmp_path, capsys, "transpose", waiver)  # a waived target is not compiled...
    assert code == 0, out
    assert "WAIVED: transpose triton on gfx942: MI300 runs the small tile (not compiled" in out
    assert "0 problem(s), 1 waived" in out
    entry = {e["arch"]: e for e in json.loads((tmp_path / "m.json").read_text())["entries"]}["gfx942"]
    assert (entry["status"], entry["configs"], entry["summary"]) == ("waived", 0, "not compiled"), entry
    code, out = _matrix(tmp_path, capsys, "transpose", waiver, "gfx942,gfx950,sm_90", "--compile-waived")
    assert code == 0, out  # ...unless asked: then its problems are listed under the waiver
    assert "WAIVED: transpose triton on gfx942: MI300 runs the small tile (" in out and "LDS" in out
    assert "0 problem(s), 1 waived" in out


def test_cuda_cpp_backend_is_not_applicable_on_amd(tmp_path, capsys):
    cuda = ('[backends.cuda]\nimpl = "tests.planted.amd_kernels:transpose"\narch = [">=sm_80"]\n'
            'tools = ["nvcc"]\nsource = "tests.planted.aot_kernels:CUDA_SRC"\n')
    code, out = _matrix(tmp_path, capsys, "small_transpose", cuda, archs="gfx942")
    assert code == 0, out
    assert "NOT APPLICABLE: small_transpose cuda on gfx942: CUDA C++ (nvcc) backend: not applicable on AMD" in out
    doc = json.loads((tmp_path / "m.json").read_text())
    rows = [ArchRow("small_transpose", "gfx942", "triton", "ran", "")]  # as if a ROCm runner made the results
    (tmp_path / "matrix.json").write_text(json.dumps(doc))
    table = static_matrix(tmp_path, rows, str, lambda t: f"`{t}`")
    assert table["header"] == ["kernel", "`gfx942`"]
    (cell,) = table["rows"][0][1:]
    assert "`cuda` not applicable" in cell and "`triton` (1 configs) compiled:" in cell
    assert "VGPRs" in cell and "LDS" in cell and "run here: ran `triton`" in cell


@pytest.mark.slow
def test_real_specs_compile_for_amd():
    # A fresh process, as `nox -s matrix` runs it (see tests/test_matrix.py for why).
    proc = subprocess.run([sys.executable, "-m", "harness", "matrix", "--kernel", "softmax", "--arch",
                           "gfx942,gfx950"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "softmax:" in proc.stdout and " gfx942 " in proc.stdout and " gfx950 " in proc.stdout
    assert "0 problem(s)" in proc.stdout


def test_report_shows_the_matrix_next_to_the_results(tmp_path):
    from harness.report.render import render_report
    from tests.e2e import synthetic_results

    results = synthetic_results()
    kernel = results.arch_matrix[0].kernel
    entries = [{"kernel": kernel, "backend": "triton", "arch": a, "status": s, "configs": 2, "summary": "S",
                "problems": p, "reason": r} for a, s, p, r in (
        ("sm_90", "ok", [], ""), ("gfx942", "failed", ["LDS over the limit"], ""),
        ("gfx950", "waived", ["spills 2 VGPRs"], "no MI350 tuning yet"))]
    (tmp_path / "matrix.json").write_text(json.dumps({"schema": 1, "archs": ["sm_90", "gfx942", "gfx950"],
                                                      "entries": entries}))
    text = render_report(results, tmp_path).read_text()
    assert "Compiled for every target" in text and "| `gfx942` | `gfx950` |" in text
    assert "**failed**: LDS over the limit" in text and "waived (no MI350 tuning yet)" in text
    (tmp_path / "matrix.json").write_text('{"schema": 7}')
    assert "not a matrix.json of schema 1" in render_report(results, tmp_path).read_text()
    (tmp_path / "matrix.json").unlink()
    assert "Compiled for every target" not in render_report(results, tmp_path).read_text()


def test_an_llvm_error_printed_only_on_stderr_is_a_compile_error():
    """AMDGPU's LLVM reports an inline-asm constraint it has no register class for ('h', PTX's 16-bit) as a
    diagnostic on fd 2 and still emits code; the matrix used to list such a compile as ok."""
    import torch

    recs = aot.record_launches(amd_kernels.ptx_halves, dict(x=torch.empty(64, dtype=torch.int16, device="meta"),
                                                            out=torch.empty(64, dtype=torch.int16, device="meta")))
    by = {r.arch: r for r in aot.compile_all(recs, ("sm_90", "gfx942"))}
    assert by["sm_90"].ok, by["sm_90"].error
    bad = by["gfx942"]
    assert not bad.ok and bad.error.startswith("LLVM: ") and "constraint 'h'" in bad.error, bad.error
    (problem,) = aot.check(bad)
    assert "gfx942: compile error: LLVM: " in problem
    assert aot.llvm_errors("x.ll:3:5: error: bad thing\nwarning: meh\nerror: bad thing\n") == ["bad thing"]
