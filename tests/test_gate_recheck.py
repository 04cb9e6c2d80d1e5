"""The re-check of timed calls with new input values (harness.bench.recheck.ProbedCheck), on the CPU's host
sampler: a launcher honest during the checks that then replays a result kept per buffer fails as ``timed
outputs``; an honest one passes and finds its inputs as they were; the gate's interleaved blocks check and undo
a probe before the other side runs, even when every sample of a block was dropped."""

from __future__ import annotations

import functools

import pytest
import torch

from harness.bench.recheck import ProbedCheck
from harness.correctness.args import clone_args, make_args, reference_args
from harness.correctness.checks import TimedCheck
from harness.correctness.registry import CheckFailure
from harness.spec.imports import resolve_import
from harness.timing.engine import TimingConfig, measure
from tests.e2e import make_spec


def honest(*, x, w, out):
    out.copy_(x * w * 2.0)


def cached_after(calls: int):
    """Honest for ``calls`` calls, then the result kept for these buffers (the first call's, here)."""
    kept, seen = {}, [0]

    def fn(*, x, w, out):
        seen[0] += 1
        key = (x.data_ptr(), w.data_ptr(), out.data_ptr())
        if seen[0] > calls and key in kept:
            out.copy_(kept[key])
            return
        out.copy_(x * w * 2.0)
        kept.setdefault(key, out.clone())
    return fn


def _check(tmp_path, seed: int = 7):
    spec = make_spec(tmp_path, "scale")
    case, dtype = spec.cases["ci"][0], "fp32"
    args = make_args(spec, case, dtype, "cpu", seed)
    ref_fn = resolve_import(spec.reference)
    ref_args = reference_args(spec, clone_args(args), dtype)
    ref_fn(**ref_args.kwargs())
    check = ProbedCheck(TimedCheck(spec, dtype, case, args, {"out": ref_args.tensors["out"]}), ref_fn, "cpu", seed)
    return spec, args, check


def _measure(fn, args, check):
    cfg = TimingConfig(min_samples=64, max_samples=64, min_time_s=0.0, max_rsd=0.0, timeout_s=30.0)
    return measure(check.wrap(functools.partial(fn, **args.kwargs())), device="cpu", config=cfg, outputs=check)


def test_honest_kernel_passes_and_its_inputs_are_restored(tmp_path):
    spec, args, check = _check(tmp_path)
    before = {t.name: args.tensors[t.name].clone() for t in spec.inputs}
    m = _measure(honest, args, check)
    assert len(m.samples_us) == 64 and check.probes >= 3
    check.verify()  # the last probe, if one is pending, is checked and undone
    assert all(torch.equal(args.tensors[n], x) for n, x in before.items())


@pytest.mark.parametrize("after", [0, 20])
def test_result_kept_per_buffer_fails_while_timed(tmp_path, after):
    _, args, check = _check(tmp_path)
    with pytest.raises(CheckFailure, match="whose inputs got new values") as info:
        _measure(cached_after(after), args, check)
    assert info.value.check == "timed outputs"


def test_without_probes_the_kept_result_passes(tmp_path):
    """What the probes add: the plain re-check of timed outputs cannot see a result kept per buffer."""
    _, args, check = _check(tmp_path)
    plain = check.check
    _measure(cached_after(20), args, plain)  # no error: poisoned outputs are overwritten with the kept result


def test_interleaved_block_undoes_a_probe_even_when_all_samples_were_dropped(tmp_path):
    from harness.gate.interleave import BlockConfig, _Timer

    spec, args, check = _check(tmp_path)
    before = args.tensors["x"].clone()

    class Dropping:
        name, late_discarded = "test", 0
        clock = type("C", (), {"max_mhz": None})()

        def warm(self, fns):
            pass

        def sample(self, fn, before_fn=None):
            before_fn()
            fn()
            return None, None  # every sample dropped, as the launch-gap guard does

    timer = _Timer(Dropping(), BlockConfig(), [])
    fn = check.wrap(functools.partial(honest, **args.kwargs()))
    assert timer.block(fn, 3, check) == []
    assert check.calls > 0 and not check.probing and torch.equal(args.tensors["x"], before)
