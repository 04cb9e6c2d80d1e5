"""``compare BASE.json PR.json``: verdicts on stored runs, refusals, --force, exit codes, compare.md's size.

Every run here is SYNTHETIC (seeded RNG samples, device "synthetic-device"); nothing was measured.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.cli.main import main
from harness.gate.compare import Refused, compare_results
from harness.gate.model import STORED, CaseComparison, Comparison, Side, Threshold
from harness.report.compare import COMMENT_LIMIT, render_markdown, write_comparison
from harness.results.load import load_results, results_from_json
from harness.results.model import SCHEMA_VERSION, ResultsError, to_json
from tests.e2e import case, results, write

RULE = Threshold(0.03, 0.0, "test")


def test_verdicts_on_stored_runs():
    base = results([case("k", f"n={i}", seed=i) for i in range(3)] + [case("gone", "n=1")])
    pr = results([case("k", "n=0", median=115.0, seed=10), case("k", "n=1", median=85.0, seed=11),
                  case("k", "n=2", seed=12), case("new", "n=1")])
    cmp = compare_results(base, pr, base_source="b.json", pr_source="p.json", threshold=RULE)
    got = {c.case_id: c.verdict for c in cmp.cases}
    assert got == {"n=0": "SLOWER", "n=1": "FASTER", "n=2": "SAME"}
    assert cmp.kind == STORED and cmp.new_kernels == ("new",) and cmp.removed_kernels == ("gone",)
    assert cmp.aa  # same commit, both clean: a cross-run A/A


def test_wrong_pr_candidate_fails_whatever_its_speed_and_a_broken_base_is_not_compared():
    base = results([case("k", "n=0"), case("k", "n=1", status="error")])
    pr = results([case("k", "n=0", status="wrong"), case("k", "n=1")])
    cmp = compare_results(base, pr, base_source="b", pr_source="p", threshold=RULE)
    assert {c.case_id: c.verdict for c in cmp.cases} == {"n=0": "WRONG", "n=1": "NOT-COMPARED"}


@pytest.mark.parametrize("change,message", [
    ({"device": "other-device"}, r"different devices \(base synthetic-device, PR other-device\)"),
    ({"driver": "2.0"}, r"different drivers \(base 1.0, PR 2.0\)"),
    ({"spec_sha256": {"specs/k.toml": "0" * 64}}, r"different spec files \(k.toml\)"),
])
def test_refuses_runs_that_are_not_comparable_unless_forced(change, message):
    base, pr = results([case()]), results([case(seed=5)], **change)
    with pytest.raises(Refused, match=message + r"; pass --force"):
        compare_results(base, pr, base_source="b", pr_source="p", threshold=RULE)
    cmp = compare_results(base, pr, base_source="b", pr_source="p", threshold=RULE, force=True)
    assert len(cmp.forced) == 1
    assert "Compared with `--force` although the runs have different" in render_markdown(cmp)


def test_cli_exit_codes(tmp_path, capsys):
    base = write(tmp_path, "base", results([case("k", "n=0"), case("k", "n=1", seed=1)]))
    same = write(tmp_path, "same", results([case("k", "n=0", seed=2), case("k", "n=1", seed=3)]))
    slow = write(tmp_path, "slow", results([case("k", "n=0", median=120.0, seed=2), case("k", "n=1", seed=3)]))
    other = write(tmp_path, "other", results([case("k", "n=0", seed=2)], device="other-device"))
    out = tmp_path / "out"
    assert main(["compare", base, same, "--out", str(out), "--specs-dir", str(tmp_path)]) == 0
    assert (out / "compare.md").read_text().startswith("**Merge gate: 0 slower, 0 faster, 2 same, 0 inconclusive**")
    doc = json.loads((out / "compare.json").read_text())
    assert doc["exit_code"] == 0 and doc["comparison"]["kind"] == STORED and doc["counts"] == {"SAME": 2}
    assert (out / "noise.json").exists()  # same commit, clean: an A/A of stored runs measures the noise floor
    assert main(["compare", base, slow, "--out", str(out), "--specs-dir", str(tmp_path)]) == 1
    assert "SLOWER: k bf16 n=0" in capsys.readouterr().out
    assert main(["compare", base, other, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "different devices" in err and "--force" in err
    assert main(["compare", base, other, "--out", str(out), "--force"]) == 0
    assert main(["compare", base, str(tmp_path / "missing.json"), "--out", str(out)]) == 2
    assert main(["compare", base, slow, "--out", str(out), "--min-effect", "0.5"]) == 0  # a 50 % effect
    assert main(["compare", base, slow, "--out", str(out), "--min-effect", "five"]) == 2
    assert "--min-effect: expected a number" in capsys.readouterr().err
    assert main(["compare", base, same, "--out", str(out), "--noise", str(out / "compare.md")]) == 2


def test_noise_file_from_an_aa_compare_raises_the_effect(tmp_path):
    base = write(tmp_path, "base", results([case("k", "n=0")]))
    aa = write(tmp_path, "aa", results([case("k", "n=0", rsd=0.03, seed=4)]))
    out = tmp_path / "aa_out"
    main(["compare", base, aa, "--out", str(out)])
    noise = json.loads((out / "noise.json").read_text())["cases"][0]["spread"]
    slow = write(tmp_path, "slow", results([case("k", "n=0", median=100.0 * (1 + noise + 0.04), seed=2)]))
    assert main(["compare", base, slow, "--out", str(tmp_path / "x"), "--min-effect", "0.001"]) == 1
    assert main(["compare", base, slow, "--out", str(tmp_path / "y"), "--noise", str(out / "noise.json")]) in (0, 1)


def _record(kernel: str, i: int, verdict: str) -> CaseComparison:
    blocks = tuple(tuple(100.0 + j for j in range(12)) for _ in range(10))
    return CaseComparison(kernel=kernel, dtype="bf16", case_id=f"tokens={i},hidden=4096",
                          shape={"tokens": i, "hidden": 4096}, headline=i == 0, verdict=verdict,
                          reason="failed the correctness check: out: 3 of 4096 elements" if verdict == "WRONG" else "",
                          base_provider="triton", pr_provider="triton", base_median_us=123.4, pr_median_us=125.1,
                          ratio=1.0138, ratio_lo=1.001, ratio_hi=1.03, effect=0.03, threshold=RULE, noise=None,
                          base_spread=0.011, pr_spread=0.012, base_pct_roofline=81.2, pr_pct_roofline=80.1,
                          blocks=10, stop="decided", dropped=0, gpu_index=0, gpu_uuid="GPU-x", wall_s=1.0,
                          base_blocks_us=blocks, pr_blocks_us=blocks)


def _comparison(n_kernels: int, cases_per_kernel: int = 4) -> Comparison:
    verdicts = ("SAME", "SAME", "INCONCLUSIVE", "FASTER", "SLOWER", "WRONG")
    cases = tuple(_record(f"kernel_with_a_long_name_{k:03d}", i, verdicts[(k + i) % len(verdicts)])
                  for k in range(n_kernels) for i in range(cases_per_kernel))
    side = Side("base", "results.json", "b" * 40, False, "NVIDIA H200", "580.1", "2.11", "3.6", "13.0",
                "SM 1980/1980 MHz", "2026-01-01", {f"kernel_{k}.toml": "c" * 64 for k in range(n_kernels)})
    return Comparison("in-process interleaved", False, side, dataclasses.replace(side, label="PR"), cases,
                      ("brand_new",), (), ("k n=3: only in the PR",), RULE, 0.95, {"blocks": 10})


@pytest.mark.parametrize("n_kernels", [50, 400])
def test_compare_md_fits_one_github_comment(n_kernels):
    cmp = _comparison(n_kernels)
    text = render_markdown(cmp, "compare_forest.png")
    assert len(text) <= COMMENT_LIMIT
    slower = sum(c.verdict == "SLOWER" for c in cmp.cases)
    assert text.splitlines()[0].startswith(f"**Merge gate: {slower} slower, ")
    assert text.index("### Regressions") < text.index("### Per kernel") < text.index("### How each verdict")
    if n_kernels == 50:  # 200 cases fit whole: every failing case, every table, the provenance
        assert text.count("**WRONG**") == 2 * sum(c.verdict == "WRONG" for c in cmp.cases)  # regressions + kernel
        assert text.count("<details") == 51 and "Provenance of both sides" in text
    else:  # 1,600 cases: the regressions stay, the rest is folded away to compare.json
        assert "compare.json" in text and "**SLOWER**" in text


def test_compare_json_holds_every_case(tmp_path):
    cmp = _comparison(5)
    paths = write_comparison(cmp, tmp_path, 1)
    doc = json.loads(paths["json"].read_text())
    assert len(doc["comparison"]["cases"]) == len(cmp.cases) and doc["exit_code"] == 1
    assert doc["comparison"]["cases"][0]["base_blocks_us"][0][0] == 100.0
    assert doc["summary"] == paths["md"].read_text().splitlines()[0].split("**")[1].removeprefix("Merge gate: ")


def test_forest_plot_written(tmp_path):
    pytest.importorskip("matplotlib")
    paths = write_comparison(_comparison(3), tmp_path, 1)
    assert paths["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "compare_forest.png" in paths["md"].read_text()


# ----------------------------------------------------------------------------- schema 3, version 2 files

LAUNCH_FIELDS = ("host_us", "host_median_us", "wall_us", "wall_median_us", "launch")  # added in schema 5

def test_version_2_files_load_without_gpu_fields(tmp_path):
    doc = to_json(results([case()]))
    doc["schema_version"] = 2
    for c in doc["cases"]:
        for key in ("gpu_index", "gpu_uuid", "compute", *LAUNCH_FIELDS):
            del c[key]
    loaded = results_from_json(doc, "v2.json")
    assert loaded.cases[0].gpu_index is None and loaded.cases[0].gpu_uuid is None
    assert loaded.schema_version == SCHEMA_VERSION  # loaded as a record of the current schema
    doc["cases"][0]["gpu_uuid"] = "GPU-x"
    with pytest.raises(ResultsError, match=r"v2.json: cases\[0\].gpu_uuid: unknown key in a schema version 2 file"):
        results_from_json(doc, "v2.json")
    v3 = to_json(results([case()]))
    v3["schema_version"] = 3
    for key in ("compute", *LAUNCH_FIELDS):
        del v3["cases"][0][key]
    assert results_from_json(v3, "v3.json").cases[0].compute is None  # version 3 has no compute: its default
    del v3["cases"][0]["gpu_index"]
    with pytest.raises(ResultsError, match=r"cases\[0\].gpu_index: required key is missing"):
        results_from_json(v3, "v3.json")
    path = tmp_path / "r.json"
    path.write_text(json.dumps(to_json(results([case()]))))
    assert load_results(path).cases[0].gpu_uuid == "GPU-synthetic"
