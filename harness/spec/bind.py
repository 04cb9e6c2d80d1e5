"""Binding a loaded spec to its code: every import path resolves, and each implementation takes the spec's
keywords. A separate, later step from :func:`harness.spec.load.load`, which is pure (TOML to the frozen model,
validated, importing no kernel, torch or triton), so trusted code and a torch-free report can read any spec
as data; whoever runs the kernels binds first.
"""

from __future__ import annotations

import inspect
import sys

from harness.spec.imports import module_available, resolve_import
from harness.spec.model import Spec
from harness.spec.schema import Reader, SpecError, did_you_mean


def bind(spec: Spec) -> Spec:
    """``spec`` when every import path it names resolves to something callable with its keywords; else raise
    SpecError with one line per problem (``<file>: <key>: <message>``)."""
    problems = import_problems(spec)
    if problems:
        raise SpecError(problems)
    return spec


def bind_all(specs) -> tuple[list[Spec], list[str], list[str]]:
    """The specs that bind, the problems of those that do not, and what could not be checked here (an import
    path whose module needs a package this Python lacks: the environment's matter, not the spec's)."""
    bound, problems, unchecked = [], [], []
    for spec in specs:
        r = Reader(spec.path)
        _imports(r, spec, unchecked)
        problems += r.problems
        if not r.problems:
            bound.append(spec)
    return bound, problems, unchecked


def import_problems(spec: Spec) -> list[str]:
    """Every problem of ``spec``'s import paths, an unchecked one included (a run needs it to import)."""
    r, unchecked = Reader(spec.path), []
    _imports(r, spec, unchecked)
    return list(r.problems) + unchecked


def _imports(r: Reader, spec, unchecked: list[str]) -> None:
    targets = [("kernel.reference", spec.reference, ())]
    for b in spec.backends.values():
        targets += [(f"backends.{b.name}.impl", b.impl, b.requires)]
        targets += [(f"backends.{b.name}.{k}", getattr(b, k), b.requires) for k in ("source", "build") if getattr(b, k)]
    targets += [(f"peers.{p.name}.impl", p.impl, p.requires) for p in spec.peers.values()]
    targets += [("kernel.op", spec.op, ())] if spec.op else []
    targets += [("kernel.oracle", spec.oracle, ())] if spec.oracle else []
    for b in (spec.backward.backends.values() if spec.backward else ()):
        requires = (spec.backends[b.backend] if b.backend in spec.backends else spec.peers[b.backend]).requires
        targets += [(f"backward.backends.{b.backend}.{k}", getattr(b, k), requires) for k in ("autograd", "kernel")
                    if getattr(b, k)]
    for key, path, requires in targets:
        if not all(module_available(m) for m in requires):
            continue  # checked where it can run; the arch resolver reports the missing module
        try:
            obj = resolve_import(path)
        except ModuleNotFoundError as exc:
            module = path.partition(":")[0]
            if exc.name and not _is_parent(exc.name, module):
                # The kernel module exists but needs a package this Python lacks: the environment is wrong,
                # not the spec. Say so, and where to run instead.
                unchecked.append(f'{spec.path}: {key}: not checked: importing "{path}" needs module '
                                 f"{exc.name!r}, which this Python ({sys.executable}) lacks; run `nox -s validate` "
                                 "or install the project's dependencies")
            else:
                r.problem(key, f'cannot import "{path}": no module named {exc.name!r}')
            continue
        except AttributeError:
            module, _, attr = path.partition(":")
            r.problem(key, f'cannot import "{path}": module {module!r} has no attribute {attr!r}')
            continue
        except Exception as exc:  # a kernel module that fails at import: say so in one line
            first = str(exc).splitlines()[0] if str(exc) else ""
            r.problem(key, f'importing "{path}" failed: {type(exc).__name__}: {first}')
            continue
        if key == "kernel.op" and type(obj).__name__ not in _OP_TYPES:
            r.problem(key, f'"{path}" is a {type(obj).__name__}, not a torch op (an OpOverload, OpOverloadPacket or '
                           "what torch.library.custom_op returns)")
        elif key.endswith((".impl", ".reference", ".oracle", ".build", ".autograd", ".kernel")) and not callable(obj):
            r.problem(key, f'"{path}" is not callable')
        elif key.endswith((".impl", ".reference", ".oracle")):
            _signature(r, spec, key, path, obj)
        elif key.endswith(".kernel"):
            _signature(r, spec, key, path, obj, _backward_keywords(spec))


_OP_TYPES = ("OpOverload", "OpOverloadPacket", "CustomOpDef")  # by name: the spec package never imports torch


def _is_parent(name: str, module: str) -> bool:
    """True when ``name`` is ``module`` or one of its parent packages (the import path itself is wrong)."""
    return module == name or module.startswith(name + ".")


def _backward_keywords(spec) -> dict[str, str]:
    """A standalone backward's keywords, each with the spec key that makes it: the saved tensors, grad_<output>
    for each output, grad_<input> for each input that gets a gradient, and the params."""
    from harness.spec.backward import grad_name

    names = {n: f"backward.saved ({n})" for n in spec.backward.saved}
    names.update({grad_name(t.name): f"outputs.{t.name}, its gradient" for t in spec.differentiable_outputs})
    names.update({grad_name(n): f"backward.inputs ({n}), its gradient" for n in spec.backward.inputs})
    return {**names, **{n: f"params.{n}" for n in spec.params}}


def _signature(r: Reader, spec, key: str, path: str, fn, keywords: dict[str, str] | None = None) -> None:
    """Every implementation is called with each tensor and param by name: its keywords must match the spec
    (``keywords``: name -> the spec key that makes it, for a call other than the forward's)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C extension without a signature: nothing to compare
        return
    if keywords is None:
        keywords = {t.name: f"{'outputs' if t.output else 'inputs'}.{t.name}" for t in spec.tensors}
        keywords.update({n: f"params.{n}" for n in spec.params})
    names = list(keywords)
    takes_any = any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())
    by_keyword = {n for n, p in params.items()
                  if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
    where = keywords
    if not takes_any:
        for n in names:
            if n not in by_keyword:
                close = did_you_mean(n, sorted(by_keyword))
                r.problem(key, f'"{path}" has no keyword parameter "{n}" (the spec\'s {where[n]}){close}')
    for n, p in params.items():
        if p.default is not inspect.Parameter.empty or p.kind in (inspect.Parameter.VAR_POSITIONAL,
                                                                   inspect.Parameter.VAR_KEYWORD):
            continue
        if p.kind == inspect.Parameter.POSITIONAL_ONLY:
            r.problem(key, f'"{path}" has positional-only parameter "{n}": implementations are called by keyword')
        elif n not in names:
            close = did_you_mean(n, names)
            r.problem(key, f'"{path}" requires parameter "{n}", which the spec declares as no tensor or param{close}')
