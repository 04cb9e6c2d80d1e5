"""The package's shape is enforced: every module imports alone, no import cycles, packages import downward only."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import harness

ROOT = Path(harness.__file__).resolve().parent
# A package may import only the packages named here (and the root modules: harness, harness.importpath).
# The order follows docs/architecture.md: interpreter and spec at the bottom, cli at the top.
ALLOWED = {
    "interpreter": set(),  # the Triton interpreter's compatibility layer: below everything, imports nothing
    "spec": {"interpreter"},  # spec.imports installs it where it sets TRITON_INTERPRET=1
    "workers": set(),
    "target": {"spec"},
    "timing": {"target", "spec"},
    "correctness": {"spec", "target", "workers"},
    "distributed": {"spec", "target", "correctness", "timing", "workers"},
    "results": {"spec"},
    "report": {"results", "spec"},
    "aot": {"spec", "target"},
    "bench": {"spec", "target", "correctness", "timing", "results", "workers", "report", "distributed"},
    "gate": {"spec", "target", "correctness", "timing", "results", "workers", "bench", "report"},
    "plugin": {"spec", "target", "correctness", "timing", "results", "workers", "bench", "distributed"},
    "profile": {"spec", "target", "correctness", "timing", "results", "bench"},
    "cli": {"spec", "target", "correctness", "timing", "results", "workers", "bench", "gate", "report", "aot",
            "profile"},
}
ROOT_MODULES = {"harness", "harness.importpath", "harness.steps", "harness.config", "harness.__main__"}


def modules() -> dict[str, Path]:
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = ("harness",) + p.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts).removesuffix(".__init__")
        out[name] = p
    return out


def import_edges() -> dict[str, set[str]]:
    """module -> harness modules it imports, at the top or inside functions (a lazy import is still an edge)."""
    mods = modules()
    edges = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("harness"):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    edges[m].add(sub if sub in mods else node.module)
            elif isinstance(node, ast.Import):
                edges[m] |= {a.name for a in node.names if a.name in mods}
    for m in edges:
        edges[m] = (edges[m] & set(mods)) - {m}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each one an import cycle."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def package(module: str) -> str:
    return module.split(".")[1] if module.count(".") >= 1 and module not in ROOT_MODULES else module


def test_cycle_finder_finds_a_planted_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert cycles(import_edges()) == []


def test_packages_import_downward_only():
    bad = []
    for m, targets in import_edges().items():
        src = package(m)
        if src in ROOT_MODULES:
            continue
        for t in sorted(targets):
            dst = package(t)
            if dst != src and dst not in ROOT_MODULES and dst not in ALLOWED.get(src, set()):
                bad.append(f"{m} imports {t} ({src} may import only {sorted(ALLOWED.get(src, ()))})")
    assert bad == []


def test_every_package_is_in_the_layering():
    packages = {package(m) for m in modules()} - ROOT_MODULES
    assert packages <= set(ALLOWED), f"add {sorted(packages - set(ALLOWED))} to ALLOWED (and docs/architecture.md)"


# Each module is imported with no other harness module loaded: an import that works only after another module
# was imported (a hidden cycle, a missing import) fails here even when the whole test session imports fine. One
# interpreter serves them all, dropping every harness module between imports; a fresh interpreter per module
# cost a torch import each (100 s of CI for 160 modules), and third-party modules cannot hide a harness mistake.
IMPORT_ALONE = """
import json, sys, traceback
failures = {}
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "harness" or m.startswith("harness.")]:
        del sys.modules[loaded]
    try:
        __import__(name)
    except BaseException:
        failures[name] = traceback.format_exc()[-2000:]
print(json.dumps(failures))
"""
IMPORTED = sorted(set(modules()) - {"harness.__main__"})  # __main__ runs the CLI


@pytest.fixture(scope="module")
def import_failures() -> dict[str, str]:
    proc = subprocess.run([sys.executable, "-c", IMPORT_ALONE, *IMPORTED], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", IMPORTED)
def test_module_imports_alone(module, import_failures):
    assert module not in import_failures, f"import {module} failed:\n{import_failures[module]}"


def test_importing_alone_catches_a_module_that_needs_another_imported_first(tmp_path):
    """The check itself: a module that uses a sibling it never imports passes after the sibling, fails alone."""
    pkg = tmp_path / "harness"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import harness.b\n")
    (pkg / "needs_b.py").write_text("import harness\nharness.b.VALUE\n")  # works only once harness.b is loaded
    (pkg / "b.py").write_text("VALUE = 1\n")
    proc = subprocess.run([sys.executable, "-c", IMPORT_ALONE, "harness.a", "harness.needs_b"], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert list(json.loads(proc.stdout.strip().splitlines()[-1])) == ["harness.needs_b"], proc.stdout + proc.stderr


def test_public_api_resolves():
    for name in harness.__all__:
        assert getattr(harness, name) is not None, name
