"""A new kernel engineer's first hour: the README's commands exit 0 on a CPU machine, leave the checkout clean,
and say what they measured.

- a baseline or peer that cannot run is a finding of the report, never the run's exit code; only a
  wrong or crashing candidate (or bad input) fails ``bench``;
- ``bench`` without ``--out`` writes where git ignores it;
- "model error" only beyond the noise of both the case and the ceiling;
- the noxfile and the docs keep their promises (docstrings, posargs, the expression functions in docs/spec.md);
- the README stays short, its commands name real sessions and options, and its links to docs/ resolve.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import re
import shlex
import subprocess
import sys

import pytest

from harness.bench.plan import default_out_dir
from harness.bench.roofline import roofline, verdict
from harness.bench.workflow import failures
from harness.cli.main import main
from harness.correctness.args import full_env
from harness.spec.expr import FUNCTIONS
from harness.spec.load import load as load_spec
from harness.target.device import Device
from harness.timing import ceilings as ceil_mod
from harness.timing.ceilings import Ceilings, memory_ceiling
from tests.e2e import REPO, synthetic_results, write_spec

# SYNTHETIC ceilings (GB/s, TFLOP/s), each with its own 95% interval: nothing here was measured.
BW = {"fill": 3000.0, "copy": 4000.0, "add": 4200.0, "read": 4800.0}
BW_CI = {k: [0.98 * v, 1.02 * v] for k, v in BW.items()}


def _ceilings(ci: bool = True) -> Ceilings:
    return Ceilings("synthetic", "n/a", BW["copy"], BW, {"fp32": 50.0, "bf16": 700.0}, {}, "synthetic",
                    "2026-11-29T07:00:00+00:00", True, bandwidth_ci_gbps=BW_CI if ci else {},
                    matmul_ci_tflops={"fp32": [49.0, 51.0], "bf16": [690.0, 710.0]} if ci else {},
                    conditions={"start": {"loadavg_1m": 0.1, "cpu_cores_usable": 2}})


def crashing(**_):
    raise RuntimeError("planted: this implementation always raises")


# ----------------------------------------------------------------------------- exit code: candidates only

def test_baseline_and_peer_failures_do_not_fail_the_run():
    cases = synthetic_results().cases  # a torch.compile error (baseline) and a wrong liger (peer)
    assert {c.role for c in cases if c.status in ("wrong", "error")} == {"baseline", "peer"}
    lines, failed = failures(cases)
    assert not failed
    out = "\n".join(lines)
    assert "note (baseline, does not fail the run): silu_and_mul torch.compile" in out
    assert "RuntimeError" in out  # the failing baseline is shown with its error


@pytest.mark.parametrize("status", ["wrong", "error"])
def test_a_failing_candidate_fails_the_run(status):
    cases = list(synthetic_results().cases)
    i = next(i for i, c in enumerate(cases) if c.role == "candidate")
    cases[i] = dataclasses.replace(cases[i], status=status, reason="planted")
    lines, failed = failures(cases)
    assert failed and f"FAILED: {cases[i].kernel} {cases[i].provider}" in "\n".join(lines)


def test_a_failure_line_names_the_mode_of_a_backward_row():
    cases = list(synthetic_results().cases)
    i = next(i for i, c in enumerate(cases) if c.role == "candidate")
    rows = [dataclasses.replace(cases[i], status="wrong", reason="planted", mode=m) for m in ("fwd", "bwd", "full")]
    lines, _ = failures(rows)
    assert len(set(lines)) == 3, lines
    assert " fwd: " not in lines[0] and " bwd: wrong: planted" in lines[1] and " full: wrong: planted" in lines[2]


def _bench_specs(tmp_path, reference: str = "tests.planted.broken_kernels:scale_ref"):
    specs = tmp_path / "specs"
    specs.mkdir()
    extra = '\n[peers.broken]\nimpl = "tests.test_first_hour:crashing"\n\n[[cases.bench]]\nrows = 64\ncols = 512\n'
    path = write_spec(specs, "scale", "tests.planted.broken_kernels:scale", extra=extra)
    path.write_text(path.read_text().replace("tests.planted.broken_kernels:scale_ref", reference))
    return specs


def _bench(monkeypatch, specs, *args: str) -> int:
    from harness.bench import run

    monkeypatch.setattr(ceil_mod, "measure_ceilings", lambda *a, **k: _ceilings())  # no minutes of probes
    # Progress binds sys.stderr when harness.bench.run is first imported: maybe another test's closed capture
    monkeypatch.setattr(run.Progress.__init__, "__defaults__", (sys.stderr,))
    return main(["bench", "--specs-dir", str(specs), "--dtype", "fp32", "--provider", "reference,broken",
                 "--timeout", "0.5", "--min-time", "0.05", "--tier", "bench", *args])


def test_bench_exits_0_with_a_crashing_peer_and_reports_it(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert _bench(monkeypatch, _bench_specs(tmp_path), "--out", str(out)) == 0
    assert "note (peer, does not fail the run): scale broken" in capsys.readouterr().out
    report = (out / "report.md").read_text()
    assert "`broken` (peer)" in report and "planted: this implementation always raises" in report
    results = json.loads((out / "results.json").read_text())
    assert {(c["provider"], c["status"]) for c in results["cases"]} == {("reference", "ok"), ("broken", "error")}


def test_bench_exits_1_when_the_candidate_crashes(tmp_path, monkeypatch, capsys):
    # On a CPU the candidate is the reference (the Triton interpreter is not timed): make it crash.
    specs = _bench_specs(tmp_path, reference="tests.test_first_hour:crashing")
    assert _bench(monkeypatch, specs, "--out", str(tmp_path / "out")) == 1
    assert "FAILED: scale reference" in capsys.readouterr().out


# ----------------------------------------------------------------------------- default output: ignored by git

def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True)


@pytest.mark.parametrize("device", [Device("cpu", "AMD EPYC", "cpu"),
                                    Device("sm_90", "NVIDIA H200", "cuda:0", (9, 0), fake=True)])
def test_default_out_dir_is_ignored_by_git(device):
    out = default_out_dir(device)
    assert not out.is_absolute() and out.parts[0] != "reports"  # reports/ holds committed runs only
    if _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    for name in ("report.md", "results.json", "results.csv", "cases.jsonl", "dist_x.png", "gate/compare.md"):
        assert _git("check-ignore", "-q", str(out / name)).returncode == 0, f"{out / name} is not ignored"


def test_bench_without_out_writes_under_the_ignored_default(tmp_path, monkeypatch, capsys):
    specs = _bench_specs(tmp_path)
    monkeypatch.chdir(tmp_path)  # the default is relative to where the command runs
    assert _bench(monkeypatch, specs) == 0
    written = tmp_path / default_out_dir(Device("cpu", "any", "cpu"))
    assert (written / "report.md").is_file()
    assert str(written.relative_to(tmp_path)) in capsys.readouterr().out


def test_reports_h200_stays_tracked():
    if _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    assert _git("check-ignore", "-q", "reports/h200/report.md").returncode == 1


# ----------------------------------------------------------------------------- model error only beyond noise

@pytest.fixture
def scale(tmp_path):
    spec = load_spec(write_spec(tmp_path, "scale", "tests.planted.broken_kernels:scale"))
    return spec, full_env(spec, spec.cases["ci"][0], "fp32")


def _at(spec, env, pct: float) -> float:
    """The median µs at which the case sits at ``pct``% of the copy roofline."""
    nbytes = float(spec.roofline.bytes(env))
    return nbytes / (memory_ceiling(BW, None) * 1e3) * 100.0 / pct


def test_above_100_percent_within_noise_passes(scale):
    spec, env = scale
    median = _at(spec, env, 101.0)  # 1% above: inside the ceiling's own 2% interval
    out = roofline(spec, env, median, _ceilings(), "fp32", (0.995 * median, 1.005 * median))
    assert out["pct_roofline"] == pytest.approx(101.0) and out["verdict"] == "pass"
    # the case's own interval counts too: 3% above the ceiling's fast end, but the slow end of the case's
    # interval is 6% slower
    median = _at(spec, env, 105.0)
    assert roofline(spec, env, median, _ceilings(), "fp32", (median, 1.06 * median))["verdict"] == "pass"


def test_beyond_both_intervals_is_a_model_error(scale):
    spec, env = scale
    median = _at(spec, env, 110.0)
    out = roofline(spec, env, median, _ceilings(), "fp32", (0.99 * median, 1.01 * median))
    assert out["verdict"] == "model-error"
    # no intervals at all (an old results file): judged on the medians, as before
    assert roofline(spec, env, _at(spec, env, 101.0), _ceilings(ci=False), "fp32")["verdict"] == "model-error"


def test_verdict_rule():
    assert verdict(101.0, 99.0, 0.8) == "pass"
    assert verdict(120.0, 104.0, 0.8) == "model-error"
    assert verdict(70.0, 69.0, 0.8) == "below-target" and verdict(85.0, 80.0, 0.8) == "pass"
    assert verdict(101.0, None, 0.8) == "model-error"


def test_the_verdict_uses_the_case_interval(scale):
    """A case judged once, with its median's interval: 103% of the roof within noise passes, 130% with a tight
    interval is a model error."""
    spec, env = scale
    median = _at(spec, env, 103.0)
    assert roofline(spec, env, median, _ceilings(), "fp32")["verdict"] == "model-error"  # the median alone
    assert roofline(spec, env, median, _ceilings(), "fp32", (0.9 * median, 1.1 * median))["verdict"] == "pass"
    tight = (_at(spec, env, 131.0), _at(spec, env, 129.0))
    assert roofline(spec, env, _at(spec, env, 130.0), _ceilings(), "fp32", tight)["verdict"] == "model-error"


# ----------------------------------------------------------------------------- the report says what it timed

def test_cpu_report_names_what_was_timed_and_what_was_only_checked(tmp_path):
    from harness.report import render
    from harness.report.plots import Plots

    results = synthetic_results()
    results = dataclasses.replace(results, environment={**results.environment, "arch": "cpu"},
                                  ceilings={**dataclasses.asdict(_ceilings()), "cached": True})
    text = render.build_context(results, Plots(), "results.json")
    lines = text["what_timed"]
    assert lines[0].startswith("**What was timed:** `triton` (the candidate)")
    assert any("**Checked, not timed:** `triton` ran only under the Triton interpreter" in ln for ln in lines)
    assert "read from the cache" in text["ceilings_when"]["text"]
    assert "host load average 0.10 (1 min) on 2 usable cores" in text["ceilings_when"]["text"]


@pytest.mark.parametrize(("snapshot", "busy"), [
    ({"loadavg_1m": 0.3, "cpu_cores_usable": 2}, False),
    ({"loadavg_1m": 3.4, "cpu_cores_usable": 2}, True),  # more runnable tasks than cores
    ({"gpu_util_pct": 0, "other_processes": [], "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980}, False),
    ({"gpu_util_pct": 85, "other_processes": [4242], "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980}, True),
])
def test_report_warns_when_the_ceilings_were_measured_under_load(snapshot, busy):
    from harness.report import render
    from harness.report.plots import Plots

    results = synthetic_results()
    ceilings = {**dataclasses.asdict(_ceilings()), "cached": True, "conditions": {"start": snapshot}}
    context = render.build_context(dataclasses.replace(results, ceilings=ceilings), Plots(), "results.json")
    assert context["ceilings_when"]["busy"] is busy
    assert "(1.0 h before this run)" in context["ceilings_when"]["text"]  # measured 07:00, the run at 08:00


# ----------------------------------------------------------------------------- noxfile and README promises

def _sessions() -> dict[str, ast.FunctionDef]:
    tree = ast.parse((REPO / "noxfile.py").read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(
                "session" in ast.unparse(d) for d in node.decorator_list):
            out[node.name] = node
    return out


def test_every_nox_session_has_a_docstring_and_forwards_posargs():
    sessions = _sessions()
    assert {"test", "lint", "validate", "bench", "compare", "report", "matrix"} <= set(sessions)
    for name, fn in sessions.items():
        assert ast.get_docstring(fn), f"nox session {name} has no docstring"
        assert "session.posargs" in ast.unparse(fn), f"nox session {name} drops the arguments after --"


def test_report_and_lint_sessions_never_install_torch():
    sessions = _sessions()
    for name in ("report", "lint"):
        body = ast.unparse(sessions[name])
        assert "_shared" not in body and "TORCH" not in body, f"nox session {name} sets up torch"
    assert "--no-deps" in ast.unparse(sessions["report"])  # the harness without its torch dependency
    text = (REPO / "pyproject.toml").read_text()
    report_extra = re.search(r"^report = \[(.*)\]$", text, re.M).group(1)
    assert "torch" not in report_extra and "triton" not in report_extra


def test_spec_reference_lists_every_expression_function():
    spec_doc = (REPO / "docs" / "spec.md").read_text()
    sentence = spec_doc[spec_doc.index("Expressions are plain arithmetic"):].split("\n\n", 1)[0]
    listed = set(re.findall(r"`(\w+)\(`", sentence)) | set(re.findall(r"`(\w+)`", sentence))
    assert set(FUNCTIONS) <= listed, f"docs/spec.md misses {sorted(set(FUNCTIONS) - listed)}"


README_MAX_LINES = 170  # a five-minute read; the reference lives in docs/, one page per topic


def test_readme_stays_short():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)  # a '# comment' in code is no heading
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


def _md_links(path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]


def test_readme_links_every_docs_page_it_names_and_they_exist():
    readme = REPO / "README.md"
    links = _md_links(readme)
    assert any(t.startswith("docs/") for t in links), "README.md links no page under docs/"
    for target in links:
        path = (readme.parent / target.split("#")[0]).resolve()
        assert path.exists(), f"README.md links {target}, which does not exist"
    for page in ("spec", "checks", "timing", "gate", "ci", "profiling", "interpreter", "architectures"):
        assert f"docs/{page}.md" in links, f"README.md does not link docs/{page}.md"


@pytest.mark.parametrize("page", ["README.md", *sorted(p.name for p in (REPO / "docs").glob("*.md"))])
def test_relative_markdown_links_resolve(page):
    """Every relative link in the README and docs/ names a file that exists and, with #anchor, one of its
    headings: a page moved or a heading renamed breaks no reader's link."""
    path = REPO / page if page == "README.md" else REPO / "docs" / page
    for target in _md_links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{page}: link {target}: no such file"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page}: link {target}: {dest.name} has no heading #{anchor}"


