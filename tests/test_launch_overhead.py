"""Launch overhead beside device time (issue 29, item 6): the engine's host and synchronous wall figures, their
record in results.json and report.md, the gate's host-time verdict row, and the CUDA-graph replay method.

The CPU parts run here; the GPU parts (a spin-backed host sample, a graph replay) are skipped without CUDA.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
import torch

from harness.gate import ab
from harness.gate.calibration import HOST_FLOOR_US, HOST_MIN_EFFECT, host_threshold, noise_doc
from harness.gate.model import CaseComparison, Threshold
from harness.gate.verdict import decide, exit_code
from harness.report.launch import LAUNCH_BOUND_RATIO, launch_bound, launch_line
from harness.results.load import results_from_json
from harness.results.model import SCHEMA_VERSION, to_json
from harness.timing.engine import TimingConfig, measure
from harness.timing.launch import CPU_WALL_NA, measure_launch
from harness.timing.sampler import HostSampler, host_calls
from tests.e2e import case, results

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: spin kernel, events, graphs")
QUICK = TimingConfig(min_samples=5, max_samples=20, min_time_s=0.0, timeout_s=1.0)


def busy(us: float):
    """A launcher's added host work: a Python busy-loop of ``us`` microseconds."""
    def spin():
        t = time.perf_counter()
        while time.perf_counter() - t < us * 1e-6:
            pass
    return spin


def test_host_calls_bounds():
    assert host_calls(1e-9, "gpu") == 64 and host_calls(1e6, "gpu") == 4  # never enough to fill the launch queue
    assert host_calls(10.0, "cpu") == 200 and host_calls(1e6, "cpu") == 1


def test_cpu_measure_records_host_time_and_marks_wall_not_applicable():
    x = torch.randn(256)
    m = measure(lambda: x.mul(2.0), device="cpu", config=QUICK)
    assert m.launch is not None and len(m.launch.host_us) >= 3 and m.launch.host_median_us > 0
    assert m.launch.wall_us == () and m.launch.wall_median_us is None  # never a copied or made-up figure
    assert m.launch.params["wall_method"] == CPU_WALL_NA and m.launch.params["host_calls"] >= 1
    assert measure(lambda: None, device="cpu", config=dataclasses.replace(QUICK, launch=False)).launch is None


def test_host_time_sees_added_python_work():
    plain = measure_launch(lambda: None, HostSampler())
    slowed = measure_launch(busy(40.0), HostSampler())
    assert slowed.host_median_us >= 40.0 > 10 * plain.host_median_us


def test_graph_method_is_selectable_and_needs_cuda():
    assert TimingConfig(method="graph").method == "graph"
    with pytest.raises(ValueError, match="needs a CUDA device"):
        measure(lambda: None, device="cpu", config=TimingConfig(method="graph"))


@CUDA
def test_gpu_host_time_hides_behind_a_spin_and_sees_a_sync():
    x = torch.randn(1 << 16, device="cuda")
    plain = measure(lambda: x.mul(2.0), device="cuda", config=QUICK)
    synced = measure(lambda: x.mul(2.0).sum().item(), device="cuda", config=QUICK)
    assert plain.launch.wall_median_us is not None and plain.launch.params["host_late_kept"] == 0
    assert synced.launch.host_median_us > 2 * plain.launch.host_median_us  # .item() waits for the GPU


@CUDA
def test_graph_replay_times_the_captured_call():
    x = torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(x)
    m = measure(lambda: torch.mul(x, 2.0, out=out), device="cuda", config=dataclasses.replace(QUICK, method="graph"))
    assert m.method == "cuda-graph-replay-events-minus-overhead" and min(m.samples_us) > 0
    assert torch.equal(out, x * 2.0)


def test_results_keep_the_launch_fields_and_the_schema_version():
    c = dataclasses.replace(case(median=10.0), host_us=(30.0, 31.0, 29.0), host_median_us=30.0,
                            wall_us=(55.0, 56.0), wall_median_us=55.5, launch={"host_calls": 32})
    doc = to_json(results([c]))
    assert SCHEMA_VERSION >= 5 and results_from_json(doc).cases[0] == c
    old = {**doc, "schema_version": 4, "cases": [{k: v for k, v in d.items() if k not in (
        "host_us", "host_median_us", "wall_us", "wall_median_us", "launch")} for d in doc["cases"]]}
    assert results_from_json(old).cases[0].host_median_us is None  # an older file loads, its launch fields empty
    with pytest.raises(ValueError, match="added in 5"):  # and cannot smuggle schema-5 keys in
        results_from_json({**doc, "schema_version": 4})


