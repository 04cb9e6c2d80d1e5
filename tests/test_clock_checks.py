"""Kernels that fool the clock are caught by the generated check that names them (harness/correctness/calls.py):
result replay, a cache keyed by data pointer and outputs written on the first call only by ``stale`` (on a CPU
too); a side stream by ``stream`` and a host sync in the launcher by ``graph`` (CUDA only, skipped here with
the reason). The correct kernel passes all three."""

from __future__ import annotations

import pytest
import torch

from harness.correctness.args import case_seed
from harness.correctness.checks import CaseContext, CheckFailure, run_checks
from harness.spec.imports import resolve_import
from harness.target.device import detect
from tests.e2e import write_spec

PLANTED = "tests.planted.clock_kernels:"
GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _run(tmp_path, impl: str, dtype: str = "fp32"):
    from harness.spec.load import load

    spec = load(write_spec(tmp_path, "scale", impl))
    device = detect()
    case = spec.cases["ci"][0]
    ctx = CaseContext(spec, "triton", dtype, case, case_seed(spec, dtype, case), device.arch, device.torch_device)
    return run_checks(ctx, resolve_import(impl), resolve_import(spec.reference))


@pytest.mark.parametrize("impl", ["scale_replays", "scale_cached_by_pointer", "scale_first_call_only"])
def test_stale_results_are_caught_by_the_stale_check(tmp_path, impl):
    with pytest.raises(CheckFailure) as exc:
        _run(tmp_path, PLANTED + impl)
    assert exc.value.check == "stale", str(exc.value)
    assert "a second call on the same buffers, with new values written into its inputs" in str(exc.value)


def test_the_correct_kernel_passes_every_call_check(tmp_path):
    outcome = _run(tmp_path, "tests.planted.broken_kernels:scale")
    assert "stale" in outcome.checks
    if torch.cuda.is_available():
        assert {"stream", "graph"} <= set(outcome.checks)
    else:
        assert "stream: needs a CUDA device (skipped on cpu)" in outcome.notes


@GPU
def test_a_side_stream_is_caught_by_the_stream_check(tmp_path):
    with pytest.raises(CheckFailure) as exc:
        _run(tmp_path, PLANTED + "scale_side_stream")
    assert exc.value.check == "stream" and "did not run on the caller's stream" in str(exc.value)


@GPU
def test_a_host_sync_is_caught_by_the_graph_check(tmp_path):
    with pytest.raises(CheckFailure) as exc:
        _run(tmp_path, PLANTED + "scale_host_sync")
    assert exc.value.check == "graph" and "cannot be captured in a CUDA graph" in str(exc.value)


def test_graph_is_waivable_and_stale_and_stream_are_not(tmp_path):
    from harness.spec.checks import BY_NAME

    assert BY_NAME["graph"].waivable and not BY_NAME["stale"].waivable and not BY_NAME["stream"].waivable
