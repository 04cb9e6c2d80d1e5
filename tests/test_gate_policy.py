"""Policy comes from the base (harness.gate.policy): which spec fields carry it, what a pull request's change of
them lists, the acceptance tied to one commit, the PR spec judged by the base's values, and the report's policy
and scan sections. The end-to-end attacks are tests/redteam/test_policy_attacks.py."""

from __future__ import annotations

import dataclasses

import pytest

from harness.gate import policy
from harness.gate.model import Finding, PolicyChange, PolicyReview
from harness.spec.load import load
from tests.e2e import case, results, write, write_spec

SHA = "a" * 40
OTHER = "b" * 40
REF_A = "def scale_ref(*, x, w, out):\n    out.copy_(x * w * 2)\n"


def _spec(folder, extra: str = "", impl: str = "kernels.tiny:scale_fast"):
    folder.mkdir(parents=True, exist_ok=True)
    text = write_spec(folder, "tiny", impl, extra=extra).read_text()
    (folder / "tiny.toml").write_text(text.replace("tests.planted.broken_kernels:scale_ref", "kernels.tiny:scale_ref"))
    return load(folder / "tiny.toml")


def test_an_unchanged_spec_has_no_policy_change(tmp_path):
    assert policy.changes("tiny", _spec(tmp_path / "a"), _spec(tmp_path / "b")) == ()


def test_every_policy_carrying_field_is_listed(tmp_path):
    base = _spec(tmp_path / "base", '\n[waive]\nlayout = "the base waives this"\n')
    pr = _spec(tmp_path / "pr", '\n[gate]\nmin_effect = 0.5\nreason = "noisy"\n'
                                '\n[tolerance.bf16]\nrtol = 0.5\natol = 0.5\nreason = "loose"\n'
                                '\n[waive]\ndeterminism = "a new waiver"\n')
    pr = dataclasses.replace(pr, reference="kh_pr_0123456789ab.kernels.tiny:other_ref", reference_precision="input")
    found = {c.field: (c.base, c.pr) for c in policy.changes("tiny", base, pr)}
    assert found == {"gate.min_effect": ("(unset)", "0.5"), "tolerance.bf16": ("(unset)", "rtol=0.5 atol=0.5"),
                     "waive.layout": ("waived", "(unset)"), "waive.determinism": ("(unset)", "waived"),
                     "kernel.reference": ("kernels.tiny:scale_ref", "kernels.tiny:other_ref"),
                     "kernel.reference_precision": ("upcast", "input")}


def test_the_tree_prefix_is_no_change_but_edited_reference_code_is(tmp_path):
    base, pr = _spec(tmp_path / "base"), _spec(tmp_path / "pr")
    base = dataclasses.replace(base, reference="kh_base_0123456789ab.kernels.tiny:scale_ref")
    for root, body in ((tmp_path / "broot", REF_A), (tmp_path / "proot", REF_A)):
        (root / "kernels").mkdir(parents=True)
        (root / "kernels" / "tiny.py").write_text(f"import torch\n\n\n{body}")
    assert policy.changes("tiny", base, pr, [tmp_path / "broot"], [tmp_path / "proot"]) == ()
    (tmp_path / "proot" / "kernels" / "tiny.py").write_text("import torch\n" + REF_A.replace("* 2", "* 2.2"))
    (c,) = policy.changes("tiny", base, pr, [tmp_path / "broot"], [tmp_path / "proot"])
    assert c.field == "kernel.reference (its code)" and c.pr == "edited by the pull request"


@pytest.mark.parametrize("given, sha, dirty, ok, says", [
    (None, SHA, False, False, ""),
    (SHA, SHA, False, True, "accepted for commit aaaaaaaaaaaa"),
    (SHA.upper(), SHA, False, True, "accepted"),
    (OTHER, SHA, False, False, "not the candidate's commit aaaaaaaaaaaa"),
    (SHA[:12], SHA, False, False, "not a full commit SHA"),
    (SHA, SHA, True, False, "uncommitted changes"),
])
def test_acceptance_names_one_exact_commit(given, sha, dirty, ok, says):
    got, line = policy.accepted(given, sha, dirty)
    assert got is ok and says in line and (line == "") == (given is None)


def test_review_applies_only_changes_accepted_for_the_candidate(tmp_path):
    base, pr = _spec(tmp_path / "base"), _spec(tmp_path / "pr", '\n[gate]\nmin_effect = 0.5\nreason = "noisy"\n')
    pairs = {"tiny": (base, pr)}
    plain = policy.review(pairs, ["new_one"], accept_sha=None, candidate_sha=SHA)
    assert not plain.applied and [c.field for c in plain.changes] == ["gate.min_effect"]
    assert plain.new_kernels == ("new_one",)
    assert policy.review(pairs, [], accept_sha=SHA, candidate_sha=SHA).applied
    assert not policy.review(pairs, [], accept_sha=OTHER, candidate_sha=SHA).applied
    assert not policy.review({"tiny": (base, base)}, [], accept_sha=SHA, candidate_sha=SHA).applied  # nothing to apply