def test_launch_bound_rule_and_report_line():
    quick = dataclasses.replace(case(median=100.0), wall_median_us=150.0, host_median_us=20.0)
    bound = dataclasses.replace(case(median=10.0, case_id="n=2"), shape={"n": 2}, wall_median_us=35.0,
                                host_median_us=23.0)
    assert not launch_bound(quick) and launch_bound(bound) and LAUNCH_BOUND_RATIO == 2.0
    line = launch_line([quick, bound])
    assert line.startswith("Launch overhead dominates") and "n=2" in line and "3.5" in line and "n=1" not in line
    cpu = dataclasses.replace(case(), host_median_us=12.0)
    assert "no synchronous wall time on a CPU" in launch_line([cpu]) and launch_line([case()]) == ""


def test_report_shows_host_and_wall_columns(tmp_path):
    from harness.report.render import render_report

    c = dataclasses.replace(case(median=10.0), host_us=(23.0,), host_median_us=23.0, wall_us=(35.6,),
                            wall_median_us=35.6, launch={"host_calls": 32})
    path = tmp_path / "results.json"
    path.write_text(json.dumps(to_json(results([c]))))
    text = render_report(path, tmp_path / "out").read_text()
    assert "host µs / call" in text and "sync wall µs" in text and "35.6" in text
    assert "Launch overhead dominates" in text and "Host µs per call (1 cases)" in text


def test_host_threshold_default_and_calibrated(tmp_path):
    assert host_threshold(tmp_path / "none.json") == Threshold(HOST_MIN_EFFECT, HOST_FLOOR_US, host_threshold(
        tmp_path / "none.json").source) and "not calibrated" in host_threshold(tmp_path / "none.json").source
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"host_in_process": {"min_effect": 0.2, "floor_us": 0.5}}))
    t = host_threshold(cal)
    assert (t.relative, t.floor_us) == (0.2, HOST_FLOOR_US) and t.source.startswith("calibrated host-time")


def _task_dict(device_blocks, host_blocks):
    """A case's task dict as abcase returns it: device time SAME, host time from ``host_blocks``."""
    rule = Threshold(0.03, 0.0, "test")
    dev = decide(device_blocks[0], device_blocks[1], rule, paired=True)
    host_rule = host_threshold()
    h = decide(host_blocks[0], host_blocks[1], host_rule, paired=True)
    common = dict(ratio_lo=h.lo, ratio_hi=h.hi, effect=h.effect, base_spread=None, pr_spread=None, blocks=h.blocks,
                  stop="decided", wall_s=0.1, base_blocks_us=host_blocks[0], pr_blocks_us=host_blocks[1])
    host = dict(verdict=h.verdict, reason="", base_median_us=h.base_median_us, pr_median_us=h.pr_median_us,
                ratio=h.ratio, threshold=dataclasses.asdict(host_rule), method="host", **common)
    return dict(kernel="tiny", dtype="bf16", case_id="rows=64,cols=256", shape={"rows": 64}, headline=True,
                verdict=dev.verdict, reason="", base_provider="fast", pr_provider="fast",
                base_median_us=dev.base_median_us, pr_median_us=dev.pr_median_us, ratio=dev.ratio, ratio_lo=dev.lo,
                ratio_hi=dev.hi, effect=dev.effect, threshold=dataclasses.asdict(rule), noise=None, base_spread=None,
                pr_spread=None, blocks=dev.blocks, stop="decided", dropped=0, gpu_index=0, gpu_uuid=None, wall_s=0.2,
                base_blocks_us=device_blocks[0], pr_blocks_us=device_blocks[1], host=host)


def test_a_slower_launcher_fails_where_device_time_is_same(tmp_path):
    same = [[10.0, 10.01, 9.99]] * 8
    d = _task_dict((same, same), ([[20.0, 20.2, 19.9]] * 8, [[70.0, 70.5, 69.8]] * 8))  # 50 us of added Python
    device_row, host_row = CaseComparison(**{k: v for k, v in d.items() if k != "host"} | {
        "threshold": Threshold(**d["threshold"]), "base_pct_roofline": None, "pr_pct_roofline": None}), \
        ab.host_record(d)
    assert device_row.verdict == "SAME" and host_row.verdict == "SLOWER" and host_row.metric == "host"
    assert exit_code([device_row.verdict]) == 0 and exit_code([device_row.verdict, host_row.verdict]) == 1
    assert noise_doc([device_row, host_row], "k", "s")["cases"] == noise_doc([device_row], "k", "s")["cases"]
    from harness.report.compare import _table
    table = _table([device_row, host_row], False)
    timed, verdict = table["header"].index("timed"), table["header"].index("verdict")
    rows = table["rows"]
    assert [r[timed] for r in rows] == ["device", "host µs/call"] and "**SLOWER**" in rows[1][verdict]
    assert ab.host_record({k: v for k, v in d.items() if k != "host"}) is None
