"""The report and the pytest-benchmark export, from SYNTHETIC results (see tests.e2e.synthetic_results).

Nothing here needs a GPU or the timing engine, and nothing is written outside tmp_path.
"""

from __future__ import annotations

import json
import platform
import re
import socket
import subprocess
import sys
from dataclasses import replace
from functools import partial

import pytest

from harness.report.render import interval, num, render_report
from harness.results.io import write_results
from harness.results.pbexport import to_pytest_benchmark, write_pytest_benchmark
from harness.timing.environment import collect_environment
from tests.e2e import REPO, synthetic_results


@pytest.fixture(scope="module")
def results():
    return synthetic_results()


@pytest.fixture
def no_plots(monkeypatch):
    """For tests about the text only: drawing costs seconds on a small CPU."""
    from harness.report import render
    from harness.report.plots import Plots

    monkeypatch.setattr(render, "render_plots", lambda results, out: Plots(notes=("plots off in this test",)))


@pytest.fixture(scope="module")
def rendered(results, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    write_results(results, out)
    path = render_report(results, out)
    return path, path.read_text(encoding="utf-8")


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start: end if end > 0 else None]


def test_report_written_with_its_pictures(rendered):
    path, text = rendered
    assert path.name == "report.md"
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert "roofline.png" in links
    assert {f"dist_{k}.png" for k in ("rmsnorm", "rope", "silu_and_mul")} <= set(links)
    # a kernel's own roofline where it has three shapes or more (rope has two)
    assert {"roofline_rmsnorm.png", "roofline_silu_and_mul.png"} <= set(links)
    assert "roofline_rope.png" not in links
    for link in links:
        assert not link.startswith(("/", "http")), link  # relative, so the folder can move
        target = path.parent / link
        assert target.is_file() and target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_title_and_how_measured_come_from_the_results(rendered):
    _, text = rendered
    assert text.startswith("# Kernel benchmarks: synthetic-device (test fixture) · `sm_90` · 2026-11-29\n")
    how = text[text.index("**How measured.**"):].split("\n", 1)[0]
    assert "`cuda-events`" in how and "read of 2x L2 (120 MiB)" in how
    dropped = sum(len(c.dropped_us) for c in synthetic_results().cases)
    assert f"{dropped} throttled samples dropped" in how


def test_summary_table(results, rendered):
    _, text = rendered
    summary = _section(text, "Summary")
    lines = [line for line in summary.splitlines() if line.startswith("|")]
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    assert header[:6] == ["kernel", "headline shape", "dtype", "candidate", "median µs", "% roofline"]
    assert header[6:8] == ["vs eager", "vs torch.compile"] and "vs liger" in header
    assert header[-2:] == ["fastest", "verdict"]
    rows = lines[2:]
    assert len(rows) == sum(1 for c in results.cases if c.headline and c.role == "candidate")
    cand = next(c for c in results.cases if c.kernel == "rmsnorm" and c.headline and c.role == "candidate")
    s = cand.speedups["reference"]
    assert interval(s["ratio"], s["lo"], s["hi"], unit="x") in rows[0]
    assert re.search(r"\d\.\d\dx\xa0\[\d\.\d\d,\xa0\d\.\d\d\]", rows[0])
    rope = [r for r in rows if r.startswith("| rope")]
    assert rope and all("— (wrong)" in r for r in rope)  # the wrong peer gets no speedup
    assert any("**model\xa0error**" in r for r in rows)


def test_wrong_provider_never_fastest(results, tmp_path, no_plots):
    # make the wrong peer look fastest by its (stale) samples: it must still not be named fastest
    cases = tuple(replace(c, stats={**c.stats, "median": 0.001}, samples_us=(0.001,) * 3) if c.status == "ok"
                  and c.provider == "reference" and c.kernel == "rope" else c for c in results.cases)
    cases = tuple(replace(c, status="wrong", reason="synthetic: mismatch") if c.provider == "reference"
                  and c.kernel == "rope" else c for c in cases)
    text = render_report(replace(results, cases=cases), tmp_path).read_text()
    rope_rows = [r for r in _section(text, "Summary").splitlines() if r.startswith("| rope")]
    assert rope_rows and all("`reference`" not in r.split("|")[-3] for r in rope_rows)
    assert "— (wrong)" in rope_rows[0].split("|")[7]
    section = _section(text, "Kernels")
    rope = section[section.index("### rope"):]
    assert "**wrong**: `reference`" in rope and "synthetic: mismatch" in rope


