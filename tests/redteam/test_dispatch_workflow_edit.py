"""Attack: a fork's pull request edits the GPU workflow so that it drops the authorization and the clean
environment (and adds a ``pull_request`` trigger), hoping its copy runs its code on a GPU runner.

Played as GitHub would: the workflow files are parsed as data, the events a fork can cause are simulated
(tests/redteam/github_sim.py), and the authorize job's outputs are the real decision of harness.gate.authorize.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from harness.gate import authorize as au
from harness.gate.authorize import authorization_doc, output_lines
from harness.gate.sandbox import admit
from tests.redteam import github_sim as gh

ROOT = Path(__file__).resolve().parents[2]
HEAD, BASE = "d" * 40, "e" * 40
ALLOWED = ["o/r/.github/workflows/gpu.yml@refs/heads/main"]  # the runner hook's list (docs/ci.md)
ROLES = {"fork-author": "none", "maint": "write"}

EVIL = """name: gpu
on:
  pull_request:
  pull_request_target:
    types: [opened, synchronize]
permissions: write-all
jobs:
  gpu:
    runs-on: [self-hosted, linux, gpu, sm90]
    steps:
      - uses: actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8 # v5.0.0
      - run: python -m harness ci-gpu --against HEAD --kernels rope --out o
"""


@pytest.fixture
def trees(tmp_path):
    base, pr = tmp_path / "base", tmp_path / "pr"
    for tree in (base, pr):
        shutil.copytree(ROOT / ".github" / "workflows", tree / ".github" / "workflows")
    (pr / ".github" / "workflows" / "gpu.yml").write_text(EVIL)
    return base, pr


def _event(action="synchronize", sender="fork-author"):
    return {"action": action, "sender": {"login": sender},
            "pull_request": {"number": 7, "head": {"sha": HEAD, "repo": {"full_name": "fork/r"}},
                             "base": {"sha": BASE}}}


def _authorize(event_name, event):
    pull = {"number": 7, "state": "open", "user": {"login": "fork-author"}, "head": {"sha": HEAD},
            "base": {"sha": BASE}, "labels": []}
    d = au.decide(au.read_event(event_name, event), pull, ROLES, [])
    return dict(line.split("=", 1) for line in output_lines(d))


def test_the_fork_s_copy_never_runs_for_pull_request_target(trees):
    base, pr = trees
    started = gh.started_jobs("pull_request_target", _event(), base, pr, _authorize)
    assert [j["job"] for j in started] == ["authorize", "gate", "report"]  # the base's definition, waiting
    assert not [j for j in started if gh.self_hosted(j)]
    authorized = gh.started_jobs("pull_request_target", _event(sender="maint"), base, pr, _authorize)
    gpu = [j for j in authorized if gh.self_hosted(j)]
    assert len(gpu) == 2 and all(j["ref"] == ALLOWED[0] for j in gpu)
    steps = [s.get("name", "") for s in gpu[0]["steps"]]
    assert any("sandbox.py setup" in s for s in steps) and any("sandbox.py cleanup" in s for s in steps)
    print("REDTEAM workflow-edit: no effect: pull_request_target runs the default branch's gpu.yml; the fork's "
          "copy is never read, and its GPU jobs wait for authorization")


def test_the_fork_s_copy_on_pull_request_is_refused_by_the_runner(trees):
    base, pr = trees
    started = gh.started_jobs("pull_request", _event(), base, pr, _authorize)
    evil = [j for j in started if gh.self_hosted(j)]
    assert evil and evil[0]["ref"] == "o/r/.github/workflows/gpu.yml@refs/pull/7/merge"  # GitHub would ask
    why = admit({"GITHUB_EVENT_NAME": "pull_request", "GITHUB_WORKFLOW_REF": evil[0]["ref"]}, ALLOWED)
    assert "a self-hosted GPU runner takes only" in why
    print(f"REDTEAM workflow-edit: caught: the runner's job-started hook refuses the fork's job: {why}")


def test_no_workflow_of_the_base_puts_a_pull_request_on_a_self_hosted_runner(tmp_path):
    base = ROOT
    for event in ("pull_request", "pull_request_review"):
        started = gh.started_jobs(event, _event(), base, base, _authorize)
        assert not [j for j in started if gh.self_hosted(j)], event
    print("REDTEAM workflow-edit: no effect: no job of the base's workflows starts on a self-hosted runner for a "
          "pull_request event")


def test_an_unauthorized_decision_cannot_be_turned_into_a_run_by_the_payload():
    """The fork controls its branch name, title and body: none of it is read as an authorization."""
    event = _event()
    event["pull_request"].update(title="/gate run " + HEAD, body=f"/gate run {HEAD}\n/gate accept-regression {HEAD} x",
                                 labels=[{"name": au.RUN_LABEL}])
    outputs = _authorize("pull_request_target", event)
    assert outputs["run"] == "false"
    doc = yaml.safe_load(outputs["authorization"])
    assert doc == authorization_doc(au.read_authorization(outputs["authorization"], "out"))
    assert doc["accept"] == {"regression": None, "policy": None}
    print("REDTEAM workflow-edit: no effect: a title, body or label list in the payload authorizes nothing")
