"""``[[targets]]``: a bad entry is one line naming the file and key; report.md judges each target on the run's own
figures (met, not met with the spec's gap quoted, not measured with the reason), from SYNTHETIC results."""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace

import pytest

from harness.report.render import render_report
from harness.report.targets import MET, NOT_MEASURED, NOT_MET, judge_targets
from harness.results.model import SCHEMA_VERSION, Results
from harness.spec.load import load
from tests.results_docs import _case
from tests.test_spec_errors import VALID, _validate

SPEC = VALID.replace("[params]", '[peers.fast]\nimpl = "tests.planted.broken_kernels:scale"\n\n[params]') + """
[[cases.bench]]
rows = 4096
cols = 4096
headline = true

[[cases.bench]]
rows = 64
cols = 4096

[[targets]]
against = "fast"
speedup = 2.0
where = { rows = 4096, cols = 4096 }
reason = "twice the peer at the headline"

[[targets]]
against = "fast"
speedup = 3.0
where = [{ rows = 4096 }]
dtype = "bf16"
reason = "three times the peer"
gap = "the copy ceiling: measured at 2.5x"

[[targets]]
provider = "triton"
against = "reference"
speedup = 0.5
metric = "host"
where = { rows = 4096, cols = 4096 }
reason = "host time within 2x of eager"
"""


def test_targets_load(tmp_path, capsys):
    code, err, path = _validate(tmp_path, capsys, SPEC)
    assert code == 0 and err == []
    first, second, third = load(path).targets
    assert first.where == ((("rows", 4096), ("cols", 4096)),) and first.provider is None and first.metric == "device"
    assert second.gap == "the copy ceiling: measured at 2.5x" and second.dtype == "bf16"
    assert third.label() == "`triton` at most 2x slower than `reference` (host time per call)"
    assert first.label() == "the candidate at least 2x faster than `fast` (device time)"


# (replace this in SPEC, with that, a fragment of the single error line)
BAD = [
    ('against = "fast"\nspeedup = 2.0', 'against = "fats"\nspeedup = 2.0',
     'targets[0].against: no provider "fats" (did you mean \'fast\'?)'),
    ('provider = "triton"', 'provider = "torch.compile"\nmode = "fwd"', None),  # valid: a baseline judged too
    ('speedup = 2.0', 'speedup = 0', "targets[0].speedup: must be a positive number, got 0.0"),
    ('speedup = 2.0', 'speedup = "2x"', 'targets[0].speedup: expected a number, got "2x"'),
    ('where = { rows = 4096, cols = 4096 }\nreason = "twice',
     'where = { rows = 4097, cols = 4096 }\nreason = "twice', "targets[0].where: matches no bench case (rows = 4097"),
    ('where = [{ rows = 4096 }]', 'where = [{ rows = 4096 }, { rowz = 64 }]',
     "targets[1].where[1].rowz: no bench case sets \"rowz\" (did you mean 'rows'?)"),
    ('where = [{ rows = 4096 }]', 'where = []', "targets[1].where: expected a table of case values, or a non-empty"),
    ('metric = "host"', 'metric = "wall"', 'targets[2].metric: unknown metric "wall"'),
    ('metric = "host"', 'metric = "host"\nmode = "bwd"', 'targets[2].mode: "bwd" needs a [backward] table'),
    ('dtype = "bf16"', 'dtype = "fp8"', 'targets[1].dtype: "fp8" is not one of kernel.dtypes'),
    ('reason = "three times the peer"\n', '', "targets[1].reason: missing required key"),
    ('gap = "the copy ceiling: measured at 2.5x"', 'gap = "  "', "targets[1].gap: expected why the target is not met"),
    ('speedup = 2.0', 'speedup = 2.0\nspeed = 2', "targets[0].speed: unknown key (did you mean 'speedup'?)"),
    ('provider = "triton"\nagainst = "reference"', 'provider = "fast"\nagainst = "fast"',
     'targets[2].against: is the provider itself ("fast")'),
]


