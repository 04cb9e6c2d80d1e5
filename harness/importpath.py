"""Resolving ``"package.module:attr.sub"`` import paths: the one resolver for specs and worker tasks.

A root module with no harness imports, so every package may use it (spec validation, worker processes).
"""

from __future__ import annotations

import importlib


def resolve(path: str):
    """The object at ``path``; raises ModuleNotFoundError / AttributeError / ValueError with a short message."""
    module, sep, attr = path.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"not an import path: {path!r} (expected package.module:function)")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj
