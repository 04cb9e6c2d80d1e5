"""Resolving a spec's ``module:function`` import paths, and whether a module is importable."""

from __future__ import annotations

import importlib.util
import os

from harness.importpath import resolve


def use_interpreter_if_no_gpu() -> None:
    """Set TRITON_INTERPRET=1 before any kernel module is imported when there is no GPU."""
    if "TRITON_INTERPRET" in os.environ:
        return
    try:
        import torch
    except ModuleNotFoundError:  # no torch, no GPU: the kernel import that follows says what is missing
        return

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def resolve_import(path: str):
    """``"pkg.mod:attr"`` -> the object, with the Triton interpreter switched on first where there is no GPU."""
    use_interpreter_if_no_gpu()
    return resolve(path)
