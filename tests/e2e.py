"""Helpers of the end-to-end tests: spec files from the planted-kernel template tests/specs/scale.toml, and
whether a process is still alive."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "tests" / "specs" / "scale.toml"


def write_spec(directory: Path, name: str, impl: str, *, timeout: float | None = None, extra: str = "",
               layouts: str = '["padded", "strided", "transposed"]') -> Path:
    text = TEMPLATE.read_text()
    for old, new in (('name = "scale"', f'name = "{name}"'), ("{impl}", impl), ("{layouts}", layouts)):
        assert old in text, f"{TEMPLATE} changed: no {old!r}"
        text = text.replace(old, new)
    if timeout is not None:
        text = text.replace('fallback = ["triton", "reference"]', f'fallback = ["triton", "reference"]\n'
                                                                   f"timeout = {timeout}")
    path = directory / f"{name}.toml"
    path.write_text(text + extra)
    return path


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
