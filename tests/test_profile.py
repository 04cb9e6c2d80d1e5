"""Nsight Compute profiling without a GPU: the ncu command line, the raw-page parser, the diagnosis rules, the
report section and the CPU path.

Fixtures: tests/data/ncu_raw_handmade_format.csv is HAND-MADE (invented round numbers in ncu's raw-page
format, two launches); tests/data/ncu_h200/ncu_add_raw.csv is real ncu output from the H200, checked here
against the file's own cells, never against numbers typed into this test. ncu itself is replaced by a fake
script that records its command line and prints a fixture.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.profile import ncu
from harness.profile.diagnose import BYTES_TOLERANCE, RULES, diagnose_case, diagnose_launch
from harness.profile.metrics import METRICS, NOT_STALLS
from harness.profile.parse import ParseError, launches, raw_rows
from harness.profile.runner import Target, build_record, failed_record, headline_case, profile_kernel
from harness.report.profile import insert_profile, profile_markdown, profile_section
from harness.results.model import ResultsError
from harness.results.profile import (
    PROFILE_SCHEMA_VERSION,
    Launch,
    ProfileFile,
    Stall,
    load_profile,
    write_profile,
)
from tests.e2e import REPO

DATA = REPO / "tests" / "data"
HANDMADE = DATA / "ncu_raw_handmade_format.csv"
H200_RAW = DATA / "ncu_h200" / "ncu_add_raw.csv"


@pytest.fixture(scope="module")
def rope():
    from harness.spec.load import load

    spec = load(REPO / "specs" / "rope.toml")
    return Target(spec, str(REPO / "specs" / "rope.toml"), headline_case(spec), "bf16", "triton")


# ----------------------------------------------------------------------------- the command line

def _clock_flags(argv):
    return [a for a in argv if str(a).startswith("--clock-control")]


@pytest.mark.parametrize("metrics", [True, False])
@pytest.mark.parametrize("extra", [(), ("--replay-mode", "application"), ("--launch-count", "3")])
def test_every_profiling_argv_keeps_the_clocks(metrics, extra):
    target = ncu.target_argv("specs/rope.toml", "tokens=1", "bf16", "triton", 0)
    argv = ncu.profile_argv("/x/ncu", "/tmp/r.ncu-rep", target, metrics=metrics, extra=extra)
    assert _clock_flags(argv) == ["--clock-control"]
    at = argv.index("--clock-control")
    assert argv[at + 1] == "none" and at < argv.index(target[0])  # an ncu option, not the target's
    assert ncu.has_clock_control(argv)
    assert argv[-len(target):] == target


@pytest.mark.parametrize("extra", [("--clock-control", "base"), ("--clock-control=base",), ("--clock-control",)])
def test_no_option_can_change_the_clocks(extra):
    with pytest.raises(ValueError, match="clock"):
        ncu.profile_argv("/x/ncu", "/tmp/r", ["python"], extra=extra)


@pytest.mark.parametrize("argv", [
    ["/nonexistent/ncu", "--export", "r", "python"],                                   # omitted
    ["/nonexistent/ncu", "--clock-control", "base", "python"],                         # another setting
    ["/nonexistent/ncu", "--clock-control", "none", "--clock-control", "base", "python"],  # overridden later
])
def test_run_refuses_a_profiling_argv_without_clock_control_none(argv):
    with pytest.raises(ValueError, match="clock-control none"):
        ncu.run(argv, timeout=5)


# ----------------------------------------------------------------------------- the parser

def test_handmade_fixture_parses_every_field():
    first, second = launches(HANDMADE.read_text())
    assert (first.name, second.name) == ("_rope_kernel", "tiny_fill_kernel")
    assert first.duration_us == 120.0 and second.duration_us == 2.5            # ns -> µs, "120,000"
    assert first.dram_read_bytes == 100_000_000 and second.dram_write_bytes is None  # "n/a"
    assert first.dram_pct == 60.0 and first.sm_pct == 20.0 and first.memory_pct == 70.0
    assert first.achieved_occupancy_pct == 22.0 and first.theoretical_occupancy_pct == 25.0
    assert first.occupancy_limiter == "registers"                               # 2 blocks, the fewest
    assert second.occupancy_limiter == "registers and warps"                    # a tie names both
    assert first.registers_per_thread == 128 and first.shared_mem_per_block == 1536  # static + dynamic
    assert (first.block_size, first.grid_size, first.waves_per_sm) == (256, 4096, 15.52)
    assert first.l1_hit_pct == 10.0 and second.l1_hit_pct is None and first.l2_hit_pct == 40.0
    assert first.tensor_pct == 3.0                                              # the busiest tensor pipe
    assert [s.reason for s in first.stalls] == ["long_scoreboard", "wait", "not_selected", "short_scoreboard"]
    assert abs(sum(s.share_pct for s in first.stalls) - 100) < 1e-9
    assert first.stalls[0].share_pct == pytest.approx(60.0)                     # 30 of 50


def test_real_h200_raw_page_matches_its_own_cells():
    rows = raw_rows(H200_RAW.read_text())
    (row,), (la,) = rows, launches(H200_RAW.read_text())

    def cell(name):
        return float(row[name][0].replace(",", ""))

    assert row["gpu__time_duration.sum"][1] == "ns"
    assert la.duration_us == pytest.approx(cell("gpu__time_duration.sum") / 1000)
    assert la.dram_read_bytes == cell("dram__bytes_read.sum")
    for m in METRICS:  # every field the table maps is read from the first name present
        if not m.field.startswith("_"):
            present = next(n for n in m.names if n in row)  # the H200's sections carry every one
            if m.kind == "pct":
                assert getattr(la, m.field) == cell(present), m.field
    assert la.shared_mem_per_block == cell("launch__shared_mem_per_block_static") + cell(
        "launch__shared_mem_per_block_dynamic")
    values = [s.value for s in la.stalls]
    assert values == sorted(values, reverse=True) and la.stalls and not NOT_STALLS & {s.reason for s in la.stalls}
    assert la.tensor_pct is not None


def _csv(header, units, *rows):
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    for r in (header, units, *rows):
        w.writerow(r)
    return buf.getvalue()


def test_units_are_scaled_and_unknown_ones_refused():
    head = ["ID", "Kernel Name", "gpu__time_duration.sum", "launch__shared_mem_per_block_static",
            "dram__bytes_read.sum"]
    (la,) = launches(_csv(head, ["", "", "usecond", "Kbyte/block", "Mbyte"], ["0", "k", "1.5", "2", "3"]))
    assert (la.duration_us, la.shared_mem_per_block, la.dram_read_bytes) == (1.5, 2000, 3e6)
    with pytest.raises(ParseError, match="unknown time unit 'fortnight'"):
        launches(_csv(head, ["", "", "fortnight", "", ""], ["0", "k", "1", "1", "1"]))


@pytest.mark.parametrize("text, message", [
    ("==PROF== nothing profiled\n", "no CSV header"),
    ('"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n"0","k"\n', "2 columns, the header has 3"),
    ('"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n"0","k","fast"\n', "not a number: 'fast'"),
])
def test_malformed_output_is_one_line(text, message):
    with pytest.raises(ParseError, match=message):
        launches(text)


# ----------------------------------------------------------------------------- the diagnosis

NEUTRAL = Launch(name="k", duration_us=100.0, dram_pct=40.0, sm_pct=50.0, memory_pct=50.0,
                 achieved_occupancy_pct=75.0, theoretical_occupancy_pct=100.0, occupancy_limiter="warps",
                 registers_per_thread=32, shared_mem_per_block=0, block_size=256, grid_size=4096, waves_per_sm=8.0,
                 l1_hit_pct=0.0, l2_hit_pct=30.0, dram_read_bytes=1e8, dram_write_bytes=1e8, tensor_pct=0.0,
                 stalls=(Stall("wait", 3.0, 60.0), Stall("long_scoreboard", 2.0, 40.0)), findings=())
LONG_SB = (Stall("long_scoreboard", 6.0, 60.0), Stall("wait", 4.0, 40.0))

# (launch overrides, case context, the rules that must fire: exactly these)
CASES = {
    "neutral": ({}, {}, set()),
    "launch-bound": ({"duration_us": 2.0, "dram_pct": 5.0, "sm_pct": 5.0}, {}, {"launch-bound"}),
    "long but idle is not launch-bound": ({"duration_us": 50.0, "dram_pct": 5.0, "sm_pct": 1.0}, {},
                                          {"memory-bound-below-ceiling"}),
    "at ceiling by DRAM %": ({"dram_pct": 85.0, "sm_pct": 10.0}, {}, {"memory-bound-at-ceiling"}),
    "at ceiling by the roofline target": ({"dram_pct": 70.0}, {"bound": "memory", "pct_roofline": 85.0,
                                                               "target": 0.8}, {"memory-bound-at-ceiling"}),
    "below ceiling": ({"dram_pct": 70.0}, {"bound": "memory", "pct_roofline": 60.0, "target": 0.8},
                      {"memory-bound-below-ceiling"}),
    "just below saturation": ({"dram_pct": 79.9, "sm_pct": 10.0}, {}, {"memory-bound-below-ceiling"}),
    "low achieved occupancy": ({"achieved_occupancy_pct": 20.0}, {}, {"low-occupancy"}),
    "low theoretical occupancy": ({"theoretical_occupancy_pct": 25.0, "occupancy_limiter": "registers"}, {},
                                  {"low-occupancy"}),
    "occupancy at the threshold": ({"achieved_occupancy_pct": 50.0}, {}, set()),
    "long scoreboard dominates": ({"stalls": LONG_SB}, {}, {"long-scoreboard-stalls"}),
    "at ceiling hides latency rules": ({"dram_pct": 90.0, "sm_pct": 10.0, "stalls": LONG_SB,
                                        "achieved_occupancy_pct": 20.0}, {}, {"memory-bound-at-ceiling"}),
    "compute-bound by SM %": ({"sm_pct": 85.0}, {}, {"compute-bound"}),
    "compute-bound by the model": ({}, {"bound": "compute"}, {"compute-bound"}),
    "compute model, DRAM busier": ({"dram_pct": 60.0}, {"bound": "compute"}, set()),
}


@pytest.mark.parametrize("name", list(CASES))
def test_launch_rules_fire_exactly_when_they_should(name):
    overrides, case, expected = CASES[name]
    la = diagnose_launch(dataclasses.replace(NEUTRAL, **overrides), **case)
    assert {f.rule for f in la.findings} == expected
    for f in la.findings:  # the report cites the rule: its text is the table's
        rule = next(r for r in RULES if r.name == f.rule)
        assert f.advice == rule.advice and f.evidence


def test_every_rule_has_a_case_that_fires_it():
    fired = set().union(*(e for _, _, e in CASES.values())) | {"bytes-vs-model"}
    assert fired == {r.name for r in RULES}


def test_low_occupancy_cites_the_limiter():
    la = diagnose_launch(dataclasses.replace(NEUTRAL, theoretical_occupancy_pct=25.0,
                                             occupancy_limiter="registers", registers_per_thread=168))
    assert "limited by registers (168 per thread)" in la.findings[0].evidence


def test_compute_bound_says_whether_tensor_cores_work():
    idle = diagnose_launch(dataclasses.replace(NEUTRAL, sm_pct=90.0, tensor_pct=0.0)).findings[0]
    busy = diagnose_launch(dataclasses.replace(NEUTRAL, sm_pct=90.0, tensor_pct=70.0)).findings[0]
    assert "(idle)" in idle.evidence and "(idle)" not in busy.evidence


@pytest.mark.parametrize("ratio, fires", [(1.0, False), (BYTES_TOLERANCE, False), (1 / BYTES_TOLERANCE, False),
                                          (BYTES_TOLERANCE * 1.01, True), (0.99 / BYTES_TOLERANCE, True),
                                          (None, False)])
def test_bytes_against_the_model(ratio, fires):
    assert bool(diagnose_case(ratio)) == fires


def test_record_flags_bytes_far_from_the_model(rope):
    (la,) = launches(H200_RAW.read_text())
    model = build_record(rope, (la,), None, "ncu ...").model_bytes
    assert model and model > 0
    for factor, flagged in ((1.0, False), (2.0, True), (0.5, True), (1.2, False)):
        half = model * factor / 2
        moved = dataclasses.replace(la, dram_read_bytes=half, dram_write_bytes=half)
        record = build_record(rope, (moved,), None, "ncu ...")
        assert record.bytes_ratio == pytest.approx(factor)
        assert ("bytes-vs-model" in {f.rule for f in record.findings}) == flagged, factor


# ----------------------------------------------------------------------------- profile.json and the report

def _doc(rope, *records) -> ProfileFile:
    return ProfileFile(PROFILE_SCHEMA_VERSION, {"device": "NVIDIA H200 (test)", "ncu_version": "fake"}, records)


def test_profile_json_round_trips_and_renders(rope, tmp_path):
    found = launches(HANDMADE.read_text())
    ok = build_record(rope, found, None, "ncu --clock-control none ...")
    denied = failed_record(dataclasses.replace(rope, provider="reference"), "not-profiled",
                           "the GPU's performance counters are not readable by this user (ERR_NVGPUCTRPERM)")
    path = write_profile(_doc(rope, ok, denied), tmp_path / "profile.json")
    doc = load_profile(path)
    assert doc.profiles[0] == ok and doc.profiles[1] == denied
    text = profile_markdown(doc)
    assert text.startswith("## Profile (Nsight Compute)")
    assert "One call: 2 launches" in text and "| metric | `_rope_kernel` | `tiny_fill_kernel` |" in text
    assert "| DRAM throughput, % of peak | 60.0% | 1.5% |" in text
    for f in (f for la in ok.launches for f in la.findings):
        assert f"**{f.rule}**" in text
    assert "Not profiled: the GPU's performance counters are not readable" in text
    assert "--clock-control none" in text


def test_broken_profile_json_is_one_line_in_the_report(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"schema_version": PROFILE_SCHEMA_VERSION, "environment": {}, "profiles": [
        {"kernel": "rope"}]}))
    with pytest.raises(ResultsError, match=r"profile.json: profiles\[0\]\.provider: required key is missing"):
        load_profile(path)
    assert "Not rendered:" in profile_section(path)
    assert profile_section(tmp_path / "absent.json") == ""


def test_report_includes_the_profile_beside_results(rope, tmp_path, monkeypatch):
    from harness.report import render
    from harness.report.plots import Plots
    from harness.results.io import write_results
    from tests.e2e import synthetic_results

    monkeypatch.setattr(render, "render_plots", lambda results, out: Plots(notes=("plots off in this test",)))
    results = synthetic_results()
    write_results(results, tmp_path)
    write_profile(_doc(rope, failed_record(rope, "error", "ncu exited 1: ==ERROR== boom")), tmp_path / "profile.json")
    text = render.render_report(tmp_path / "results.json", tmp_path).read_text()
    assert text.index("## Profile (Nsight Compute)") < text.index("## Environment")
    assert "**Profile failed:** ncu exited 1" in text
    assert "## Profile" not in insert_profile("# r\n\n## Environment\n", tmp_path / "none.json")


# ----------------------------------------------------------------------------- running ncu (a fake one)

FAKE_NCU = """#!{python}
import sys, pathlib
argv = sys.argv[1:]
pathlib.Path({log!r}).open("a").write(repr(argv) + "\\n")
if "--import" in argv:
    print(pathlib.Path({fixture!r}).read_text(), end="")
    sys.exit(0)
