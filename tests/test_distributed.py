"""``[distributed]`` specs: the world sizes in the spec language, the generated items run on every rank of a group
of processes (gloo on this CPU) against the planted kernels of tests/planted/distributed_kernels.py, and bench's
slowest-rank timing. Each failure costs a fresh group (a torch import per rank), so the planted spec has one
world size and the end-to-end run one case per kernel."""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.spec.load import load as load_spec
from tests.e2e import REPO, outcomes, spec_variant
from tests.planted.distributed_kernels import RAISE_MESSAGE

PLANTED = REPO / "tests" / "specs" / "planted_distributed.toml"
CASE = "n=1000,world=2"
HANG_LIMIT_S = 2  # the planted spec's timeout


def test_each_case_runs_at_every_world_size():
    spec = load_spec(REPO / "specs" / "all_reduce.toml")
    assert spec.distributed.world_sizes == (2, 4)
    for tier in ("edge", "ci", "bench"):
        ids = [c.id for c in spec.cases[tier]]
        assert ids and all(re.search(r"\bworld=[24]\b", i) for i in ids), ids
        assert sum("world=2" in i for i in ids) == sum("world=4" in i for i in ids)


@pytest.mark.parametrize("old, new, expected", [
    ("world_sizes = [2, 4]", "world_sizes = [1]", "distributed.world_sizes[0]: expected a number of ranks from 2 "
                                                  "to 1024, got 1"),
    ("world_sizes = [2, 4]", "world_sizes = 2", "distributed.world_sizes: expected a list, got 2"),
    ("world_sizes = [2, 4]", "world_sizes = []", "distributed.world_sizes: expected at least one world size"),
    ("world_sizes = [2, 4]", "world_sizes = [2, 2]", "distributed.world_sizes[1]: 2 is listed twice"),
    ("tokens = 16\n", "tokens = 16\nworld = 2\n", "cases.ci[0].world: is [distributed].world_sizes' to set"),
], ids=["one-rank", "not-a-list", "empty", "twice", "world-in-a-case"])
def test_a_bad_distributed_table_gives_one_line(tmp_path, capsys, old, new, expected):
    path = spec_variant(tmp_path, "all_reduce", old, new)
    code = main(["validate", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"{path}: ") and expected in err[0], err[0]


def _marked(marker: str) -> dict[int, str]:
    """pid -> command line of the processes whose environment carries ``marker``: this one and every process it
    started since, but multiprocessing's resource tracker (one per process that ever spawned, by design)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # gone, or not ours to read
            continue
    return {pid: cmd for pid, cmd in found.items() if pid != os.getpid() and "resource_tracker" not in cmd}


# backend -> what its item's summary line says
FAILURES = {
    "skips_own_on_rank1": "wrong on rank 1 of 2: rank 1: out: ",
    "raises_on_rank1": f"rank 1 raised: RuntimeError: {RAISE_MESSAGE}; rank 0 had not finished",
    "exits_on_rank1": "rank 1 crashed (exit code 3)",
    "hangs_on_rank1": f"timed out after {HANG_LIMIT_S} s: rank 1 did not answer (in hangs_on_rank1, ",
}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds leftover ranks through /proc")
def test_each_planted_rank_failure_fails_its_item_and_the_next_item_runs(pytester, monkeypatch):
    marker = f"KH_DISTRIBUTED_TEST={uuid.uuid4().hex}"
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the spec names tests.planted.* kernels
    monkeypatch.setenv("COLUMNS", "400")  # the short summary keeps each failure's first line whole
    monkeypatch.setenv(*marker.split("="))
    specs = pytester.path / "specs"
    specs.mkdir()
    (specs / PLANTED.name).write_text(PLANTED.read_text())
    # fallback order: the four failing kernels, then the correct one, each failure tearing its group down
    picked = [f"specs/{PLANTED.name}::planted_distributed[{b}-fp32-{CASE}]" for b in [*FAILURES, "correct"]]
    # in this process (no second torch import): the ranks are processes all the same
    result = pytester.runpytest_inprocess("--specs", "specs", "-p", "no:cacheprovider", "-rf", *picked)
    out = result.stdout.str()
    assert outcomes(result) == {"failed": len(FAILURES), "passed": 1}, out[-4000:]
    for backend, says in FAILURES.items():
        line = re.search(rf"^FAILED .*planted_distributed\[{backend}-.*$", out, re.M)
        assert line and says in line.group(0), (backend, says, line and line.group(0))
        assert (f"[planted_distributed backend={backend} dtype=fp32 case=edge:{CASE} seed=" in out
                and "(rank r: seed + r * 1000003)" in out)  # the case's context: every rank's inputs
        assert f"reproduce: python -m pytest 'specs/{PLANTED.name}::planted_distributed[{backend}-fp32-{CASE}]'" in out
    assert "rank 0 waited for it in torch.distributed" in out  # the hang's bystander, told apart from it
    assert re.search(r"rank 0: in all_gather, .*distributed_c10d\.py:\d+", out)
    assert _marked(marker) == {}  # no rank outlived its group, nor the run


def test_bench_times_the_slowest_rank_and_checks_before_timing():
    from harness.bench.distributed import run_distributed_jobs
    from harness.bench.plan import Job
    from harness.spec.bind import bind
    from harness.target.device import detect
    from harness.target.providers import providers_for
    from harness.target.resolve import resolve
    from harness.timing.engine import TimingConfig

    spec, device = bind(load_spec(PLANTED)), detect()
    case = next(c for c in spec.cases["edge"] if c.id == CASE)
    providers = {p.name: p for p in providers_for(spec, device, resolve(spec, device))}
    assert not providers["torch.compile"].runnable  # a collective: nothing for it to compile
    names = ["correct", "skips_own_on_rank1", "reference"]  # one group: a crash's isolation is the items' test
    jobs = [Job(spec, case, "fp32", providers[n]) for n in names]
    timing = TimingConfig(min_time_s=0.05, timeout_s=10.0)
    results = dict(run_distributed_jobs(jobs, device, timing))
    by = {names[i]: r for i, r in results.items()}
    for name in ("correct", "reference"):
        r = by[name]
        assert r.status == "ok" and r.method == "slowest-rank-host-timer", r.reason
        assert len(r.samples_us) >= timing.min_samples and r.stats["median"] > 0
    assert by["skips_own_on_rank1"].status == "wrong"
    assert by["skips_own_on_rank1"].reason.startswith("failed the correctness check before timing: rank 1: out: ")


def test_a_collective_is_judged_against_the_bus_bandwidth_measured_on_its_ranks(tmp_path, capsys):
    """all_reduce's bus bytes against the all-reduce bus bandwidth of the same two gloo ranks: measured once for
    the world size, said on stderr, carried in the case's row, then cached (no group needed to read it back)."""
    from harness.bench.distributed import run_distributed_jobs
    from harness.bench.plan import Job
    from harness.distributed.ceiling import SIZES, bus_ceiling, bus_factor
    from harness.spec.bind import bind
    from harness.target.device import detect
    from harness.target.providers import providers_for
    from harness.target.resolve import resolve
    from harness.timing.engine import TimingConfig

    spec, device = bind(load_spec(REPO / "specs" / "all_reduce.toml")), detect()
    case = next(c for c in spec.cases["ci"] if c.values["world"] == 2)
    one_shot = next(p for p in providers_for(spec, device, resolve(spec, device)) if p.name == "one_shot")
    [(_, r)] = run_distributed_jobs([Job(spec, case, "fp32", one_shot)], device,
                                    TimingConfig(min_time_s=0.05, timeout_s=10.0), cache_dir=tmp_path)
    assert r.status == "ok", r.reason
    said = [ln for ln in capsys.readouterr().err.splitlines() if "bus bandwidth" in ln]
    assert len(said) == 1 and "over 2 gloo ranks" in said[0] and "(cached)" not in said[0], said

    class NoGroup:  # the cache must answer: running anything here fails the test
        device, world = "cpu", 2

        def run(self, *a, **k):
            raise AssertionError("measured again instead of reading the cache")

    cached = bus_ceiling(NoGroup(), cache_dir=tmp_path)
    assert cached.cached and cached.world == 2 and cached.at_bytes in SIZES["cpu"]
    assert [b for b, _, _ in cached.per_size] == list(SIZES["cpu"])
    assert all(g == pytest.approx(bus_factor(2) * b / t / 1e9) for b, t, g in cached.per_size)
    assert cached.busbw_gbps == max(g for _, _, g in cached.per_size) > 0
    bus_bytes = bus_factor(2) * case.values["tokens"] * case.values["hidden"] * 4
    assert r.bound == "bus" and r.ceiling_gbps == pytest.approx(cached.busbw_gbps)
    assert r.bytes == pytest.approx(bus_bytes)
    assert r.pct_roofline == pytest.approx(100 * bus_bytes / (r.stats["median"] * 1e-6) / 1e9 / cached.busbw_gbps)
    assert r.verdict == "n/a"  # gloo on a host is not judged by a GPU link's target
    from harness.results.load import case_from_json
    from harness.results.model import to_json

    assert case_from_json(to_json(r)).bound == "bus"  # the run's journal reads it back


def test_the_gate_lists_a_distributed_kernel_as_not_compared_rather_than_running_it_in_one_process():
    from harness.gate.ab import plan_pairs

    spec = load_spec(REPO / "specs" / "all_reduce.toml")
    plan = plan_pairs({"all_reduce": spec}, {"all_reduce": spec}, ())
    assert plan.pairs == ()
    assert [u for u in plan.unmatched if u.startswith("all_reduce: a [distributed] kernel")], plan.unmatched
    # a pull request cannot escape the comparison by declaring a plain kernel distributed: the base decides
    plain = dataclasses.replace(spec, distributed=None)
    assert plan_pairs({"all_reduce": spec}, {"all_reduce": plain}, ()).pairs
