"""Attack: a pull request's code, run on a GPU runner, drops a ``.pth`` file into the runner user's user site
(``~/.local/lib/pythonX.Y/site-packages``), so that every later Python of that user, the next job's
included, runs its line at start-up.

Played for real on this machine: a runner user's home with such a ``.pth`` (it writes a marker file and
prints a line when it runs), then the job's Python under the clean environment of harness/gate/sandbox.py
(exactly the setup the workflow runs), and, as a control, the venv the workflow made before (a
``--system-site-packages`` venv without the clean environment), in which the same file runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from harness.gate import sandbox as sb

if not sys.platform.startswith("linux"):
    pytest.skip("the sandbox is for Linux runners", allow_module_level=True)


@pytest.fixture
def poisoned_home(tmp_path):
    """A runner user's home into whose user site a previous job dropped a .pth file."""
    home = tmp_path / "runner-home"
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = home / ".local" / "lib" / ver / "site-packages"
    site.mkdir(parents=True)
    marker = tmp_path / "PWNED"
    (site / "zz-evil.pth").write_text(f"import os; print('PTH RAN'); open({str(marker)!r}, 'w').write('x')\n")
    return home, marker


def _runner_env(home: Path) -> dict:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    return {**keep, "HOME": str(home)}


def test_the_pth_runs_in_the_old_venv(poisoned_home, tmp_path):
    """The control: without the clean environment the attack works, so the test below can fail."""
    home, marker = poisoned_home
    old = tmp_path / "kh"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(old)], check=True,
                   env=_runner_env(home))
    out = subprocess.run([str(old / "bin" / "python"), "-c", "pass"], env=_runner_env(home), capture_output=True,
                         text=True)
    assert "PTH RAN" in out.stdout and marker.exists()


def test_the_pth_never_runs_in_the_clean_environment(poisoned_home, tmp_path):
    home, marker = poisoned_home
    env = sb.setup(tmp_path / "job", sys.executable, allow_writable=True, base=_runner_env(home))
    assert not marker.exists()  # not even while the sandbox probed the runner's Python
    code = ("import site, sys, json; print(json.dumps([site.ENABLE_USER_SITE, "
            "[p for p in sys.path if '.local' in p]]))")
    out = subprocess.run([env["KH_PYTHON"], "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "PTH RAN" not in out.stdout and not marker.exists()
    assert out.stdout.strip() == "[false, []]"
    # a child that PR code starts with a scrubbed environment still finds no .pth: HOME is the job's own
    scrubbed = {k: v for k, v in env.items() if k != "PYTHONNOUSERSITE"}
    again = subprocess.run([env["KH_PYTHON"], "-c", "pass"], env=scrubbed, capture_output=True, text=True)
    assert "PTH RAN" not in again.stdout and not marker.exists()
    print(f"REDTEAM user-site-pth: no effect: the job's Python ({env['KH_PYTHON']}) has the user site off and "
          f"HOME={env['HOME']}; the .pth in {home}/.local never ran")


def test_the_job_s_python_still_sees_the_runner_s_packages(tmp_path):
    """The clean environment keeps what the GPU job needs: the runner's torch (here: this venv's)."""
    env = sb.setup(tmp_path / "job", sys.executable, allow_writable=True)
    out = subprocess.run([env["KH_PYTHON"], "-c", "import torch, triton; print(torch.__file__)"], env=env,
                         capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()).is_relative_to(sysconfig.get_paths()["purelib"])
