"""harness.aot.releases and release_report: the per-kernel diff between Triton releases, and what the matrix
reads for it (code size from the ELF binary, NVIDIA occupancy)."""

from __future__ import annotations

import json
import struct

import pytest

from harness.aot import elf, occupancy, release_report, releases
from harness.steps import BadInput


def _row(kernel="k:kern", arch="sm_90", config="BLOCK=64 w4 s3", registers=32, spilled=0, shared=0, occ=64,
         code=512, status="ok"):
    return {"kernel": kernel, "arch": arch, "config": config, "registers": registers, "spill_store_bytes": spilled,
            "spill_load_bytes": 0, "stack_bytes": 0, "shared_bytes": shared, "compile_s": 0.1, "status": status,
            "sgprs": None, "agprs": None, "vgpr_spills": None, "sgpr_spills": None, "occupancy": occ,
            "code_bytes": code}


def _amd(**kw):
    row = _row(arch="gfx942", **kw)
    return {**row, "spill_store_bytes": None, "spill_load_bytes": None, "sgprs": 20, "agprs": 0,
            "vgpr_spills": kw.get("spilled", 0), "sgpr_spills": 0}


def _run(version, *rows, entries=()):
    archs = tuple(dict.fromkeys(r["arch"] for r in rows)) or ("sm_90",)
    return releases.ReleaseRun(f"triton {version}", {"triton": version, "torch": "2.13.0"}, archs, tuple(entries),
                               tuple(rows))


FAILED = "compile error: CompilationError: at 3:10: module 'triton.language' has no attribute 'unsqueeze'"


def test_a_compile_failure_under_either_release_names_both():
    older = _run("3.6.0", _row(status=FAILED, registers=None, occ=None, code=None))
    newer = _run("3.9.0", _row())
    (f,) = releases.diff([newer, older]).findings  # given newest first: compared oldest first all the same
    assert f.kind == "compile" and f.older == "triton 3.6.0" and f.newer == "triton 3.9.0"
    assert "compiles with triton 3.9.0, fails with triton 3.6.0" in f.message and "unsqueeze" in f.message
    (f,) = releases.diff([_run("3.6.0", _row()), _run("3.9.0", _row(status=FAILED))]).findings
    assert "compiles with triton 3.6.0, fails with triton 3.9.0" in f.message


def test_new_spill_more_spills_and_lost_occupancy_are_flagged_and_register_growth_is_not():
    runs = [_run("3.5.1", _row(), _amd(occ=8)), _run("3.6.0", _row(spilled=64, registers=255, occ=32), _amd(occ=8)),
            _run("3.9.0", _row(spilled=128, registers=255, occ=32), _amd(occ=7, registers=40))]
    found = [(f.kind, f.arch, f.older, f.newer) for f in releases.diff(runs).findings]
    assert found == [("spill", "sm_90", "triton 3.5.1", "triton 3.6.0"), ("occupancy", "sm_90", "triton 3.5.1",
                     "triton 3.6.0"), ("spill", "sm_90", "triton 3.6.0", "triton 3.9.0"),
                     ("occupancy", "gfx942", "triton 3.6.0", "triton 3.9.0")]
    messages = [f.message for f in releases.diff(runs).findings]
    assert "new spill: 0 B with triton 3.5.1, 64 B with triton 3.6.0" in messages[0]
    assert "more spills: 64 B with triton 3.6.0, 128 B with triton 3.9.0" in messages[2]
    assert "lost occupancy: 8 waves/SIMD with triton 3.6.0, 7 waves/SIMD with triton 3.9.0" in messages[3]
    assert releases.diff([_run("3.6.0", _row()), _run("3.9.0", _row(registers=40, code=900))]).findings == ()


def test_a_new_problem_of_the_checks_is_flagged():
    over = _row(status="shared memory 240000 B > sm_90 limit 232448 B", shared=240000)
    (f,) = releases.diff([_run("3.6.0", _row()), _run("3.9.0", over)]).findings
    assert f.kind == "problem" and "ok with triton 3.6.0, with triton 3.9.0: shared memory" in f.message


def test_cells_take_the_worst_figures_and_say_what_was_not_compiled():
    rows = [_row(config="a", registers=30, shared=100, occ=64, code=100),
            _row(config="b", registers=60, shared=50, occ=32, code=200), _row(config="c", status=FAILED)]
    waived = {"kernel": "k", "backend": "triton", "arch": "gfx950", "status": "waived", "configs": 0,
              "summary": "", "problems": [], "reason": "why"}
    d = releases.diff([releases.ReleaseRun("triton 3.9.0", {"triton": "3.9.0"}, ("sm_90", "gfx950"), (waived,),
                                           tuple(rows))])
    by = {k.arch: k.cells[0] for k in d.kernels}
    assert by["sm_90"] == releases.Cell("compiled", 3, 1, 60, 0, 100, 32, 300)
    assert by["gfx950"].state == "waived"


def test_configs_in_one_release_only_are_noted_not_compared():
    d = releases.diff([_run("3.6.0", _row(config="a")), _run("3.9.0", _row(config="a"), _row(config="b",
                                                                                                  status=FAILED))])
    assert d.findings == () and d.kernels[0].unmatched == ("1 config(s) only under triton 3.9.0",)


