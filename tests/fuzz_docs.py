"""Document surgery shared by the property-based tests: walking nested dicts/lists by key path."""

from __future__ import annotations


def walk(node, path=()):
    """Every (key path, value) below ``node``, depth first."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + (k,), v
            yield from walk(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield path + (i,), v
            yield from walk(v, path + (i,))


def get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def parent(doc, path):
    return get(doc, path[:-1])


def tables(doc) -> list[tuple]:
    """Key paths of every table (dict), the root included."""
    return [()] + [p for p, v in walk(doc) if isinstance(v, dict)]
