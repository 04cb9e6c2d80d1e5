"""``[roofline]``: the bytes and flops a kernel moves and does, its target fraction of the measured ceiling."""

from __future__ import annotations

from harness.spec.model import COMPUTE_PRECISIONS, Roofline
from harness.spec.schema import Reader, did_you_mean
from harness.spec.schema import parse_expr as _expr


def read_roofline(r: Reader, t: dict) -> Roofline | None:
    """A ``[roofline]`` table (the forward's, or ``[backward.roofline]`` through a prefixing reader)."""
    r.keys(t, ["bytes", "read_bytes", "write_bytes", "flops", "target", "compute", "gap"], "roofline",
           required=["flops"])
    split = [k for k in ("read_bytes", "write_bytes") if k in t]
    if "bytes" in t and split:
        r.problem(f"roofline.{split[0]}", "give bytes, or read_bytes and write_bytes, not both")
        return None
    if len(split) == 1:
        other = "write_bytes" if split[0] == "read_bytes" else "read_bytes"
        r.problem(f"roofline.{other}", f"required with {split[0]}")
        return None
    if "bytes" not in t and not split:
        r.problem("roofline.bytes", "missing required key (or give read_bytes and write_bytes)")
        return None
    rd = _expr(r, t["read_bytes"], "roofline.read_bytes") if split else None
    wr = _expr(r, t["write_bytes"], "roofline.write_bytes") if split else None
    if split and not (rd and wr):
        return None
    b = _expr(r, f"({rd.source}) + ({wr.source})" if split else t["bytes"], "roofline.bytes")
    f = _expr(r, t.get("flops", "0"), "roofline.flops")
    target = r.get(t, "target", float, "roofline", default=0.0)
    if not 0 <= target <= 1:
        r.problem("roofline.target", f"must be a fraction in [0, 1], got {target}")
    compute = r.get(t, "compute", str, "roofline", default=None)
    if compute is not None and compute not in COMPUTE_PRECISIONS:
        r.problem("roofline.compute", f'unknown precision "{compute}"{did_you_mean(compute, COMPUTE_PRECISIONS)} '
                                      f'(one of {", ".join(COMPUTE_PRECISIONS)})')
    gap = r.get(t, "gap", str, "roofline", default=None)
    if gap is not None and not gap.strip():
        r.problem("roofline.gap", "expected why the kernel is below its target, got an empty string")
    return Roofline(b, f, target, rd, wr, compute, " ".join(gap.split()) if gap else None) if b and f else None