def test_effective_spec_takes_the_base_policy_and_keeps_the_pr_kernel(tmp_path):
    base = _spec(tmp_path / "base", '\n[waive]\nlayout = "the base waives this"\n')
    pr = _spec(tmp_path / "pr", '\n[tolerance.bf16]\nrtol = 0.5\natol = 0.5\nreason = "loose"\n'
                                '\n[gate]\nmin_effect = 0.5\nreason = "noisy"\n', impl="kernels.tiny:other")
    pr = dataclasses.replace(pr, reference="kernels.tiny:pr_ref", tensors=tuple(
        dataclasses.replace(t, tolerance=pr.tolerances["bf16"]) if t.name == "out" else t for t in pr.tensors))
    judged = policy.effective(pr, base)
    assert judged.tolerances == base.tolerances and judged.waivers == base.waivers and judged.gate is None
    assert judged.reference == base.reference == judged.oracle and judged.tolerance("bf16", "out").rtol < 0.5
    assert judged.backends["triton"].impl == "kernels.tiny:other" and judged.cases == pr.cases


def test_compare_md_has_the_policy_and_scan_sections(tmp_path):
    from harness.gate import workflow as wf
    from harness.report.compare import comparison_json, render_markdown

    stored = [write(tmp_path, n, results([case("k", "n=0", seed=s)])) for n, s in (("base", 0), ("pr", 1))]
    run = wf.compare(wf.thresholds(wf.load_runs(wf.GateRun(wf.CompareOptions(
        base=stored[0], pr=stored[1], out=str(tmp_path / "out"), specs_dir=str(tmp_path))))))
    review = PolicyReview((PolicyChange("k", "gate.min_effect", "(unset)", "0.99"),), False, ("fresh",), "")
    scan = (Finding("kernels/k.py", 3, "monkeypatch", "time.perf_counter = ...", False),
            Finding("kernels/k.py", 9, "stream", "torch.cuda.Stream(...)", True))
    cmp = dataclasses.replace(run.comparison, policy=review, scan=scan)
    md = render_markdown(cmp)
    assert "### Policy changes" in md and "**Not applied: the base's values judged this" in md
    assert "| k | `gate.min_effect` | (unset) | 0.99 |" in md and "New kernels (no base version): fresh." in md
    assert "### Static scan" in md and "`kernels/k.py:3` | monkeypatch | `time.perf_counter = ...`" in md
    assert "1 finding new in this pull request (1 also at the base" in md and "kernels/k.py:9" not in md
    doc = comparison_json(cmp, 0)
    assert doc["policy_changes"] == [{"kernel": "k", "field": "gate.min_effect", "base": "(unset)", "pr": "0.99"}]
    assert doc["policy_applied"] is False and doc["scan_new_findings"] == 1
    accepted = render_markdown(dataclasses.replace(cmp, policy=dataclasses.replace(review, applied=True)))
    assert "**the pull request's values judged this run.**" in accepted
    assert "### Policy changes" not in render_markdown(run.comparison)


BACKWARD = '\n[backward]\ninputs = ["x", "w"]\n\n[backward.backends.triton]\ndifferentiable = true\n'
LOOSE_GRAD = '\n[backward.tolerance.w.bf16]\nrtol = 0.5\natol = 0.5\nreason = "loose"\n'


def test_a_gradients_tolerance_is_policy_listed_and_judged_by_the_base(tmp_path):
    """A pull request that loosens a gradient's bound has it listed as a policy change, and the gate's bwd and
    full rows judge it by the base's bound (bench --against compares backward passes)."""
    base = _spec(tmp_path / "base", BACKWARD)
    pr = _spec(tmp_path / "pr", BACKWARD + LOOSE_GRAD)
    found = {c.field: (c.base, c.pr) for c in policy.changes("tiny", base, pr)}
    assert found == {"backward.tolerance.w.bf16": ("(unset)", "rtol=0.5 atol=0.5")}
    assert pr.grad_tolerance("bf16", "w", pr.cases["ci"][0]).rtol == 0.5
    judged = policy.effective(pr, base)
    assert judged.backward.tolerances == {} and judged.grad_tolerance("bf16", "w", pr.cases["ci"][0]).rtol < 0.5


@pytest.mark.parametrize("tensor, flag, value, key, shown", [
    ("out", "grad", False, "outputs.out.grad", "false"),   # a call returning its outputs may leave it uncompared
    ("w", "static", True, "inputs.w.static", "true"),      # the checks stop giving it new values
], ids=["grad-false", "static"])
def test_a_tensor_flag_that_loosens_a_check_is_policy_listed_and_judged_by_the_base(tmp_path, tensor, flag, value,
                                                                                    key, shown):
    """A pull request that sets such a flag has the change listed, and is judged with the base's flag."""
    base = _spec(tmp_path / "base")
    pr = _spec(tmp_path / "pr")
    pr = dataclasses.replace(pr, tensors=tuple(dataclasses.replace(t, **{flag: value}) if t.name == tensor else t
                                               for t in pr.tensors))
    found = {c.field: (c.base, c.pr) for c in policy.changes("tiny", base, pr)}
    assert found == {key: ("(unset)", shown)}
    judged = next(t for t in policy.effective(pr, base).tensors if t.name == tensor)
    assert getattr(judged, flag) == (not value)
