"""Gap: ``@triton.autotune`` under the interpreter.

With more than one config the autotuner benchmarks them, and its benchmarker comes from the active driver:
interpreted there is none (``0 active drivers ([]). There should only be one.``), and a ``perf_model`` that asks
the driver for device properties fails the same way. Timing interpreted runs would pick nothing meaningful
anyway. Here the autotuner runs as compiled, pruning included, with a benchmarker that ranks the configs in
their declared order, so the first config that survives pruning is the one used:

- ``KH_INTERPRETER_AUTOTUNE=first`` (the default): no config is timed or run before the real launch.
- ``KH_INTERPRETER_AUTOTUNE=all``: as a first compiled call does, each config runs once per tuning key through
  the autotuner's own benchmark path (``reset_to_zero``/``restore_value`` hooks included), so a config that
  crashes or reads out of bounds fails here; then the first config runs the launch whose results count.
"""

from __future__ import annotations

import itertools
import os

from harness.interpreter._core import Patch, replace

GAP = "autotune"
ENV = "KH_INTERPRETER_AUTOTUNE"
MODES = ("first", "all")


def install() -> list[Patch]:
    from triton.runtime import autotuner

    return [replace(GAP, autotuner.Autotuner, "run", _run, where="Autotuner")]


def mode() -> str:
    value = os.environ.get(ENV, "first").strip().lower() or "first"
    if value not in MODES:
        raise ValueError(f"{ENV}={value!r}: expected one of {', '.join(MODES)}")
    return value


def _no_driver(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError) and "active drivers" in str(exc)


def _run(original):
    def run(self, *args, **kwargs):
        from triton import knobs

        if not knobs.runtime.interpret or len(self.configs) <= 1:
            return original(self, *args, **kwargs)
        execute = mode() == "all"
        rank = itertools.count()

        def bench(kernel_call, quantiles=None, **_):  # declared order wins; "all" runs each config once
            if execute:
                kernel_call()
            t = float(next(rank))
            return [t, t, t]

        def prune(kw):
            try:
                return type(self).prune_configs(self, kw)
            except RuntimeError as exc:  # a perf_model asking the (absent) driver: rank them all
                if not _no_driver(exc):
                    raise
                return self.configs

        saved = {k: self.__dict__[k] for k in ("do_bench", "prune_configs") if k in self.__dict__}
        self.__dict__.update(do_bench=bench, prune_configs=prune)
        try:
            return original(self, *args, **kwargs)
        finally:
            for k in ("do_bench", "prune_configs"):
                self.__dict__.pop(k, None)
            self.__dict__.update(saved)

    return run