if {mode!r} == "denied":
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
    sys.exit(0)
if {mode!r} == "metric" and "--metrics" in argv:
    print("==ERROR== Failed to find metric sm__made_up_metric.sum")
    sys.exit(1)
pathlib.Path(argv[argv.index("--export") + 1]).write_text("report")
"""


def _fake_ncu(tmp_path: Path, mode: str = "ok") -> tuple[str, Path]:
    path, log = tmp_path / "ncu", tmp_path / "argv.log"
    path.write_text(FAKE_NCU.format(python=sys.executable, log=str(log), fixture=str(HANDMADE), mode=mode))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path), log


def test_profile_kernel_with_a_fake_ncu(rope, tmp_path):
    fake, log = _fake_ncu(tmp_path)
    record, _ = profile_kernel(fake, rope, tmp_path / "out", None)
    assert record.status == "ok" and len(record.launches) == 2
    assert record.duration_us == pytest.approx(122.5)  # the fixture's two launches, summed
    calls = [eval(line) for line in log.read_text().splitlines()]  # noqa: S307 (our own repr)
    profiling = [c for c in calls if "--import" not in c]
    assert profiling and all(ncu.has_clock_control([fake, *c]) for c in profiling)
    assert "--clock-control none" in record.command


def test_counters_not_readable_is_not_profiled(rope, tmp_path):
    fake, _ = _fake_ncu(tmp_path, mode="denied")
    record, log = profile_kernel(fake, rope, tmp_path / "out", None)
    assert record.status == "not-profiled" and "ERR_NVGPUCTRPERM" in record.reason
    assert "ERR_NVGPUCTRPERM" in log


def test_a_metric_this_chip_lacks_retries_with_the_sections_alone(rope, tmp_path):
    fake, log = _fake_ncu(tmp_path, mode="metric")
    record, _ = profile_kernel(fake, rope, tmp_path / "out", None)
    calls = [eval(line) for line in log.read_text().splitlines()]  # noqa: S307 (our own repr)
    assert record.status == "ok" and ["--metrics" in c for c in calls[:2]] == [True, False]
    assert "--metrics" not in record.command and "--clock-control none" in record.command


@pytest.mark.parametrize("rc, output, report, expected", [
    (0, "==PROF== Disconnected", True, None),
    (0, "==ERROR== LibraryNotLoaded: Failed to load libcupti", False, ("not-profiled", "LibraryNotLoaded")),
    (0, "==ERROR== Failed to profile kernel", True, ("error", "==ERROR== Failed to profile kernel")),
    (0, "==WARNING== No kernels were profiled.\n==PROF== Disconnected", False, ("error", "No kernels were")),
    (2, "rope.toml: no bench case 'x'\n==PROF== Disconnected", False, ("error", "no bench case 'x'")),
    (None, "", False, ("error", "timed out")),
])
def test_ncu_failures_are_classified(rc, output, report, expected):
    got = ncu.failure(ncu.Outcome(rc, output), report)
    if expected is None:
        assert got is None
    else:
        assert got[0] == expected[0] and expected[1] in got[1]


def test_cli_with_a_fake_ncu_writes_profile_json(tmp_path, monkeypatch):
    from harness.cli.main import main
    from harness.target import device
    from harness.timing import ceilings

    fake, _ = _fake_ncu(tmp_path)
    monkeypatch.setattr(device, "detect", lambda: device.fake_device("sm_90"))
    monkeypatch.setattr(ceilings, "measure_ceilings", lambda *a, **k: None)
    out = tmp_path / "out"
    assert main(["profile", "--kernel", "rope", "--ncu", fake, "--out", str(out)]) == 0
    doc = load_profile(out / "profile.json")
    assert [(p.kernel, p.provider, p.status) for p in doc.profiles] == [("rope", "triton", "ok")]
    assert doc.environment["clock_control"] == "none"
    assert (out / "profile.md").read_text().startswith("## Profile (Nsight Compute)")
    assert main(["profile", "--kernel", "rope", "--ncu", fake, "--out", str(out),
                 "--ncu-arg=--clock-control=base"]) == 2


def test_cpu_machine_without_ncu_says_so_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + "/usr/bin:/bin"
    if ncu.find_ncu() is not None:
        pytest.skip("this machine has ncu: the one-line answer is for machines without it")
    proc = subprocess.run([sys.executable, "-m", "harness", "profile", "--kernel", "rope", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ncu not found: ")
    assert "profiling needs NVIDIA Nsight Compute on a machine with an NVIDIA GPU" in lines[0]
    assert not (tmp_path / "profile.json").exists()