def _readme_commands() -> list[list[str]]:
    """The README's commands: every line of its bash blocks and every inline `nox -s ...` / `python -m ...`."""
    readme = (REPO / "README.md").read_text()
    lines = [ln for block in re.findall(r"^```bash\n(.*?)^```", readme, re.M | re.S) for ln in block.splitlines()]
    lines += re.findall(r"`((?:nox -s|python -m) [^`]+)`", readme)
    return [shlex.split(ln, comments=True) for ln in lines if shlex.split(ln, comments=True)]


def _harness_parser():
    from harness.cli.main import _load_plugins
    from harness.cli.registry import COMMANDS

    _load_plugins()
    parser = argparse.ArgumentParser(prog="python -m harness", exit_on_error=False)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_fn, add, _help) in COMMANDS.items():
        add(sub.add_parser(name, exit_on_error=False))
    return parser


def _pytest_options() -> set[str]:
    source = "".join(p.read_text() for p in (REPO / "harness" / "plugin").glob("*.py"))
    return set(re.findall(r"addoption\(\s*\"(--[\w-]+)\"", source)) | {"-x", "-q", "-k"}


HARNESS_SESSIONS = {"bench", "validate", "compare", "matrix", "profile", "report", "new"}  # = python -m harness NAME


def test_readme_commands_name_real_sessions_commands_and_options():
    """CI runs the README's quickstart (.ci/run); this checks every command it shows, the GPU ones included,
    against the noxfile and the harness's own argument parser, so a renamed option breaks here first."""
    sessions, parser, pytest_options = set(_sessions()), _harness_parser(), _pytest_options()
    commands = _readme_commands()
    assert ["nox", "-s", "test"] in commands and ["nox", "-s", "bench"] in commands
    for argv in commands:
        if argv[:2] == ["pip", "install"]:
            continue
        if argv[:2] == ["nox", "-s"]:
            assert argv[2] in sessions, f"README: nox has no session {argv[2]!r}"
            rest = argv[4:] if argv[3:4] == ["--"] else argv[3:]
            harness_cmd = argv[2] if argv[2] in HARNESS_SESSIONS else None
            pytest_args = rest if argv[2] == "test" else None
        elif argv[:3] == ["python", "-m", "harness"]:
            harness_cmd, rest, pytest_args = argv[3], argv[4:], None
        elif argv[:3] == ["python", "-m", "pytest"]:
            harness_cmd, pytest_args = None, argv[3:]
        else:
            pytest.fail(f"README shows a command this test does not know: {shlex.join(argv)}")
        if harness_cmd:
            try:
                parser.parse_args([harness_cmd, *rest])
            except (argparse.ArgumentError, SystemExit) as exc:
                pytest.fail(f"README: {shlex.join(argv)}: the harness rejects it: {exc}")
        for arg in pytest_args or ():
            if arg.startswith("-"):
                assert arg.split("=")[0] in pytest_options, f"README: {shlex.join(argv)}: no pytest option {arg}"


