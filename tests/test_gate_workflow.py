"""The merge gate's commands are chains of small typed steps (harness.gate.workflow); each is tested here on
its own. Stored runs are SYNTHETIC (tests.e2e.case: seeded samples, device "synthetic-device"); the
end-to-end ``bench --against`` runs are tests/test_gate_ab.py."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace

import pytest

from harness.gate import workflow as wf
from harness.gate.ab import ABPlan
from harness.steps import BadInput
from tests.e2e import case, results, write


@pytest.fixture
def stored(tmp_path):
    base = write(tmp_path, "base", results([case("k", "n=0"), case("k", "n=1", seed=1)]))
    slow = write(tmp_path, "slow", results([case("k", "n=0", median=120.0, seed=2), case("k", "n=1", seed=3)]))
    return base, slow


def _options(stored, tmp_path, **kw):
    return wf.CompareOptions(base=stored[0], pr=stored[1], out=str(tmp_path / "out"), specs_dir=str(tmp_path), **kw)


def test_step_lists():
    assert [s.__name__ for s in wf.COMPARE_STEPS] == ["load_runs", "thresholds", "compare", "write"]
    assert [s.__name__ for s in wf.AGAINST_STEPS] == ["configure", "materialize", "take_candidate", "load_sides",
                                                      "review_policy", "scan_kernels", "pair", "measure_machine",
                                                      "time_pairs", "judge", "write"]


def test_load_runs(stored, tmp_path):
    run = wf.load_runs(wf.GateRun(_options(stored, tmp_path)))
    assert len(run.base_results.cases) == len(run.pr_results.cases) == 2
    with pytest.raises(BadInput, match="missing.json"):
        wf.load_runs(wf.GateRun(replace(_options(stored, tmp_path), pr=str(tmp_path / "missing.json"))))


def test_thresholds_from_options_or_calibration(stored, tmp_path):
    run = wf.load_runs(wf.GateRun(_options(stored, tmp_path)))
    calibrated = wf.thresholds(run)
    assert calibrated.threshold.relative > 0 and calibrated.rules == {}  # no spec k.toml in the folder
    mine = wf.thresholds(replace(run, options=replace(run.options, min_effect="0.5")))
    assert mine.threshold.relative == 0.5
    with pytest.raises(BadInput, match="--min-effect: expected a number"):
        wf.thresholds(replace(run, options=replace(run.options, min_effect="five")))
    with pytest.raises(BadInput, match=r"--floor-us: expected a number in \[0, inf\)"):
        wf.thresholds(replace(run, options=replace(run.options, floor_us="-1")))


def test_compare_then_write(stored, tmp_path):
    run = wf.compare(wf.thresholds(wf.load_runs(wf.GateRun(_options(stored, tmp_path)))))
    verdicts = {c.case_id: c.verdict for c in run.comparison.cases}
    assert verdicts["n=0"] == "SLOWER" and run.out == tmp_path / "out"
    done = wf.write(run)
    assert done.code == 1 and done.written["md"].name == "compare.md" and done.written["md"].exists()
    assert done.written["noise"].exists()  # both runs of one clean commit: an A/A that measures the noise floor
    lines = wf.summary(done)
    assert lines[0].startswith("merge gate (stored runs): 1 slower") and "SLOWER: k bf16 n=0" in lines[1]


def test_compare_refuses_runs_of_different_devices(stored, tmp_path):
    other = write(tmp_path, "other", results([case("k", "n=0", seed=2)], device="other-device"))
    run = wf.thresholds(wf.load_runs(wf.GateRun(replace(_options(stored, tmp_path), pr=other))))
    with pytest.raises(BadInput, match="different devices"):
        wf.compare(run)
    assert wf.compare(replace(run, options=replace(run.options, force=True))).comparison is not None


def test_configure_refuses_cupti_and_reads_noise(tmp_path):
    run = wf.configure(wf.GateRun(wf.AgainstOptions(against="HEAD", out=str(tmp_path))))
    assert run.device.arch == "cpu" and run.blocks.method == "events" and run.out == tmp_path
    with pytest.raises(BadInput, match="--method cupti"):
        wf.configure(wf.GateRun(wf.AgainstOptions(against="HEAD", method="cupti")))
    with pytest.raises(BadInput):
        wf.configure(wf.GateRun(wf.AgainstOptions(against="HEAD", noise=str(tmp_path / "none.json"))))


def _one_commit_repo(tmp_path):
    """A git repository of one commit holding an empty kernels/ package and specs/ folder."""
    repo = tmp_path / "repo"
    (repo / "kernels").mkdir(parents=True)
    (repo / "specs").mkdir()
    (repo / "kernels" / "__init__.py").write_text("")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)
    return repo


def test_materialize_takes_the_ref_or_says_in_one_line_why_not(tmp_path, monkeypatch):
    import contextlib

    monkeypatch.chdir(_one_commit_repo(tmp_path))
    with contextlib.ExitStack() as stack:
        run = wf.materialize(wf.GateRun(wf.AgainstOptions(against="HEAD"), stack=stack))
        assert os.path.isdir(run.base.root)
        with pytest.raises(BadInput, match="no-such-ref"):
            wf.materialize(wf.GateRun(wf.AgainstOptions(against="no-such-ref"), stack=stack))
    assert not os.path.exists(run.base.root)  # the temporary tree goes with the run


def test_pair_says_why_there_is_nothing_to_compare():
    run = wf.GateRun(wf.AgainstOptions(against="HEAD"), plan=ABPlan((), (), (), ("k: no common bench case",)))
    with pytest.raises(BadInput, match="nothing to compare .k: no common bench case"):
        wf.pair(run)


def test_candidate_runs_only_in_workers_and_its_ref_is_checked(tmp_path, monkeypatch):
    import contextlib

    with pytest.raises(BadInput, match="--candidate --no-isolate: a pull request's kernels run only in worker"):
        wf.configure(wf.GateRun(wf.AgainstOptions(against="HEAD", candidate="HEAD", isolate=False)))
    run = wf.configure(wf.GateRun(wf.AgainstOptions(against="HEAD", candidate="HEAD", out=str(tmp_path))))
    assert wf._isolate(replace(run, candidate=object()))
    assert wf._isolate(run) and not wf._isolate(replace(run, options=replace(run.options, isolate=False)))
    monkeypatch.chdir(_one_commit_repo(tmp_path))
    with contextlib.ExitStack() as stack:
        run = wf.materialize(wf.GateRun(wf.AgainstOptions(against="HEAD", candidate="HEAD"), stack=stack))
        pr = wf.take_candidate(run)
        assert pr.candidate.package.startswith("kh_pr_") and pr.base.aa and pr.candidate.sha == pr.base.sha
        assert wf.take_candidate(replace(run, options=replace(run.options, candidate=None))).candidate is None
        with pytest.raises(BadInput, match="^--candidate 'nope': not a commit in "):
            wf.take_candidate(replace(run, options=replace(run.options, candidate="nope")))


def test_review_policy_and_scan_kernels_read_both_sides_as_data(tmp_path, monkeypatch):
    import contextlib
    import sys

    from tests.e2e import TINY_FILES, tiny_spec

    repo = _one_commit_repo(tmp_path)
    for rel, text in {**TINY_FILES, "specs/tiny.toml": tiny_spec()}.items():
        (repo / rel).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny"],
                   check=True, capture_output=True)
    (repo / "specs" / "tiny.toml").write_text(tiny_spec(extra='\n[gate]\nmin_effect = 0.5\nreason = "noisy"\n'))
    (repo / "kernels" / "tiny.py").write_text(TINY_FILES["kernels/tiny.py"] + "\nimport ctypes\n")
    monkeypatch.chdir(repo)
    before = set(sys.modules)
    with contextlib.ExitStack() as stack:
        run = wf.materialize(wf.GateRun(wf.AgainstOptions(against="HEAD", kernels=("tiny",)), stack=stack))
        run = wf.scan_kernels(wf.review_policy(wf.load_sides(wf.take_candidate(run))))
        assert [(c.field, c.base, c.pr) for c in run.policy.changes] == [("gate.min_effect", "(unset)", "0.5")]
        assert not run.policy.applied  # the working tree is dirty: no commit names it, so nothing can be accepted
        assert [(f.path, f.category, f.in_base) for f in run.scan] == [("kernels/tiny.py", "native", False)]
        assert wf.review_policy(replace(run, options=replace(run.options, accept_policy="a" * 40))).policy.note
    assert not {m for m in set(sys.modules) - before if m.startswith(("kernels", "kh_"))}  # nothing was imported
