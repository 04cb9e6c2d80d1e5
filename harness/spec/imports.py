"""Resolving a spec's ``module:function`` import paths, and whether a module is importable."""

from __future__ import annotations

import importlib.util
import os

from harness.importpath import resolve


def use_interpreter_if_no_gpu() -> None:
    """Set TRITON_INTERPRET=1 before any kernel module is imported when there is no GPU, and then (also where
    the caller set it) install the harness's compatibility layer over the interpreter (harness.interpreter)."""
    if "TRITON_INTERPRET" not in os.environ:
        try:
            import torch
        except ModuleNotFoundError:  # no torch, no GPU: the kernel import that follows says what is missing
            return
        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"
    if os.environ.get("TRITON_INTERPRET") == "1":
        from harness.interpreter import install

        install()


def module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def resolve_import(path: str):
    """``"pkg.mod:attr"`` -> the object, with the Triton interpreter switched on first where there is no GPU."""
    use_interpreter_if_no_gpu()
    return resolve(path)