@pytest.mark.parametrize("old, new, fragment", BAD, ids=[f"b{i}" for i in range(len(BAD))])
def test_a_bad_target_is_one_line_naming_its_key(tmp_path, capsys, old, new, fragment):
    assert old in SPEC, old
    code, err, path = _validate(tmp_path, capsys, SPEC.replace(old, new, 1))
    if fragment is None:
        assert code == 0 and err == []
        return
    assert code == 2 and len(err) == 1 and err[0].startswith(f"{path}: ") and fragment in err[0], err


def test_targets_not_an_array_is_one_line(tmp_path, capsys):
    code, err, _ = _validate(tmp_path, capsys, VALID + '\n[targets]\nagainst = "x"\n')
    assert code == 2 and len(err) == 1 and "targets: expected an array of tables ([[targets]])" in err[0], err


def _results(tmp_path, fast_median: float, reference_status: str = "ok") -> Results:
    """SYNTHETIC: the candidate at 10 us (host 20), the peer fast at ``fast_median``, the reference at 40 us (host
    60) or failed."""
    path = tmp_path / "scale.toml"
    path.write_text(SPEC)
    mine = [10.0, 10.0, 10.0]
    cases = (
        _case("triton", "triton", "candidate", mine, host_median_us=20.0),
        _case("fast", "peer", "peer", [fast_median] * 3, host_median_us=15.0),
        _case("reference", "reference", "baseline", [] if reference_status != "ok" else [40.0] * 3,
              status=reference_status, reason="max abs err 0.5 > atol 1e-05" if reference_status != "ok" else "",
              host_median_us=60.0 if reference_status == "ok" else None),
    )
    env = {"device": "synthetic-device (test fixture)", "spec_sha256": {str(path): hashlib.sha256(
        path.read_bytes()).hexdigest()}}
    return Results(SCHEMA_VERSION, env, {}, cases, (), (), True)


def test_each_target_is_judged_on_the_runs_figures(tmp_path):
    rows, notes = judge_targets(_results(tmp_path, fast_median=25.0))
    assert [(r.status, r.ratio) for r in rows] == [(MET, 2.5), (NOT_MET, 2.5), (MET, 3.0)]
    assert rows[2].provider_us == 20.0 and rows[2].against_us == 60.0  # host time per call, not the medians
    assert [n.status for n in notes] == [MET, NOT_MET, MET] and notes[1].gap.startswith("the copy ceiling")


def test_the_boundary_is_met_and_just_below_is_not(tmp_path):
    rows, _ = judge_targets(_results(tmp_path, fast_median=20.0))
    assert rows[0].status == MET and rows[0].ratio == 2.0
    rows, _ = judge_targets(_results(tmp_path, fast_median=20.0 * (1 - 1e-9)))
    assert rows[0].status == NOT_MET and math.isclose(rows[0].ratio, 2.0)


def test_a_failed_side_is_not_measured_with_its_reason(tmp_path):
    rows, notes = judge_targets(_results(tmp_path, fast_median=25.0, reference_status="wrong"))
    assert rows[2].status == NOT_MEASURED and rows[2].ratio is None
    assert rows[2].reason.startswith("reference wrong: max abs err 0.5") and notes[2].status == NOT_MEASURED


def test_report_has_the_targets_section(tmp_path):
    text = render_report(_results(tmp_path, fast_median=25.0), tmp_path / "out").read_text()
    section = text.split("## Targets", 1)[1].split("## Kernels", 1)[0]
    assert ("| scale | the candidate at least 2x faster than `fast` (device time) | `rows=4096,cols=4096` | bf16 | "
            "2.50x faster |") in section
    assert "**not met**" in section and "Why not (" in section and "the copy ceiling: measured at 2.5x" in section
    assert "**scale**, the candidate at least 2x faster than `fast` (device time): met." in section


def test_a_run_of_specs_without_targets_has_no_section(tmp_path):
    results = _results(tmp_path, fast_median=25.0)
    (tmp_path / "scale.toml").write_text(VALID)
    assert "## Targets" not in render_report(results, tmp_path / "out").read_text()


def test_the_terminal_has_a_line_per_target_with_its_lowest_ratio(tmp_path):
    from harness.report.targets import target_lines

    at = "at rows=4096,cols=4096 bf16"
    assert target_lines(_results(tmp_path, fast_median=25.0)) == [
        f"target met: scale the candidate at least 2x faster than fast (device time) (2.50x faster {at})",
        f"target not met: scale the candidate at least 3x faster than fast (device time) (2.50x faster {at})",
        f"target met: scale triton at most 2x slower than reference (host time per call) (3.00x faster {at})"]