def test_sections_present(rendered):
    _, text = rendered
    for title in ("Summary", "Measured ceilings and roofline", "Architecture matrix",
                  "Waivers and what was not measured", "Kernels", "Environment"):
        assert f"\n## {title}\n" in text
    ceilings = _section(text, "Measured ceilings and roofline")
    assert "| copy, GB/s (read + write) | 4,000 | 4,800 | 83.3% |" in ceilings
    arch = _section(text, "Architecture matrix")
    assert "fell back to `reference` because triton needs >=sm\\_80" in arch
    waivers = _section(text, "Waivers and what was not measured")
    assert "synthetic: fp32 accumulation" in waivers
    assert "**error**: silu_and_mul `torch.compile`" in waivers and "RuntimeError: \\|" in waivers
    assert "<details><summary>Provenance" in _section(text, "Environment")
    assert "| `clocks.sm_mhz` | 1980 |" in text


def test_kernel_section_statistics(results, rendered):
    _, text = rendered
    section = _section(text, "Kernels")
    rms = section[section.index("### rmsnorm"):section.index("### rope")]
    assert "#### tokens=16384 hidden=4096 · bf16 (headline)" in rms
    for column in ("n", "median µs [95% CI]", "p5 to p95 µs", "IQR µs", "CV", "outliers lo / hi",
                   "warm median µs", "GB/s", "TFLOP/s", "% roofline", "stopped because"):
        assert f"| {column} |" in rms
    assert "<details><summary>2 more shapes of rmsnorm</summary>" in rms
    cand = next(c for c in results.cases if c.kernel == "rmsnorm" and c.headline and c.role == "candidate")
    assert f"| **`triton`** | {cand.stats['n']} | {num(cand.stats['median'])}\xa0[" in rms


def test_tables_are_well_formed(rendered):
    _, text = rendered
    tables: dict[str, list[list[str]]] = {}  # "## " section -> its tables, each a list of "|" lines
    section, block = "", []
    for line in text.splitlines() + [""]:
        if line.startswith("## "):
            section = line[3:]
        if line.startswith("|"):
            block.append(line)
            continue
        if block:
            tables.setdefault(section, []).append(block)
            block = []
    # The synthetic run fills every section that holds a table: none may be missing (a report without tables
    # would otherwise pass a check of each table), and each is a header, its separator and at least one row.
    assert set(tables) == {"Summary", "Measured ceilings and roofline", "Architecture matrix",
                           "Waivers and what was not measured", "Kernels", "Environment"}
    assert len(tables["Kernels"]) >= 3  # at least one per kernel (rmsnorm, rope, silu_and_mul)
    for block in (b for blocks in tables.values() for b in blocks):
        assert len(block) >= 3, block
        widths = {len(re.split(r"(?<!\\)\|", row)) for row in block}
        assert len(widths) == 1, block[:3]
        assert re.fullmatch(r"\|(:?-+:?\|)+", block[1]), block[:2]


def test_partial_results_are_flagged(tmp_path, no_plots):
    text = render_report(synthetic_results(complete=False), tmp_path).read_text()
    assert "Partial results: the run did not complete" in text


