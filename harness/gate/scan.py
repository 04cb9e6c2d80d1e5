"""A static scan of a pull request's kernel modules: what in them could fool the timing or the checks.

Read with ``ast``, never imported (the deciding process imports no pull-request code). Each finding names
the file, the line and the statement with its names resolved through the module's imports and simple
aliases (``import time as t; t.perf_counter = f`` reads ``time.perf_counter = ...``). It lists, as
KernelBench's static checker does (src/kernelbench/kernel_static_checker.py: streams, threads, lazy tensor
subclasses, timing monkey patches), and beyond its regular expressions:

- monkeypatch: an assignment to, deletion of, or ``setattr`` on an attribute of anything imported
  (``torch.cuda.Event.elapsed_time = ...``, ``harness.timing.sampler.time = ...``);
- interpreter: edits of ``sys.modules``, ``builtins``, import hooks and ``sys.path``, tracing and audit hooks;
- environment: ``os.environ`` edits, which libraries and the harness read;
- stream, thread, timer: CUDA streams and graphs, threads and processes, clocks and timing events;
- native, dynamic, introspection: ctypes and compiled extensions, code built at run time (exec, eval,
  importlib), and reaching other code's frames or objects (``sys._getframe``, ``gc.get_objects``);
- tensor subclass: ``torch.Tensor`` subclasses and torch function/dispatch modes.

A finding is not a verdict: some are honest (a launcher that picks a stream). The report lists each, marks
the ones the base's same module has too, and the reviewer reads them; the run-time checks
(harness/gate/integrity.py, the re-check of timed outputs, the roofline) are what fail a case.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from harness.gate.model import Finding

CATEGORIES = {
    "monkeypatch": "assigns to, deletes or setattr()s an attribute of an imported module or object",
    "interpreter": "edits sys.modules, builtins, import hooks or sys.path, or sets a trace or audit hook",
    "environment": "edits os.environ",
    "stream": "creates or switches CUDA streams, or captures CUDA graphs",
    "thread": "starts threads or processes",
    "timer": "reads a clock or a timing event",
    "native": "loads native code (ctypes, cffi, a compiled extension)",
    "dynamic": "runs code built at run time (exec, eval, importlib)",
    "introspection": "reaches other code's frames or objects",
    "tensor subclass": "defines a tensor subclass or a torch function / dispatch mode",
    "unparsed": "could not be parsed, so nothing in it was scanned",
}

# Resolved names (a call, or a reference to call later) -> category. A key ending in "." matches a prefix.
NAMES = {
    **dict.fromkeys(("torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream", "torch.cuda.set_stream",
                     "torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.graphs.", "torch.cuda.streams.",
                     "torch.Stream", "torch.cuda.make_graphed_callables"), "stream"),
    **dict.fromkeys(("threading.Thread", "threading.Timer", "_thread.", "multiprocessing.", "concurrent.futures.",
                     "subprocess.", "os.fork", "os.forkpty", "os.posix_spawn", "os.posix_spawnp", "os.system",
                     "os.popen", "asyncio.", "signal.signal", "signal.setitimer", "signal.alarm"), "thread"),
    **dict.fromkeys(("time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.monotonic_ns", "time.time",
                     "time.time_ns", "time.process_time", "time.process_time_ns", "time.thread_time",
                     "time.thread_time_ns", "time.clock_gettime", "time.clock_gettime_ns", "torch.cuda.Event",
                     "torch.cuda.events.", "torch.Event", "torch.cuda.Event.elapsed_time", "torch.profiler.",
                     "torch.autograd.profiler.", "timeit."), "timer"),
    **dict.fromkeys(("ctypes.", "cffi.", "torch.ops.load_library", "torch.utils.cpp_extension.",
                     "torch.classes.load_library"), "native"),
    **dict.fromkeys(("exec", "eval", "compile", "__import__", "importlib.import_module", "importlib.reload",
                     "importlib.util.", "importlib.machinery.", "runpy.", "marshal.loads", "pickle.loads",
                     "types.FunctionType", "types.CodeType"), "dynamic"),
    **dict.fromkeys(("sys._getframe", "sys._current_frames", "inspect.currentframe", "inspect.stack",
                     "inspect.getouterframes", "inspect.getmembers", "gc.get_objects", "gc.get_referrers",
                     "gc.get_referents"), "introspection"),
    **dict.fromkeys(("sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile", "sys.addaudithook",
                     "sys.monitoring.", "sys.setswitchinterval", "builtins.", "sys.modules", "sys.meta_path",
                     "sys.path_hooks", "sys.path_importer_cache", "sys.path.insert", "sys.path.append",
                     "sys.path.extend", "importlib.invalidate_caches"), "interpreter"),
    **dict.fromkeys(("os.environ", "os.putenv", "os.unsetenv"), "environment"),
    **dict.fromkeys(("torch.overrides.TorchFunctionMode", "torch.utils._python_dispatch.TorchDispatchMode",
                     "torch.Tensor._make_subclass", "torch._C._disabled_torch_function_impl"), "tensor subclass"),
}
# Module imports that are findings by themselves (what they are for has no honest use in a kernel module).
IMPORTS = {"ctypes": "native", "cffi": "native", "_thread": "thread", "multiprocessing": "thread",
           "subprocess": "thread", "concurrent.futures": "thread", "gc": "introspection", "marshal": "dynamic"}
# Method names that are findings on any receiver.
METHODS = {"wait_stream": "stream", "record_stream": "stream", "elapsed_time": "timer", "_make_subclass":
           "tensor subclass", "__setattr__": "monkeypatch", "__delattr__": "monkeypatch"}
MUTATORS = {"update", "pop", "setdefault", "clear", "popitem", "__setitem__", "__delitem__", "insert", "append",
            "extend", "remove"}
TENSOR_BASES = ("torch.Tensor", "torch._C.TensorBase", "torch._C._TensorBase", "torch.nn.Parameter")
DUNDERS = {"__torch_function__": "tensor subclass", "__torch_dispatch__": "tensor subclass"}
_TREE_PREFIX = re.compile(r"^kh_(?:base|pr)_[0-9a-f]{12}\.")
MAX_FINDINGS_PER_FILE = 200
_REFERENCED = ("timer", "stream", "thread", "introspection", "native", "dynamic")  # findings when only named


def _category(name: str) -> str | None:
    if name in NAMES and not name.endswith("."):
        return NAMES[name]
    for key, cat in NAMES.items():
        if (key.endswith(".") and name.startswith(key)) or name.startswith(key + "."):
            return cat
    return None


class _Module:
    """One module's import table and aliases, and the findings of one pass over it."""

    def __init__(self, tree: ast.Module, package: str):
        self.names: dict[str, str] = {}
        self.package = package
        self.found: list[tuple[int, str, str]] = []
        self._imports(tree)

    def _imports(self, tree: ast.Module) -> None:
        nodes = sorted((n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom, ast.Assign))),
                       key=lambda n: (n.lineno, n.col_offset))
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    full = _TREE_PREFIX.sub("", a.name)
                    self.names[a.asname or full.split(".")[0]] = full if a.asname else full.split(".")[0]
                    if full in IMPORTS or full.split(".")[0] in IMPORTS:
                        self.add(node, IMPORTS.get(full) or IMPORTS[full.split(".")[0]], f"import {full}")
            elif isinstance(node, ast.ImportFrom):
                source = _TREE_PREFIX.sub("", node.module or "")
                if node.level:
                    base = self.package.split(".")[: max(0, len(self.package.split(".")) - node.level + 1)]
                    source = ".".join([*base, *([source] if source else [])])
                if source in IMPORTS or source.split(".")[0] in IMPORTS:
                    self.add(node, IMPORTS.get(source) or IMPORTS[source.split(".")[0]], f"from {source} import ...")
                for a in node.names:
                    if a.name != "*":
                        full = f"{source}.{a.name}" if source else a.name
                        self.names[a.asname or a.name] = full
                        if _category(full) in _REFERENCED:  # from time import perf_counter: a clock, by name
                            self.add(node, _category(full), full)
            elif len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):  # x = torch.cuda: an alias
                value = self.resolve(node.value)
                if value is not None:
                    self.names[node.targets[0].id] = value

    def resolve(self, node) -> str | None:
        """``a.b.c`` with ``a`` an imported name (or alias) as its full dotted name; None otherwise."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            root = self.names.get(node.id)
            if root is None and node.id in ("exec", "eval", "compile", "__import__", "setattr", "delattr",
                                            "__builtins__", "globals", "vars"):
                root = node.id
            if root is not None:
                return ".".join([root, *reversed(parts)])
        return None

    def add(self, node, category: str, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), category, what[:200]))

    def scan(self, tree: ast.Module) -> None:
        # An attribute read is reported once, at its outermost name, and not at all when it is what a call calls.
        skip = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        skip |= {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    self._target(node, t, "del" if isinstance(node, ast.Delete) else "=")
            elif isinstance(node, ast.Call):
                self._call(node)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and id(node) not in skip:
                name = self.resolve(node)
                cat = _category(name) if name else None
                if cat in _REFERENCED:
                    self.add(node, cat, name)
            elif isinstance(node, ast.ClassDef):
                self._class(node)

    def _target(self, node, target, op: str) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._target(node, t, op)
            return
        if isinstance(target, ast.Name) and target.id == "__builtins__":
            self.add(node, "interpreter", f"__builtins__ {op} ...")
        elif isinstance(target, ast.Attribute):
            name = self.resolve(target)
            if name is not None:
                cat = "interpreter" if _category(name) == "interpreter" else "monkeypatch"
                self.add(node, cat, f"del {name}" if op == "del" else f"{name} {op} ...")
        elif isinstance(target, ast.Subscript):
            name = self.resolve(target.value)
            if name is not None:
                cat = _category(name) if _category(name) in ("interpreter", "environment") else "monkeypatch"
                self.add(node, cat, f"{name}[...] {op} ..." if op != "del" else f"del {name}[...]")

    def _call(self, node: ast.Call) -> None:
        func = node.func
        name = self.resolve(func)
        if name in ("setattr", "delattr", "builtins.setattr", "builtins.delattr", "object.__setattr__") and node.args:
            owner = self.resolve(node.args[0])
            if owner is not None:
                attr = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else "?"
                cat = "interpreter" if _category(owner) == "interpreter" else "monkeypatch"
                self.add(node, cat, f"{name.split('.')[-1]}({owner}, {attr!r}, ...)")
            return
        cat = _category(name) if name is not None else None
        if cat in ("interpreter", "environment"):  # reading sys.modules or os.environ is no finding; editing is
            owner = self.resolve(func.value) if isinstance(func, ast.Attribute) else None
            edits = isinstance(func, ast.Attribute) and func.attr in MUTATORS and owner is not None
            if name in NAMES or edits:
                self.add(node, cat, f"{name}(...)")
            return
        if cat is not None:
            self.add(node, cat, f"{name}(...)")
        elif isinstance(func, ast.Attribute) and func.attr in METHODS:
            self.add(node, METHODS[func.attr], f"....{func.attr}(...)")

    def _class(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            name = self.resolve(base)
            if name in TENSOR_BASES or (name and _category(name) == "tensor subclass"):
                self.add(node, "tensor subclass", f"class {node.name}({name})")
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in DUNDERS:
                self.add(item, DUNDERS[item.name], f"{node.name}.{item.name}")


def scan_source(source: bytes | str, path: str, package: str = "") -> list[Finding]:
    """The findings of one module's source (``path`` for the report; ``package``: its dotted package, for
    relative imports)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        return [Finding(path, getattr(exc, "lineno", 0) or 0, "unparsed", f"{type(exc).__name__}: {exc}"[:200], False)]
    m = _Module(tree, package)
    m.scan(tree)
    rows = sorted(set(m.found))[:MAX_FINDINGS_PER_FILE]
    return [Finding(path, line, cat, what, False) for line, cat, what in rows]


def scan_folders(folders: dict[str, Path]) -> list[Finding]:
    """Every ``*.py`` below each folder (keyed by its package, ``kernels`` or ``liger_kernel.ops``), with paths
    shown as ``<package path>/<file>``."""
    out = []
    for package, folder in sorted(folders.items()):
        folder = Path(folder)
        if not folder.is_dir():
            continue
        for p in sorted(folder.rglob("*.py")):
            if "__pycache__" in p.parts:
                continue
            rel = p.relative_to(folder)
            dotted = ".".join([package, *rel.parent.parts]) if package else ".".join(rel.parent.parts)
            out += scan_source(p.read_bytes(), "/".join([*package.split("."), *rel.parts]), dotted)
    return out


def compare_scans(pr: list[Finding], base: list[Finding]) -> tuple[Finding, ...]:
    """The pull request's findings, each marked ``in_base`` while the base's same file has as many of the same
    (category, statement): moved lines stay old, a new copy of an old pattern is new."""
    left = Counter((f.path, f.category, f.what) for f in base)
    out = []
    for f in pr:
        key = (f.path, f.category, f.what)
        old = left[key] > 0
        left[key] -= old
        out.append(Finding(f.path, f.line, f.category, f.what, old))
    return tuple(out)