# ----------------------------------------------------------------------------- distribution plots

def test_a_slow_reference_does_not_squash_the_candidates_box():
    pytest.importorskip("matplotlib")
    import numpy as np
    from matplotlib.figure import Figure

    from harness.report.plots import _dist_figure

    rng = np.random.default_rng(0)
    base = next(c for c in synthetic_results().cases if c.status == "ok")
    cases = []
    for provider, role, median in (("reference", "baseline", 2000.0), ("triton", "candidate", 10.0)):
        samples = tuple(float(v) for v in median * (1 + 0.02 * rng.standard_normal(200)))
        q25, q50, q75 = np.percentile(samples, [25, 50, 75])
        cases.append(dataclasses.replace(base, provider=provider, role=role, samples_us=samples,
                                         stats={**base.stats, "median": float(q50)}))
    fig = _dist_figure(Figure, "k", cases, {"reference": "C0", "triton": "C1"})
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[0].startswith("triton *")  # the candidate first
    lo, hi = ax.get_ylim()
    box = ax.patches[0].get_path().get_extents()  # the candidate's box, p25 to p75
    assert box.height / (hi - lo) > 0.2, "the candidate's box is squashed"


@pytest.mark.parametrize("start, end, busy", [
    # an idle H200 before the probes: low clock, no utilisation; after them: the probes' own 99% at full clock
    ({"gpu_util_pct": 0, "sm_clock_mhz": 345, "sm_clock_max_mhz": 1980, "other_processes": []},
     {"gpu_util_pct": 99, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "other_processes": []}, False),
    ({"gpu_util_pct": 60, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "other_processes": []},
     {"gpu_util_pct": 99, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "other_processes": []}, True),
    ({"gpu_util_pct": 0, "sm_clock_mhz": 345, "sm_clock_max_mhz": 1980, "other_processes": [4242]},
     {"gpu_util_pct": 99, "sm_clock_mhz": 1980, "sm_clock_max_mhz": 1980, "other_processes": []}, True),
    ({"gpu_util_pct": 0, "sm_clock_mhz": 345, "sm_clock_max_mhz": 1980, "other_processes": []},
     {"gpu_util_pct": 99, "sm_clock_mhz": 1100, "sm_clock_max_mhz": 1980, "other_processes": []}, True),
    # the H200 run of examples/liger: the matmul probe drew 680 of 700 W, the clock held at 1380 by the power cap
    # (NVML reason 0x4) and nothing else: the card's own limit, which every kernel of that intensity meets
    ({"gpu_util_pct": 0, "sm_clock_mhz": 345, "sm_clock_max_mhz": 1980, "clock_event_reasons": "0x1"},
     {"gpu_util_pct": 95, "sm_clock_mhz": 1380, "sm_clock_max_mhz": 1980, "clock_event_reasons": "0x4"}, False),
    ({"gpu_util_pct": 0, "sm_clock_mhz": 345, "sm_clock_max_mhz": 1980, "clock_event_reasons": "0x1"},
     {"gpu_util_pct": 95, "sm_clock_mhz": 1380, "sm_clock_max_mhz": 1980, "clock_event_reasons": "0x44"}, True),
])
def test_ceiling_load_warning_tells_the_probes_own_load_from_anothers(start, end, busy):
    from harness.report.ceilings import ceilings_when
    from tests.e2e import synthetic_results

    results = synthetic_results()
    results = dataclasses.replace(results, ceilings={**results.ceilings, "conditions": {"start": start, "end": end}})
    assert ceilings_when(results)["busy"] is busy


