"""The interpreter layer (harness/interpreter) under Triton releases other than the running one, each in its
release environment (harness.aot.toolchains): what a release lacks is recorded, and what the layer corrects
works there. The releases come from the release cache, installed the first time (a skip, with pip's reason,
where that cannot be)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.aot import toolchains
from harness.steps import BadInput

REPO = Path(__file__).resolve().parents[1]

RUN = """
import json
from harness.spec.imports import use_interpreter_if_no_gpu
use_interpreter_if_no_gpu()
import harness.interpreter as layer
import torch
import triton
from tests.planted.toolchain_kernels import loop_copy
x = torch.arange(1000, dtype=torch.float32)
out = torch.full_like(x, float("nan"))
try:
    loop_copy(x=x, out=out)
    result = "equal" if torch.equal(out, x) else "different"
except Exception as exc:
    result = f"{type(exc).__name__}: {exc}"
print(json.dumps({"triton": triton.__version__, "result": result,
                  "skipped": [f"{p.gap}: {p.target}" for p in layer.report() if not p.applied]}))
"""


def _release(version: str) -> toolchains.Overlay:
    try:
        return toolchains.ensure(toolchains.Release("triton", version), toolchains.cache_root())
    except BadInput as exc:
        pytest.skip(f"triton {version} is not installable here: {exc}")


def _run(overlay: toolchains.Overlay, raw: bool = False) -> dict:
    env = toolchains.child_env([overlay])
    env.update(TRITON_INTERPRET="1", KH_INTERPRETER_COMPAT="0" if raw else "1")  # interpreted on a GPU machine too
    proc = subprocess.run([sys.executable, "-c", RUN], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("version", ["3.5", "3.6.0"])
def test_a_loop_to_a_runtime_bound_runs_under_releases_whose_interpreter_cannot(version):
    overlay = _release(version)
    raw, fixed = _run(overlay, raw=True), _run(overlay)
    assert raw["triton"] == fixed["triton"] == overlay.version
    assert "only 0-dimensional arrays can be converted to Python scalars" in raw["result"], raw
    assert fixed["result"] == "equal", fixed


@pytest.mark.slow
def test_before_3_6_the_libdevice_binding_is_recorded_as_missing_not_crashed():
    got = _run(_release("3.5"))
    assert got["skipped"] == ["libdevice: triton.runtime.interpreter._patch_lang"], got
    assert _run(_release("3.6.0"))["skipped"] == []