def test_releases_sort_by_version_not_by_text():
    assert [r.label for r in releases.ordered([_run("3.10.0"), _run("3.9.0"), _run("3.5.1")])] == [
        "triton 3.5.1", "triton 3.9.0", "triton 3.10.0"]


def test_the_page_flags_and_shows_each_series_oldest_first():
    runs = [_run("3.6.0", _row(status=FAILED, registers=None, occ=None, code=None), _row(config="x", code=1000)),
            _run("3.9.0", _row(), _row(config="x", code=1100, registers=40))]
    d = releases.diff(runs)
    page = release_report.render(d, releases.ordered(runs), "python -m harness matrix --triton 3.6,3.9")
    assert "## Flagged: 1" in page and "compiles with triton 3.9.0, fails with triton 3.6.0" in page
    row = next(ln for ln in page.splitlines() if ln.startswith("| **k** | sm_90"))
    assert "| 1/2 → 2 |" in row and "| 32 → 40 |" in row and "1000 → 1612 (+61%)" in row, row
    grouped = release_report.render(releases.diff([
        _run("3.6.0", _row(config="a", status=FAILED), _row(config="b", status=FAILED)),
        _run("3.9.0", _row(config="a"), _row(config="b"))]), [], "cmd")
    (line,) = [ln for ln in grouped.splitlines() if ln.startswith("| k | sm_90 | compile |")]
    assert "| triton 3.6.0 → triton 3.9.0 | 2 | kern [a]: compiles with triton 3.9.0, fails with triton 3.6.0" in line
    assert grouped.count("\n- k sm_90 kern [") == 2 and "<details><summary>" in grouped
    clean = release_report.render(releases.diff([_run("3.6.0", _row()), _run("3.9.0", _row())]), [], "cmd")
    assert "## Flagged: 0" in clean and "| k | sm_90 | 1 | 32 | 0 | 0 | 64 | 512 |" in clean
    doc = release_report.document(d, runs, "cmd", {"triton 3.6.0": "triton-3.6.0/matrix.json"})
    assert json.loads(json.dumps(doc))["findings"][0]["kind"] == "compile"
    assert doc["runs"][0]["matrix"] == "triton-3.6.0/matrix.json" and "rows" not in doc["runs"][0]


def test_load_run_refuses_a_document_without_its_toolchain_or_rows(tmp_path):
    path = tmp_path / "matrix.json"
    good = {"schema": 1, "archs": ["sm_90"], "entries": [], "rows": [_row()],
            "toolchain": {"triton": "3.6.0", "torch": "2.13.0"}}
    path.write_text(json.dumps(good))
    assert releases.load_run(path).label == "triton 3.6.0"
    for broken, key in [({**good, "toolchain": {}}, "toolchain.triton"), ({**good, "rows": {}}, "rows"),
                        ({**good, "rows": [{"kernel": "k"}]}, r"rows\[0\]"), ({**good, "schema": 2}, "schema")]:
        path.write_text(json.dumps(broken))
        with pytest.raises(BadInput, match=rf"^{path}: {key}"):
            releases.load_run(path)
    path.write_text("{")
    with pytest.raises(BadInput, match="not readable"):
        releases.load_run(path)


# ---------------------------------------------------------------------------------------------- what is read


def _elf(sections: list[tuple[int, int]]) -> bytes:
    """An ELF64 little-endian object whose section headers have these (flags, size)."""
    header = bytearray(64)
    struct.pack_into("<16xHHIQQQIHHHHHH", header, 0, 1, 190, 1, 0, 0, 64, 0, 64, 0, 0, 64, len(sections), 0)
    header[:6] = b"\x7fELF\x02\x01"
    table = b"".join(struct.pack("<IIQQQQIIQQ", 0, 1, flags, 0, 0, size, 0, 0, 1, 0) for flags, size in sections)
    return bytes(header) + table


def test_code_bytes_sums_the_executable_sections_only():
    assert elf.code_bytes(_elf([(0x6, 512), (0x2, 4000), (0x6, 128), (0x0, 99)])) == 640
    assert elf.code_bytes(b"not an elf") is None and elf.code_bytes(None) is None
    assert elf.code_bytes(_elf([(0x6, 512)])[:70]) is None  # truncated: the table is not there


def test_nvidia_occupancy_follows_the_occupancy_calculator():
    assert occupancy.warps_per_sm(32, 0, 4, "sm_90") == 64          # warps-bound: 16 blocks of 4
    assert occupancy.warps_per_sm(128, 0, 8, "sm_90") == 16         # 4096 registers a warp: 4 per scheduler
    assert occupancy.warps_per_sm(255, 0, 4, "sm_80") == 8
    assert occupancy.warps_per_sm(36, 0, 4, "sm_90") == 48          # 1152 registers a warp, allocated as 1280
    assert occupancy.warps_per_sm(32, 100 * 1024, 4, "sm_80") == 4  # one block's shared memory fits 164 KiB
    assert occupancy.warps_per_sm(32, 100 * 1024, 4, "sm_90") == 8  # two fit 228 KiB
    assert occupancy.warps_per_sm(255, 0, 32, "sm_90") == 0         # 255 x 1024 threads overflow the file
    assert occupancy.warps_per_sm(32, 0, 4, "gfx942") is None
