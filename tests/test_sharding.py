"""``--shard i/n``: n runners of a CI matrix cover every selected item exactly once, the same split every run,
after the other selections (--kernel, -k); a bad value is a one-line usage error."""

from __future__ import annotations

import re

import pytest

from harness.plugin.sharding import Shard
from tests.e2e import REPO, write_spec

MANY = """
import pytest

@pytest.mark.parametrize("i", range(60))
def test_item(i):
    pass
"""


def _ran(pytester, *args: str, subprocess: bool = False) -> set[str]:
    run = pytester.runpytest_subprocess if subprocess else pytester.runpytest_inprocess
    result = run("-p", "no:cacheprovider", "-rA", *args)
    assert result.ret in (0, 5), result.stdout.str()[-2000:]  # 5: a shard that kept nothing
    return set(re.findall(r"^PASSED (\S+)", result.stdout.str(), flags=re.M))


def test_the_shards_partition_the_items_and_each_run_splits_alike(pytester):
    pytester.makepyfile(test_many=MANY)
    everything = _ran(pytester)
    assert len(everything) == 60
    shards = [_ran(pytester, "--shard", f"{i}/3") for i in range(1, 4)]
    assert set().union(*shards) == everything
    assert sum(map(len, shards)) == len(everything)  # disjoint: no item runs twice
    assert all(10 <= len(s) <= 30 for s in shards), [len(s) for s in shards]  # a hash splits evenly enough
    # the same split again, and an item's shard is its own: one more item collected moves none of the others
    pytester.makepyfile(test_more="def test_extra():\n    pass\n")
    again = _ran(pytester, "--shard", "2/3")
    assert again - {"test_more.py::test_extra"} == shards[1]


def test_the_shards_split_what_the_other_selections_left(pytester):
    pytester.makepyfile(test_many=MANY)
    chosen = _ran(pytester, "-k", "i1 or i2")  # test_item[1], [2], [10]-[29]
    shards = [_ran(pytester, "-k", "i1 or i2", "--shard", f"{i}/2") for i in (1, 2)]
    assert set().union(*shards) == chosen and sum(map(len, shards)) == len(chosen)


@pytest.mark.slow
def test_generated_kernel_items_shard_with_kernel_selection(pytester, monkeypatch):
    # a subprocess each: a second in-process run of generated items brought a pytest-xdist worker down
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    specs = pytester.path / "specs"
    specs.mkdir()
    write_spec(specs, "scale", "tests.planted.broken_kernels:scale")
    write_spec(specs, "other", "tests.planted.broken_kernels:scale")
    # the op items register a torch library, which a second in-process run cannot: the case items suffice
    base = ("--specs", "specs", "--kernel", "scale", "--dtype", "fp32", "--no-isolate",
            "-k", "not opcheck and not compile")
    chosen = _ran(pytester, *base, subprocess=True)
    assert chosen and all(n.startswith("specs/scale.toml::") for n in chosen), chosen
    shards = [_ran(pytester, *base, "--shard", f"{i}/2", subprocess=True) for i in (1, 2)]
    assert shards[0] | shards[1] == chosen and not shards[0] & shards[1]


@pytest.mark.parametrize("bad", ["0/4", "5/4", "2", "a/b", "1/0", "-1/3"])
def test_a_bad_shard_is_a_one_line_usage_error(pytester, bad):
    pytester.makepyfile(test_many=MANY)
    result = pytester.runpytest_inprocess(f"--shard={bad}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--shard {bad}: expected i/n with 1 <= i <= n" in result.stderr.str()


def test_the_split_is_a_function_of_the_item_id_alone():
    ids = [f"specs/k.toml::k[triton-fp32-n={n}]" for n in range(200)]
    owners = [[i for i in range(1, 5) if Shard(i, 4).holds(x)] for x in ids]
    assert all(len(o) == 1 for o in owners)  # each id in exactly one shard
    assert owners == [[i for i in range(1, 5) if Shard(i, 4).holds(x)] for x in reversed(ids)][::-1]
