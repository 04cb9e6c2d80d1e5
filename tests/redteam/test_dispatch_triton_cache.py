"""Attack: a pull request's code poisons the Triton cache (and Torch's extension and Inductor caches) on a GPU
runner, so that the next job loads its compiled kernel instead of building the one it tests.

Played for real on this machine with two jobs in a row, each set up as the workflow sets it up
(harness/gate/sandbox.py setup, then cleanup): job 1 writes a poisoned entry where Triton says its cache is,
and also into the runner user's own ``~/.triton/cache``, Torch's extensions folder and Inductor's; job 2 asks
Triton, Torch and Inductor where their caches are and looks for the poison.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.gate import sandbox as sb

if not sys.platform.startswith("linux"):
    pytest.skip("the sandbox is for Linux runners", allow_module_level=True)

WHERE = """
import json, os
from triton import knobs
import torch.utils.cpp_extension as ext
from torch._inductor.runtime.cache_dir_utils import cache_dir
found = {"triton": knobs.cache.dir, "extensions": ext._get_build_directory("poisoned_op", False),
         "inductor": cache_dir()}
print(json.dumps(found))
"""
# job 1's pull-request code: an entry in each cache it can find, and in the runner user's own ~/.triton
POISON = WHERE + """
import pathlib
for d in [*found.values(), os.path.join(os.environ["RUNNER_HOME"], ".triton", "cache")]:
    p = pathlib.Path(d) / "0123456789abcdef"
    p.mkdir(parents=True, exist_ok=True)
    (p / "kernel.json").write_text('{"poisoned": true}')
"""


def _where(env: dict) -> dict:
    out = subprocess.run([env["KH_PYTHON"], "-c", WHERE], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_a_poisoned_cache_never_reaches_the_next_job(tmp_path):
    runner_home = tmp_path / "runner-home"
    runner_home.mkdir()
    base = {**{k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TRITON", "TORCH"))},
            "HOME": str(runner_home), "RUNNER_HOME": str(runner_home)}
    root = tmp_path / "runner-temp" / "kh-job"

    job1 = sb.setup(root, sys.executable, allow_writable=True, base=base)
    first = _where(job1)
    for path in first.values():
        assert Path(path).is_relative_to(root), path  # every cache of the job is below the job's own folder
    poison = subprocess.run([job1["KH_PYTHON"], "-c", POISON], env=job1, capture_output=True, text=True, timeout=300)
    assert poison.returncode == 0, poison.stderr[-2000:]
    assert (Path(first["triton"]) / "0123456789abcdef" / "kernel.json").exists()  # the attack did write
    assert (runner_home / ".triton" / "cache" / "0123456789abcdef").exists()
    sb.cleanup(root, job1[sb.TAG])

    job2 = sb.setup(root, sys.executable, allow_writable=True, base=base)
    second = _where(job2)
    for name, path in second.items():
        entry = Path(path) / "0123456789abcdef"
        assert not entry.exists(), f"{name} cache of the next job holds the poison: {entry}"
        assert not Path(path).is_relative_to(runner_home), (name, path)
    assert job2[sb.TAG] != job1[sb.TAG]
    print(f"REDTEAM triton-cache: no effect: the next job's Triton cache {second['triton']} is new and empty; the "
          f"poison in the job's folder was deleted and the one in {runner_home}/.triton is never read")