def test_a_waived_baseline_is_not_benchmarked_and_says_why():
    from harness.bench.plan import plan
    from harness.target.device import detect

    spec = load_spec(REPO / "specs" / "matmul.toml")  # waives its fp32 reference and torch.compile of it
    jobs, _, waivers = plan([spec], detect())
    assert {"triton_tma", "torch"} <= {j.provider.name for j in jobs}
    assert not {"reference", "torch.compile"} & {j.provider.name for j in jobs}
    said = {w.what: w.reason for w in waivers if w.kernel == "matmul"}
    assert said["provider torch.compile not benchmarked"] == spec.waivers["bench.torch.compile"]
    assert said["provider reference not benchmarked"].startswith("the reference is an fp32 GEMM")


def test_a_case_too_large_for_the_machine_is_skipped_not_a_crash():
    """A CPU bench caps its address space, so a shape that needs more memory than the machine has fails its
    allocation, which is read as "does not fit" (a skip), instead of the OOM killer ending the whole run: the
    README's `nox -s bench` was killed at flash_attention's headline on a 24 GB machine before this."""
    from harness.bench.run import out_of_memory

    assert out_of_memory(MemoryError()) and out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate"))
    assert not out_of_memory(RuntimeError("shape mismatch")) and not out_of_memory(ValueError("out of memory"))
    code = (
        "import torch\n"
        "from harness.bench.run import cap_address_space, out_of_memory\n"
        "avail = next(int(l.split()[1]) * 1024 for l in open('/proc/meminfo') if l.startswith('MemAvailable:'))\n"
        "assert cap_address_space(0.05)\n"
        "try:\n"
        "    torch.empty(avail // 2, dtype=torch.uint8)\n"
        "    print('allocated')\n"
        "except Exception as e:\n"
        "    print('oom' if out_of_memory(e) else f'other {type(e).__name__}: {e}')\n"
        "x = torch.ones(1 << 20)\n"  # small allocations still work under the cap
        "print(int(x.sum()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["oom", str(1 << 20)], out.stdout
