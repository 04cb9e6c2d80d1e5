"""How a failing generated item reports: a crash's traceback trimmed to the kernel's own frames (whole with
--tb=long), and the one command that reproduces the item. Shared by the kernel-case and the op items."""

from __future__ import annotations

from pathlib import Path

from harness.plugin.gpus import gpu_of
from harness.plugin.options import KEY as _KEY

_HARNESS = str(Path(__file__).resolve().parents[1])


def kernel_frames(frames: tuple) -> tuple:
    """The frames of the code under test: not the harness's, not an installed package's (torch, triton), so a
    crash reads as the kernel's line; the innermost frame stays when nothing else would."""
    mine = tuple(f for f in frames if not f.filename.startswith(_HARNESS) and "-packages" not in f.filename)
    return mine or frames[-1:]


def _format(frames) -> str:
    import traceback

    return "".join(traceback.format_list(list(frames))).rstrip()


def crash_text(item, exc: BaseException, frames: tuple, head: str = "") -> str:
    """A crash as every generated item reports one: the error's line, the kernel's frames (every frame with
    --tb=long) and the command that reproduces it."""
    whole = item.config.getoption("tbstyle", "auto") == "long"
    shown = frames if whole else kernel_frames(frames)
    what = "traceback" if whole else "traceback, the kernel's frames (--tb=long for all)"
    return f"{head}{exc}\n{what}:\n{_format(shown)}\n{reproduce(item)}"


def reproduce(item) -> str:
    """The one command that runs this item again with the same inputs."""
    opts = item.config.stash[_KEY]
    extra = f" --tier {opts['tier']}" if opts["tier"] != "ci" else ""
    seed = f" --seed {opts['seed']}" if opts["seed"] else ""
    gpu = gpu_of(item.config)  # under --gpus: the card it failed on, which may be the card's fault
    on = f"CUDA_VISIBLE_DEVICES={gpu} " if gpu is not None else ""
    return f"reproduce: {on}python -m pytest '{item.nodeid}'{extra}{seed}"