def test_targets_of_shapes_the_run_did_not_time_are_one_line(tmp_path):
    """A run of other shapes (a CPU's tier, a --kernel subset of cases): no table rows, no terminal lines."""
    from harness.report.targets import target_lines

    results = _results(tmp_path, fast_median=25.0)
    results = Results(results.schema_version, results.environment, {}, tuple(
        _case(c.provider, c.backend, c.role, list(c.samples_us), status=c.status, headline=False)
        for c in results.cases), (), (), True)
    assert target_lines(results) == []
    section = render_report(results, tmp_path / "out").read_text().split("## Targets", 1)[1].split("## Kernels")[0]
    assert "| scale |" not in section
    assert "Naming no case of this run: scale, the candidate at least 2x faster than `fast`" in section


def test_two_targets_alike_but_for_their_cases_are_kept_apart(tmp_path):
    """The same promise at a case the run timed and at one it did not: one row and line, one 'naming no case'."""
    from harness.report.targets import target_lines

    results = _results(tmp_path, fast_median=25.0)
    (tmp_path / "scale.toml").write_text(SPEC + '\n[[targets]]\nagainst = "fast"\nspeedup = 2.0\n'
                                                'where = { rows = 64, cols = 4096 }\nreason = "at 64 rows too"\n')
    lines = target_lines(results)
    assert len(lines) == 3 and lines[0].startswith("target met: scale the candidate at least 2x faster than fast")
    section = render_report(results, tmp_path / "out").read_text().split("## Targets", 1)[1].split("## Kernels")[0]
    assert section.count("| scale | the candidate at least 2x faster than `fast` (device time) |") == 1
    assert "Naming no case of this run: scale, the candidate at least 2x faster than `fast` (device time)." in section


def test_bench_targets_plans_only_what_the_targets_compare(tmp_path):
    """``bench --targets``: the named cases, dtypes and modes, and the two sides of each target; nothing else."""
    from harness.bench import workflow as wf
    from harness.steps import BadInput

    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "scale.toml").write_text(SPEC)
    loaded = wf.load(wf.BenchRun(wf.BenchOptions(specs_dir=str(specs), tier="bench", targets=True)))
    jobs = wf.plan(loaded).jobs
    assert {j.case.id for j in jobs} == {"rows=4096,cols=4096"}  # not the second bench case
    # on a CPU the reference is the candidate; target 0 names no dtype (all three), target 2 names triton
    assert {(j.provider.name, j.dtype) for j in jobs} == {
        (p, d) for p in ("reference", "fast") for d in ("fp32", "fp16", "bf16")} | {("triton", d) for d in (
            "fp32", "fp16", "bf16")}
    everything = wf.plan(replace(loaded, options=replace(loaded.options, targets=False))).jobs
    assert {j.provider.name for j in everything} > {j.provider.name for j in jobs}  # torch.compile, say
    (specs / "scale.toml").write_text(SPEC.split("[[targets]]")[0])
    with pytest.raises(BadInput, match="the specs' \\[\\[targets\\]\\]"):
        wf.plan(wf.load(wf.BenchRun(wf.BenchOptions(specs_dir=str(specs), tier="bench", targets=True))))


def test_a_target_names_its_dtype_alone(tmp_path):
    """Target 1 says bf16: an fp32 pair of the same case is judged by target 0 (every dtype), not by it."""
    results = _results(tmp_path, fast_median=25.0)
    fp32 = (_case("triton", "triton", "candidate", [10.0] * 3, dtype="fp32"),
            _case("fast", "peer", "peer", [40.0] * 3, dtype="fp32"))
    results = Results(results.schema_version, results.environment, {}, results.cases + fp32, (), (), True)
    rows, _ = judge_targets(results)
    assert [(r.index, r.dtype, r.ratio) for r in rows if r.index < 2] == [(0, "bf16", 2.5), (0, "fp32", 4.0),
                                                                          (1, "bf16", 2.5)]
