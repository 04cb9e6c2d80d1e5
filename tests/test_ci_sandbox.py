"""harness.gate.sandbox: the clean environment of a GPU job (its variables, its venv, the checks of the
runner's Python), the cleanup's choice of processes, the runner hook's admission; the hostile jobs that run
for real are tests/redteam/test_dispatch_*.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.gate import sandbox as sb

if not sys.platform.startswith("linux"):
    pytest.skip("the sandbox reads /proc", allow_module_level=True)


def test_clean_env_moves_every_per_user_cache_below_the_job_root(tmp_path):
    env = sb.clean_env({"HOME": "/home/runner", "PYTHONPATH": "/evil", "PATH": "/usr/bin"}, tmp_path, "t")
    for key in ("HOME", "XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TRITON_HOME", "TORCH_EXTENSIONS_DIR", "TMPDIR",
                "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH"):
        assert Path(env[key]).is_relative_to(tmp_path), key
    assert env["PYTHONNOUSERSITE"] == "1" and env["PYTHONPATH"] == "" and env["PATH"] == "/usr/bin"
    lines = sb.env_lines(env, {"PATH": "/usr/bin"})
    assert f"HOME={tmp_path}/home" in lines and "PYTHONNOUSERSITE=1" in lines
    assert not any(x.startswith("PATH=") for x in lines)
    with pytest.raises(sb.SandboxError, match="newline"):
        sb.env_lines({**env, "HOME": "a\nEVIL=1"}, {})


def test_writable_and_leaks(tmp_path):
    assert sb.writable([tmp_path, tmp_path / "missing"]) == [str(tmp_path)]
    user = tmp_path / ".local"
    seen = {"user_site": True, "path": [str(user / "lib/python3.11/site-packages"), "/usr/lib/python3"]}
    problems = sb.leaks(seen, str(user))
    assert problems[0] == "the user site is enabled" and "site-packages" in problems[1] and len(problems) == 2
    assert sb.leaks({"user_site": False, "path": ["/usr/lib/python3"]}, str(user)) == []


def test_setup_refuses_a_writable_runner_python(tmp_path):
    if os.access(sys.base_prefix, os.W_OK):
        with pytest.raises(sb.SandboxError, match="writable by this user"):
            sb.setup(tmp_path / "job", sys.executable)
    else:
        pytest.skip("this machine's Python is not writable by this user")


def test_setup_makes_fresh_folders_and_a_venv_that_sees_the_runner_s_packages(tmp_path):
    job = tmp_path / "job"
    (job / "home").mkdir(parents=True)
    (job / "home" / "left-over").write_text("from the last job")
    env = sb.setup(job, sys.executable, allow_writable=True)
    assert not (job / "home" / "left-over").exists() and Path(env["TRITON_CACHE_DIR"]).is_dir()
    code = "import pytest, site, sys; print(site.ENABLE_USER_SITE, sys.prefix)"
    out = subprocess.run([env["KH_PYTHON"], "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", str(job / "venv")]


def _procs(*rows):
    return [sb.Proc(pid, ppid, uid, name, tagged) for pid, ppid, uid, name, tagged in rows]


def test_victims_are_the_job_s_processes_never_the_runner():
    procs = _procs((1, 0, 0, "systemd", False), (10, 1, 1000, "Runner.Listener", False),
                   (11, 10, 1000, "Runner.Worker", False), (12, 11, 1000, "bash", True),    # the cleanup step
                   (13, 12, 1000, "python3", True),                                           # the cleanup itself
                   (20, 1, 1000, "sleep", True),                                              # a daemon of the job
                   (21, 1, 1000, "miner", False),                                             # dropped the tag
                   (30, 1, 1001, "other", True))                                              # another user's
    assert sb.victims(procs, 13, 1000, all_of_user=False) == [20, 30]
    assert sb.victims(procs, 13, 1000, all_of_user=True) == [20, 21, 30]
    with pytest.raises(sb.SandboxError, match="as root"):
        sb.victims(procs, 13, 0, all_of_user=True)


def test_cleanup_kills_a_daemon_of_the_job_and_deletes_its_folder(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    tag = "test-" + os.urandom(8).hex()
    # a daemon: double fork, new session, so it is neither a child nor in the job's process group
    spawn = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
             "        open(os.environ['PIDFILE'], 'w').write(str(os.getpid())); time.sleep(300)\n")
    pidfile = tmp_path / "pid"
    subprocess.run([sys.executable, "-c", spawn], env={**os.environ, sb.TAG: tag, "PIDFILE": str(pidfile)},
                   check=True)
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    assert Path(f"/proc/{pid}").exists()
    killed = sb.cleanup(job, tag)
    assert pid in killed and not job.exists()
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"process {pid} survived the cleanup")


@pytest.mark.parametrize("event,ref,admitted", [
    ("pull_request_target", "o/r/.github/workflows/gpu.yml@refs/heads/main", True),
    ("issue_comment", "o/r/.github/workflows/gpu.yml@refs/heads/main", True),
    ("pull_request", "o/r/.github/workflows/gpu.yml@refs/pull/7/merge", False),    # a pull request's own copy
    ("pull_request_target", "o/r/.github/workflows/evil.yml@refs/heads/main", False),
    ("workflow_dispatch", "o/r/.github/workflows/gpu.yml@refs/heads/topic", False),  # a branch's copy
])
def test_the_runner_hook_admits_only_the_trusted_workflow(event, ref, admitted):
    why = sb.admit({"GITHUB_EVENT_NAME": event, "GITHUB_WORKFLOW_REF": ref},
                   ["o/r/.github/workflows/gpu.yml@refs/heads/main"])
    assert (why == "") is admitted, why


def test_the_script_runs_alone_with_the_standard_library(tmp_path):
    script = Path(sb.__file__)
    env = {"PATH": os.environ["PATH"], sb.TAG: "nothing-has-this-tag"}
    out = subprocess.run([sys.executable, "-I", str(script), "cleanup"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "killed 0 process" in out.stdout
    refused = subprocess.run([sys.executable, "-I", str(script), "admit", "--allow", "o/r/x.yml@refs/heads/main"],
                             env={"PATH": os.environ["PATH"], "GITHUB_EVENT_NAME": "pull_request"},
                             capture_output=True, text=True)
    assert refused.returncode == 1 and "refused" in refused.stderr
