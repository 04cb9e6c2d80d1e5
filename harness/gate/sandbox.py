"""A clean environment for each job that runs pull-request code on a GPU runner, and its end (docs/ci.md).

A self-hosted runner's host outlives its jobs, so whatever one job leaves where the next one looks is an attack
on the next job: a ``.pth`` file in the user site runs in every Python of the user, a compiled kernel in the
Triton cache is loaded instead of a fresh build, a build in ``TORCH_EXTENSIONS_DIR`` is reused by name, a
background process keeps running. So each job gets, under ``$RUNNER_TEMP``, fresh folders for everything a
tool caches per user (``HOME``, ``XDG_*``, ``TRITON_*``, ``TORCH_EXTENSIONS_DIR``, Inductor's and CUDA's
caches, ``TMPDIR``), ``PYTHONNOUSERSITE=1``, and a venv over the runner's Python (for its CUDA build of torch)
that must not be writable by the job's user; every process of the job is killed at its end.

Run by the workflows with the runner's own ``python3`` before any venv exists, so it imports nothing but the
standard library and runs as a script: ``python3 harness/gate/sandbox.py setup|run|cleanup``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Folders below the job's root, and the variables that point there.
DIRS = {"HOME": "home", "XDG_CACHE_HOME": "cache", "XDG_CONFIG_HOME": "config", "XDG_DATA_HOME": "data",
        "XDG_STATE_HOME": "state", "TMPDIR": "tmp", "TRITON_HOME": "triton", "TRITON_CACHE_DIR": "triton/cache",
        "TORCH_EXTENSIONS_DIR": "torch-extensions", "TORCHINDUCTOR_CACHE_DIR": "cache/inductor",
        "CUDA_CACHE_PATH": "cache/nv", "MPLCONFIGDIR": "cache/matplotlib"}
# Set, or emptied: a job's step cannot unset a variable, and an empty one means "not set" to these tools.
FIXED = {"PYTHONNOUSERSITE": "1", "PIP_NO_CACHE_DIR": "1", "PIP_CONFIG_FILE": os.devnull, "PYTHONPATH": "",
         "PYTHONSTARTUP": "", "PYTHONUSERBASE": "", "PYTHONHOME": "", "LD_PRELOAD": "", "TRITON_OVERRIDE_DIR": "",
         "TRITON_KERNEL_OVERRIDE": "", "TRITON_DUMP_DIR": ""}
TAG = "KH_JOB_TAG"        # every process of the job inherits it: the cleanup finds them by it
RUNNER_PROGRAMS = ("Runner.Listener", "Runner.Worker", "RunnerService.js")


class SandboxError(Exception):
    """A one-line reason the job must not go on (exit 2)."""


def clean_env(base: Mapping[str, str], root: Path, tag: str) -> dict[str, str]:
    """``base`` with every per-user cache and config moved below ``root`` (the job's own folder)."""
    env = dict(base)
    env.update({k: str(root / sub) for k, sub in DIRS.items()})
    env.update(FIXED)
    env[TAG] = tag
    env["KH_PYTHON"] = str(root / "venv" / "bin" / "python")
    return env


def env_lines(env: Mapping[str, str], base: Mapping[str, str]) -> list[str]:
    """``NAME=value`` lines for ``$GITHUB_ENV``: what the clean environment sets or changes."""
    keys = sorted(k for k in env if base.get(k) != env[k] or k in FIXED or k in DIRS)
    bad = [k for k in keys if "\n" in env[k] or "\r" in env[k]]
    if bad:
        raise SandboxError(f"{bad[0]}: a value with a newline cannot go to $GITHUB_ENV")
    return [f"{k}={env[k]}" for k in keys]


def probe(python: str, env: Mapping[str, str] | None = None, *, isolated: bool = False) -> dict:
    """What an interpreter sees: its prefix, site folders, whether the user site is on, its sys.path.
    ``isolated``: with ``-I``, so that the runner's Python is asked before anything of the user's can run."""
    code = ("import json, site, sys; print(json.dumps({'prefix': sys.prefix, 'base_prefix': sys.base_prefix, "
            "'site': site.getsitepackages(), 'user_site': site.ENABLE_USER_SITE, 'path': sys.path, "
            "'user_dir': site.getuserbase()}))")
    proc = subprocess.run([python, *(["-I"] if isolated else []), "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    if proc.returncode != 0:
        raise SandboxError(f"{python}: cannot run ({proc.stderr.strip()[-200:]})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def writable(paths) -> list[str]:
    """The paths of ``paths`` that exist and that this user may write: a job could change them for the next."""
    return [str(p) for p in paths if os.path.exists(p) and os.access(p, os.W_OK)]


def leaks(seen: dict, user_dir: str) -> list[str]:
    """Why an interpreter, run in the clean environment, could still load something a job left behind in the
    runner user's own user-site folder ``user_dir`` (``~/.local``)."""
    problems = ["the user site is enabled"] if seen.get("user_site") else []
    user_dir = os.path.realpath(user_dir)
    problems += [f"sys.path has {p}, in the runner user's {user_dir}" for p in seen.get("path", ())
                 if p and (os.path.realpath(p) + os.sep).startswith(user_dir + os.sep)]
    return problems


def setup(root: Path, python: str, *, allow_writable: bool = False, base: Mapping[str, str] | None = None
          ) -> dict[str, str]:
    """Make the job's folders afresh and its venv; return the clean environment. ``python``: the runner's
    interpreter with CUDA torch; ``allow_writable``: for tests on a machine whose Python is the user's own."""
    base = dict(os.environ if base is None else base)
    runner = probe(python, base, isolated=True)
    if not allow_writable:
        bad = writable([runner["base_prefix"], runner["prefix"], *runner["site"]])
        if bad:
            raise SandboxError(f"{bad[0]}: the runner's Python is writable by this user, so a job could change it "
                               "for the next one (install it as another user: docs/ci.md)")
    if root.exists():
        shutil.rmtree(root)
    env = clean_env(base, root, secrets.token_hex(16))
    for k in DIRS:
        Path(env[k]).mkdir(parents=True, exist_ok=True, mode=0o700)
    venv = root / "venv"
    subprocess.run([python, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   env=env)
    # When the runner's python3 is itself a venv, --system-site-packages reaches only its base interpreter:
    # listing its own site folders keeps its torch seen. Never its user site.
    purelib = probe(env["KH_PYTHON"], env)["site"][0]
    (Path(purelib) / "runner.pth").write_text("\n".join(runner["site"]) + "\n", encoding="utf-8")
    problems = leaks(probe(env["KH_PYTHON"], env), runner["user_dir"])
    if problems:
        raise SandboxError(f"{env['KH_PYTHON']}: {problems[0]}")
    return env


# ----------------------------------------------------------------------------- the runner's own hook

TRUSTED_EVENTS = ("pull_request_target", "issue_comment", "schedule", "workflow_dispatch", "push")


def admit(env: Mapping[str, str], allowed: list[str]) -> str:
    """"" when the runner may take this job, else why not. The runner's job-started hook
    (``ACTIONS_RUNNER_HOOK_JOB_STARTED``, set by the runner's administrator, outside any repository) calls it
    with the workflows allowed on the runner (``owner/repo/.github/workflows/gpu.yml@refs/heads/main``): a
    job of a workflow from a pull request's own copy (``@refs/pull/N/merge``), or of a ``pull_request``
    event, is refused before its first step."""
    event, ref = env.get("GITHUB_EVENT_NAME", ""), env.get("GITHUB_WORKFLOW_REF", "")
    if event not in TRUSTED_EVENTS:
        return f"event {event or '(none)'}: a self-hosted GPU runner takes only {', '.join(TRUSTED_EVENTS)}"
    if ref not in allowed:
        return f"workflow {ref or '(none)'} is not one this runner allows ({', '.join(allowed) or 'none'})"
    return ""


# ----------------------------------------------------------------------------- the end of the job

@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    uid: int
    name: str
    tagged: bool      # its environment holds this job's tag


def processes(tag: str) -> list[Proc]:
    """Every process /proc shows, with whether its environment carries ``KH_JOB_TAG=tag``."""
    out, needle = [], f"{TAG}={tag}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            name = (d / "comm").read_text().strip()
            uid = (d / "status").stat().st_uid
            try:
                tagged = needle in (d / "environ").read_bytes().split(b"\0")
            except OSError:
                tagged = False
            out.append(Proc(int(d.name), int(fields[1]), uid, name, tagged))
        except (OSError, IndexError, ValueError):
            continue  # it ended while we looked
    return out


def ancestors(procs: list[Proc], pid: int) -> set[int]:
    parent = {p.pid: p.ppid for p in procs}
    seen = set()
    while pid and pid not in seen:
        seen.add(pid)
        pid = parent.get(pid, 0)
    return seen


def victims(procs: list[Proc], me: int, uid: int, *, all_of_user: bool) -> list[int]:
    """The processes to kill: the job's (tagged), and with ``all_of_user`` every other process of ``uid``
    (a runner's dedicated user: a process that dropped the tag is still found), never this process, its
    ancestors (the runner that runs the cleanup) or a runner program."""
    if all_of_user and uid == 0:
        raise SandboxError("cleanup --all-of-user as root would kill the machine's processes: refused")
    spared = ancestors(procs, me)
    return sorted(p.pid for p in procs if p.pid not in spared and p.name not in RUNNER_PROGRAMS
                  and (p.tagged or (all_of_user and p.uid == uid)))


def cleanup(root: Path | None, tag: str, *, all_of_user: bool = False) -> list[int]:
    """Kill the job's processes (twice: a process may fork while we look), then delete its folder."""
    killed: list[int] = []
    for _ in range(2):
        for pid in victims(processes(tag), os.getpid(), os.getuid(), all_of_user=all_of_user):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
    if root is not None and root.exists():
        shutil.rmtree(root, ignore_errors=True)
    return sorted(set(killed))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="sandbox.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("setup", help="fresh job folders and venv; the environment to $GITHUB_ENV")
    s.add_argument("--root", required=True, type=Path, help="the job's folder (under $RUNNER_TEMP)")
    s.add_argument("--python", default="python3", help="the runner's interpreter (default python3)")
    s.add_argument("--github-env", help="append NAME=value lines here ($GITHUB_ENV)")
    s.add_argument("--allow-writable-python", action="store_true", help="tests only: a user-owned Python")
    r = sub.add_parser("run", help="set up, then run a command in the clean environment (tests, dry runs)")
    r.add_argument("--root", required=True, type=Path)
    r.add_argument("--python", default="python3")
    r.add_argument("--allow-writable-python", action="store_true")
    r.add_argument("command", nargs=argparse.REMAINDER)
    c = sub.add_parser("cleanup", help="kill every process of the job, delete its folder")
    c.add_argument("--root", type=Path)
    c.add_argument("--tag", default=os.environ.get(TAG, ""))
    c.add_argument("--all-of-user", action="store_true", help="also every other process of this (runner) user")
    a = sub.add_parser("admit", help="the runner's job-started hook: refuse a job no allowed workflow sent")
    a.add_argument("--allow", action="append", default=[], metavar="OWNER/REPO/.github/workflows/F.yml@REF")
    args = p.parse_args(argv)
    try:
        if args.cmd == "admit":
            why = admit(os.environ, args.allow)
            print(f"sandbox: {'refused: ' + why if why else 'job admitted'}", file=sys.stderr if why else sys.stdout)
            return 1 if why else 0
        if args.cmd == "cleanup":
            if not args.tag and not args.all_of_user:
                raise SandboxError(f"cleanup: no --tag and no ${TAG}: nothing identifies the job's processes")
            killed = cleanup(args.root, args.tag or "-", all_of_user=args.all_of_user)
            print(f"sandbox: killed {len(killed)} process(es) of the job" + (f": {killed}" if killed else ""))
            return 0
        env = setup(args.root, args.python, allow_writable=args.allow_writable_python)
        if args.cmd == "setup":
            if args.github_env:
                with open(args.github_env, "a", encoding="utf-8") as f:
                    f.write("\n".join(env_lines(env, os.environ)) + "\n")
            print(f"sandbox: clean environment under {args.root} (HOME, caches, venv {env['KH_PYTHON']})")
            return 0
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            raise SandboxError("run: no command")
        return subprocess.run(command, env=env).returncode
    except (SandboxError, subprocess.CalledProcessError) as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
