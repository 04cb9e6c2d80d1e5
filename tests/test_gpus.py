"""``--gpus N|all``: one pytest-xdist worker per GPU, each seeing its one GPU through CUDA_VISIBLE_DEVICES from
its first import on; every report names the GPU that ran it (--junitxml, the summary, a failure's reproduce
line); a bad value is a one-line usage error.

On this CPU machine the GPUs are the ones CUDA_VISIBLE_DEVICES names (torch sees none, and the kernels run on
the interpreter): the distributing and the bookkeeping are what is tested here. The H200 x2 run is the one
that puts two cards under it.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from harness.plugin.gpus import choose
from tests.e2e import REPO, write_spec

# Each item writes down the CUDA_VISIBLE_DEVICES it saw and whether torch had been imported by then with
# some other value (it must not have been: the env is set before the worker imports anything).
SEES = """
import json, os, pytest

@pytest.mark.parametrize("i", range(24))
def test_item(i, tmp_path_factory):
    root = tmp_path_factory.getbasetemp().parent.parent
    with open(root / "seen.jsonl", "a") as f:
        f.write(json.dumps({"item": i, "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            "worker": os.environ.get("PYTEST_XDIST_WORKER")}) + "\\n")
"""


def test_all_or_a_count_picks_the_first_visible_gpus():
    assert choose("all", ["4", "5", "6"]) == ["4", "5", "6"]
    assert choose("2", ["4", "5", "6"]) == ["4", "5"]
    for text, visible, says in (("3", ["0", "1"], "only 2 GPU(s) visible (0, 1)"), ("0", ["0"], "expected a number"),
                                ("two", ["0"], "expected a number"), ("all", [], "no GPU is visible")):
        with pytest.raises(pytest.UsageError, match=re.escape(says)):
            choose(text, visible)


def _junit_gpus(path) -> dict[str, str]:
    out = {}
    for case in ET.parse(path).iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        out[case.get("name")] = props.get("gpu")
    return out


def test_each_worker_sees_one_gpu_and_the_reports_say_which(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makepyfile(test_sees=SEES)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gpus", "all", "--junitxml", "j.xml")
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    seen = [json.loads(line) for line in (pytester.path / "seen.jsonl").read_text().splitlines()]
    assert sorted(s["item"] for s in seen) == list(range(24))  # each item once
    by_worker = {}
    for s in seen:
        by_worker.setdefault(s["worker"], set()).add(s["gpu"])
    # two workers, each pinned to one GPU of its own, together the two the runner was given
    assert sorted(by_worker) == ["gw0", "gw1"] and all(len(g) == 1 for g in by_worker.values()), by_worker
    assert set().union(*by_worker.values()) == {"3", "5"}
    junit = _junit_gpus(pytester.path / "j.xml")
    for s in seen:
        assert junit[f"test_item[{s['item']}]"].startswith(f"GPU {s['gpu']} ("), (s, junit)
    counts = dict(re.findall(r"^GPU (\d) \(.*\): (\d+) items", out, re.M))
    assert sorted(counts) == ["3", "5"] and sum(map(int, counts.values())) == 24, out[-2000:]
    assert "one pytest-xdist worker per GPU: 3, 5" in out


@pytest.mark.slow
def test_a_failing_generated_item_reproduces_on_its_own_gpu(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    specs = pytester.path / "specs"
    specs.mkdir()
    write_spec(specs, "scale_bad", "tests.planted.broken_kernels:scale_off_by_one")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--specs", "specs", "--gpus", "2",
                                           "--dtype", "fp32", "--no-isolate", "-k", "not opcheck and not compile",
                                           "--junitxml", "j.xml")
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    junit = _junit_gpus(pytester.path / "j.xml")
    failed = re.findall(r"^reproduce: CUDA_VISIBLE_DEVICES=(\d) python -m pytest '[^']*::(\S+)'", out, re.M)
    assert failed, out[-3000:]
    for gpu, name in failed:  # the card named in the reproduce line is the card that ran it
        assert junit[name].startswith(f"GPU {gpu} ("), (name, gpu, junit[name])


@pytest.mark.parametrize("args, says", [(("--gpus", "3"), "--gpus 3: only 2 GPU(s) visible (0, 1)"),
                                        (("--gpus", "2", "-n", "2"), "give --gpus or -n/--tx, not both")])
def test_a_bad_gpus_value_is_a_usage_error(pytester, monkeypatch, args, says):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    pytester.makepyfile(test_one="def test_one():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert says in result.stderr.str()
