"""kernel-harness: declare a kernel once, get tests, benchmarks and reports.

``__all__`` is the public API: what another repository may import from ``harness``. The names load lazily,
so ``import harness`` costs nothing (no torch) until one of them is used. Everything else is internal and may
move between releases.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> "module:attribute"
_PUBLIC = {
    "load_spec": "harness.spec.load:load",
    "load_specs": "harness.spec.load:load_all",
    "Spec": "harness.spec.model:Spec",
    "Case": "harness.spec.model:Case",
    "Tolerance": "harness.spec.model:Tolerance",
    "SpecError": "harness.spec.schema:SpecError",
    "make_args": "harness.correctness.args:make_args",
    "run_checks": "harness.correctness.checks:run_checks",
    "CaseContext": "harness.correctness.checks:CaseContext",
    "CheckFailure": "harness.correctness.checks:CheckFailure",
    "detect_device": "harness.target.device:detect",
    "resolve_backends": "harness.target.resolve:resolve",
    "measure": "harness.timing.engine:measure",
    "TimingConfig": "harness.timing.engine:TimingConfig",
    "summarize": "harness.timing.stats:summarize",
    "Results": "harness.results.model:Results",
    "CaseResult": "harness.results.model:CaseResult",
    "load_results": "harness.results.load:load_results",
    "write_results": "harness.results.io:write_results",
    "render_report": "harness.report.render:render_report",
}
__all__ = ["__version__", *sorted(_PUBLIC)]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    module, _, attr = _PUBLIC[name].partition(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
