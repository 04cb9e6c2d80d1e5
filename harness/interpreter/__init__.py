"""The Triton interpreter as the harness runs it: a compatibility layer over ``triton.runtime.interpreter``.

Where there is no GPU the harness sets ``TRITON_INTERPRET=1`` and calls :func:`install` before any kernel is
imported (``harness.spec.imports.use_interpreter_if_no_gpu``). It patches the interpreter in place, once, where
its gaps would make real-world kernels crash or compute what no GPU computes, each in its own module:

========================  ==================================================================================
``autotune``              ``@triton.autotune`` runs (first config, or each in turn: ``KH_INTERPRETER_AUTOTUNE``)
``libdevice``             libdevice / ocml functions, in NumPy (``libdevice_numpy``)
``scalars``               Python float arguments are fp32 scalar tensors, as compiled
``indexing``              a scalar tensor used as a Python int, under NumPy 2 (Triton 3.5 and 3.6)
``reductions``            sum / scan / dot over bf16, fp16 and fp8 accumulate in fp32
``atomics``               bf16 ``atomic_add``
``casts``                 fp8 (e4m3fn, e5m2) and bf16 casts round to nearest even, with the carry
``arithmetic``            bf16 / fp8 arithmetic and comparisons on values, not bit patterns
``limits``                what cannot be corrected is an interpreter limitation, never a kernel failure
========================  ==================================================================================

Every patch checks that its target exists in the installed Triton (3.6 and 3.9 are tested); a target that is
absent is skipped and recorded (:func:`report`). ``KH_INTERPRETER_COMPAT=0`` leaves the interpreter raw. None
of it touches compilation: ``harness matrix`` compiles with Triton's real compiler, which calls none of these.
docs/interpreter.md lists each gap, what is done about it and its limits. Imports nothing of the harness.
"""

from __future__ import annotations

import os

from harness.interpreter._core import PREFIX, InterpreterLimitation, Patch, is_limitation, limitation, missing

__all__ = ["ENV", "PREFIX", "InterpreterLimitation", "Patch", "install", "installed", "is_limitation",
           "limitation", "report"]

ENV = "KH_INTERPRETER_COMPAT"
_REPORT: tuple[Patch, ...] | None = None


def install() -> tuple[Patch, ...]:
    """Patch Triton's interpreter (idempotent); the record of every hook point. Does nothing, and records
    nothing, unless ``TRITON_INTERPRET=1``: a later call, once it is set, still installs."""
    global _REPORT
    if _REPORT is not None or os.environ.get("TRITON_INTERPRET") != "1":
        return _REPORT or ()
    if os.environ.get(ENV, "1").strip() == "0":
        _REPORT = (missing("all", "harness.interpreter", f"disabled by {ENV}=0"),)
        return _REPORT
    try:
        import triton.runtime.interpreter  # noqa: F401
    except ImportError as exc:  # no Triton: the kernel import that follows says what is missing
        _REPORT = (missing("all", "triton.runtime.interpreter", f"not importable: {exc}"),)
        return _REPORT
    from harness.interpreter import (
        arithmetic,
        atomics,
        autotune,
        casts,
        indexing,
        libdevice,
        limits,
        reductions,
        scalars,
    )

    patches: list[Patch] = []
    for gap in (limits, autotune, libdevice, scalars, indexing, reductions, atomics, casts, arithmetic):
        patches += gap.install()
    _REPORT = tuple(patches)
    return _REPORT


def installed() -> bool:
    """Whether the layer is active in this process (installed, with at least one patch applied)."""
    return any(p.applied for p in report())


def report() -> tuple[Patch, ...]:
    """What :func:`install` did, one record per hook point; empty before it ran."""
    return _REPORT or ()