def test_report_without_matplotlib(results, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    text = render_report(results, tmp_path).read_text()
    assert "Plots skipped: matplotlib is not available" in text
    assert "![" not in text and not list(tmp_path.glob("*.png"))
    assert "\n## Summary\n" in text


def test_render_from_a_results_file(results, tmp_path, no_plots):
    json_path, _ = write_results(results, tmp_path)
    assert render_report(json_path, tmp_path / "r", results_name="run.json").read_text().rstrip().endswith(
        "full precision and raw samples are in that file.")


def test_number_formatting():
    assert num(3468.9) == "3,469" and num(63.52) == "63.52" and num(2.5) == "2.500" and num(None) == "—"
    assert num(0.0001234) == "0.0001234" and num(252) == "252"
    assert interval(3.2101, 3.18, 3.25, unit="x") == "3.21x\xa0[3.18,\xa03.25]"
    assert interval(13.0, 12.7, 13.02, unit="x") == "13.00x\xa0[12.70,\xa013.02]"  # not merged by rounding


# ----------------------------------------------------------------------------- pytest-benchmark export

def test_pbexport_format(results):
    from pytest_benchmark.stats import Stats

    doc = to_pytest_benchmark(results)
    assert set(doc) == {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    ok = [c for c in results.cases if c.status == "ok"]
    assert len(doc["benchmarks"]) == len(ok)
    bench = doc["benchmarks"][0]
    assert {"group", "name", "fullname", "params", "stats", "options", "extra_info"} <= set(bench)
    assert set(bench["stats"]) == set(Stats.fields) | {"data", "iterations"}
    assert bench["stats"]["median"] == pytest.approx(ok[0].stats["median"] * 1e-6, rel=1e-12)  # seconds
    assert bench["stats"]["rounds"] == len(ok[0].samples_us)
    assert bench["extra_info"]["verdict"] == ok[0].verdict
    json.dumps(doc, allow_nan=False)


def test_pbexport_carries_the_run_provenance(results):
    """machine_info and commit_info hold what collect_environment recorded, read by its own key names."""
    env = collect_environment(device="cpu")
    env["git_dirty"] = True  # whatever the checkout says now: the export must carry the recorded value
    doc = to_pytest_benchmark(replace(results, environment=env))
    machine, commit = doc["machine_info"], doc["commit_info"]
    assert machine["node"] == socket.gethostname() and machine["python_version"] == platform.python_version()
    assert machine["system"] == platform.platform() and machine["machine"] == env["device"]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert commit["id"] == (head.stdout.strip() if head.returncode == 0 else "unknown")
    assert commit["dirty"] is True and doc["datetime"] == env["date"]
    clean = to_pytest_benchmark(replace(results, environment={**env, "git_dirty": False}))["commit_info"]
    assert clean["dirty"] is False
    synthetic = to_pytest_benchmark(results)
    assert synthetic["commit_info"]["id"] == "0" * 40 and synthetic["machine_info"]["node"] == "synthetic-host"
    assert synthetic["datetime"] == "2026-11-29T08:00:00+00:00"


def test_pbexport_loads_through_compare_machinery(results, tmp_path):
    from pytest_benchmark import plugin
    from pytest_benchmark.logger import Logger
    from pytest_benchmark.storage.file import FileStorage
    from pytest_benchmark.table import TableResults
    from pytest_benchmark.utils import NAME_FORMATTERS

    path = write_pytest_benchmark(results, tmp_path / "0001_harness.json")
    warnings: list[str] = []
    logger = Logger(Logger.QUIET)
    logger.warning = lambda text, **kw: warnings.append(text)  # the loader only warns on a bad file
    benches = list(FileStorage(tmp_path, logger=logger).load_benchmarks(str(path)))
    assert not warnings
    assert len(benches) == sum(1 for c in results.cases if c.status == "ok")
    groups = plugin.pytest_benchmark_group_stats(config=None, benchmarks=benches, group_by="group")
    lines: list[str] = []

    class Reporter:
        def write(self, text, **_):
            lines.append(text)

        def write_line(self, text, **_):
            lines.append(text + "\n")

        def ensure_newline(self):
            pass

        def rewrite(self, text, **_):
            pass

    table = TableResults(columns=["min", "median", "iqr", "outliers", "rounds"], sort="min", histogram=False,
                         name_format=NAME_FORMATTERS["normal"], logger=logger,
                         scale_unit=partial(plugin.pytest_benchmark_scale_unit, config=None))
    table.display(Reporter(), groups, progress_reporter=lambda items, *a, **k: ((None, i) for i in items))
    shown = "".join(lines)
    assert "rmsnorm[triton-bf16-tokens=16384,hidden=4096]" in shown
    assert "rope[liger" not in shown  # wrong runs are not exported


def test_pbexport_cli_compare(results, tmp_path):
    path = write_pytest_benchmark(results, tmp_path / "run.json")
    proc = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(path), "--group-by=group",
                           "--columns=min,median,rounds"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Failed to load" not in proc.stdout + proc.stderr
    assert "silu_and_mul[triton-bf16-tokens=8192,d=14336]" in proc.stdout


def test_every_shape_table_says_where_the_candidate_wins_and_loses():
    """SYNTHETIC: rmsnorm's candidate made slower than liger at one shape (beyond the interval), faster at the
    other: the per-kernel table lists both shapes and the line names the shape where it loses."""
    import dataclasses

    from harness.report.shapes import shapes_table
    from tests.e2e import synthetic_results

    cases = [c for c in synthetic_results().cases if c.kernel == "rmsnorm" and c.dtype == "bf16"]
    candidates = [c for c in cases if c.role == "candidate" and c.status == "ok"]
    assert len({c.case_id for c in candidates}) == 2
    slow, fast = candidates[0], candidates[1]
    ratios = {slow.case_id: (0.8, 0.79, 0.81), fast.case_id: (1.5, 1.48, 1.52)}
    edited = [dataclasses.replace(c, speedups={**c.speedups, "liger": dict(zip(("ratio", "lo", "hi"),
                                                                               ratios[c.case_id], strict=True))})
              if c in (slow, fast) else c for c in cases]
    out = shapes_table(edited)
    assert out is not None and len(out["table"]["rows"]) == 2
    assert "vs liger" in out["table"]["header"] and "vs eager" in out["table"]["header"]
    line = next(w for w in out["wins"] if "`liger`" in w)
    assert line.startswith("against `liger`: faster at 1 of 2 shapes; slower at ")
    assert line.endswith(shape_label_of(slow))
    assert shapes_table([c for c in cases if c.case_id == slow.case_id]) is None  # one shape: no table


def shape_label_of(case) -> str:
    from harness.report.cells import cell
    from harness.report.plots import shape_label

    return cell(shape_label(case.shape))


def test_varying_names_what_changes_between_shapes():
    from harness.report.plots import varying

    shapes = [{"M": 1, "N": 4096, "K": 4096}, {"M": 16, "N": 4096, "K": 4096}, {"M": 1, "N": 14336, "K": 4096}]
    assert varying(shapes) == ["M", "N"]
    assert varying(shapes[:1]) == []


def test_a_kernel_below_target_carries_its_specs_gap(tmp_path, no_plots):
    """The spec's [roofline] gap is quoted under a kernel whose candidate fell short in this run, with a note
    when the spec changed after the run; a kernel that met its target gets no such line."""
    from harness.report.gaps import spec_gaps
    from tests.e2e import write_spec

    spec = write_spec(tmp_path, "scale", "tests.planted.broken_kernels:scale")
    text = spec.read_text()
    spec.write_text(text.replace("[roofline]\n", '[roofline]\ngap = """Latency-bound:\n too few loads in flight."""\n'))
    base = synthetic_results()
    kernel = base.cases[0].kernel
    cases = tuple(replace(c, kernel="scale", verdict="below-target") if c.kernel == kernel else c for c in base.cases)
    env = {**base.environment, "spec_sha256": {str(spec): "0" * 64}}
    results = replace(base, cases=cases, environment=env)
    gaps = spec_gaps(results)
    assert set(gaps) == {"scale"} and gaps["scale"].text == "Latency-bound: too few loads in flight."
    assert gaps["scale"].edited
    out = render_report(results, tmp_path / "out").read_text()
    section = out[out.index("\n### scale"):]
    assert "the spec says why** (`" in section and "edited since this run" in section
    met = replace(results, cases=tuple(replace(c, verdict="pass") if c.kernel == "scale" else c for c in cases))
    assert spec_gaps(met) == {}


def test_a_kernels_roofline_lines_follow_the_swept_symbol():
    from types import SimpleNamespace

    from harness.report.plots import _sweeps

    shapes = [{"M": m, "N": n, "K": 4096} for m, n in ((16, 4096), (1, 4096), (1, 14336), (4096, 4096), (4, 14336))]
    sweep, groups = _sweeps([SimpleNamespace(shape=s) for s in shapes])
    assert sweep == "M"
    assert {g: [c.shape["M"] for c in cs] for g, cs in groups.items()} == {
        (("N", 4096),): [1, 16, 4096], (("N", 14336),): [1, 4]}
