"""Document surgery shared by the property-based tests: walking nested dicts/lists by key path, and byte
splicing (insert, delete, truncate, replace, optionally duplicate a line) for files that no longer parse."""

from __future__ import annotations

from hypothesis import strategies as st


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


def splice_bytes(draw, text: bytes, snippets, *, max_ops: int, max_insert: int, max_delete: int,
                 duplicate_lines: bool = False) -> bytes:
    """1..max_ops byte edits of `text` at random offsets, drawn with `draw`; snippets are the format's tokens."""
    buf = bytearray(text)
    ops = ["insert", "delete", "truncate"] + (["duplicate"] if duplicate_lines else []) + ["replace"]
    for _ in range(draw(st.integers(1, max_ops))):
        i = draw(st.integers(0, len(buf)))
        op = draw(st.sampled_from(ops))
        if op == "insert":
            buf[i:i] = draw(st.one_of(st.sampled_from(snippets), st.binary(min_size=1, max_size=max_insert)))
        elif op == "delete":
            del buf[i:i + draw(st.integers(1, max_delete))]
        elif op == "truncate":
            del buf[i:]
        elif op == "duplicate":
            start = buf.rfind(b"\n", 0, i) + 1
            end = buf.find(b"\n", i)
            buf[start:start] = buf[start:end + 1 if end >= 0 else len(buf)]
        else:
            buf[i:i + 1] = draw(st.sampled_from(snippets))
    return bytes(buf)
