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


def structural_mutation(data, doc, op: str, keys, values) -> bool:
    """Apply one of the mutations both fuzz suites share (delete, add, retype, rename, empty) to ``doc`` in
    place, drawing keys and values from the given strategies; False when ``op`` is not one of them."""
    from hypothesis import strategies as st

    paths = [p for p, _ in walk(doc)]
    if op == "delete" and paths:
        path = data.draw(st.sampled_from(paths))
        del parent(doc, path)[path[-1]]
    elif op == "add":
        table = get(doc, data.draw(st.sampled_from(tables(doc))))
        table[data.draw(keys)] = data.draw(values)
    elif op == "retype" and paths:
        path = data.draw(st.sampled_from(paths))
        parent(doc, path)[path[-1]] = data.draw(values)
    elif op == "rename":
        candidates = [p for p in tables(doc) if get(doc, p)]
        if candidates:
            table = get(doc, data.draw(st.sampled_from(candidates)))
            old, new = data.draw(st.sampled_from(list(table))), data.draw(keys)
            table[new] = table.pop(old)
    elif op == "empty":
        containers = [p for p, v in walk(doc) if isinstance(v, (dict, list))]
        if containers:
            get(doc, data.draw(st.sampled_from(containers))).clear()
    else:
        return False
    return True
