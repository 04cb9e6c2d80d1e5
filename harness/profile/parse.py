"""Reading ``ncu --import X --csv --page raw``: one row per kernel launch, one column per metric.

The page has a header row (``"ID","Process ID",...,"Kernel Name",...,<metric names>``), then, when units
are printed, a units row (empty under the ID column: ``"nsecond"``, ``"%"``, ``"byte"``), then one row per
profiled launch. Values may carry thousands separators (``"1,024"``) or be ``"n/a"``. ncu's own messages
(``==PROF==``, ``==WARNING==``) may precede the header.
"""

from __future__ import annotations

import csv
import io

from harness.profile.metrics import METRICS, NOT_STALLS, STALL_PATTERNS, TENSOR_PATTERN
from harness.results.profile import Launch, Stall


class ParseError(ValueError):
    """ncu's output is not what this parser reads; the message is one line."""


_ABSENT = ("", "n/a", "N/A", "-")
# Unit -> factor to the record's unit (µs for times, bytes for sizes). ncu 2025.3 prints "ns" and "byte" on the
# raw page; other versions and --print-units settings spell or scale them otherwise (decimal Kbyte, binary KiByte).
_TIME_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
            "second": 1e6, "s": 1e6}
_BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
          "KiByte": 2.0 ** 10, "MiByte": 2.0 ** 20, "GiByte": 2.0 ** 30, "Kibyte": 2.0 ** 10,
          "Mibyte": 2.0 ** 20, "Gibyte": 2.0 ** 30}
_SCALES = {"time": _TIME_US, "bytes": _BYTES}
_NAME_COLUMNS = ("Kernel Name", "Function Name", "Name")


def number(text: str, where: str) -> float | None:
    text = text.strip()
    if text in _ABSENT:
        return None
    try:
        return float(text.replace(",", ""))
    except ValueError:
        raise ParseError(f"{where}: not a number: {text!r}") from None


def _scaled(value: float | None, unit: str, kind: str, where: str) -> float | None:
    if value is None or kind not in _SCALES:
        return value
    base = unit.strip().split("/")[0].strip()  # "Kbyte/block" -> "Kbyte"
    if not base:  # no units row: ncu printed base units
        return value
    if base not in _SCALES[kind]:
        raise ParseError(f"{where}: unknown {kind} unit {unit!r}")
    return float(f"{value * _SCALES[kind][base]:.12g}")  # 44864 ns -> 44.864 µs, not 44.864000000000004


def raw_rows(text: str) -> list[dict[str, tuple[str, str]]]:
    """Each launch's row as {column: (value, unit)}."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        raise ParseError('no CSV header ("ID", ...) in the ncu output')
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, body = rows[0], [r for r in rows[1:] if r]
    units = [""] * len(header)
    if body and body[0][0].strip() == "":  # the units row has nothing under "ID"
        units, body = body[0], body[1:]
    out = []
    for i, row in enumerate(body):
        if len(row) != len(header):
            raise ParseError(f"row {i + 1}: {len(row)} columns, the header has {len(header)}")
        out.append({h: (v, u) for h, v, u in zip(header, row, units, strict=True)})
    return out


def _first(row: dict, names: tuple[str, ...]) -> tuple[str, tuple[str, str]] | None:
    return next(((n, row[n]) for n in names if n in row), None)


def _stalls(row: dict, where: str) -> tuple[Stall, ...]:
    """The first family of stall metrics the row has, ranked largest first, with each one's share."""
    for pattern in STALL_PATTERNS:
        found = {}
        for column, (value, _unit) in row.items():
            m = pattern.fullmatch(column)
            if m and m.group(1) not in NOT_STALLS:
                v = number(value, f"{where}: {column}")
                if v:  # a reason no warp stalled on says nothing
                    found[m.group(1)] = v
        if found:
            total = sum(found.values())
            ranked = sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))
            return tuple(Stall(k, v, 100.0 * v / total if total > 0 else 0.0) for k, v in ranked)
    return ()


def _limiter(values: dict) -> str | None:
    limits = {k.removeprefix("_limit_"): v for k, v in values.items() if k.startswith("_limit_") and v is not None}
    if not limits:
        return None
    least = min(limits.values())
    return " and ".join(sorted(k for k, v in limits.items() if v == least))


def _int(v: float | None) -> int | None:
    return None if v is None else int(round(v))


def launch(row: dict, where: str = "launch") -> Launch:
    name = next((row[c][0] for c in _NAME_COLUMNS if c in row), "") or "(unnamed kernel)"
    values: dict[str, float | None] = {}
    for m in METRICS:
        hit = _first(row, m.names)
        if hit is None:
            values[m.field] = None
            continue
        column, (value, unit) = hit
        at = f"{where}: {column}"
        values[m.field] = _scaled(number(value, at), unit, m.kind, at)
    tensor = [number(v, f"{where}: {c}") for c, (v, _u) in row.items() if TENSOR_PATTERN.fullmatch(c)]
    tensor = [t for t in tensor if t is not None]
    smem = [values["_smem_static"], values["_smem_dynamic"]]
    return Launch(
        name=name, duration_us=values["duration_us"], dram_pct=values["dram_pct"], sm_pct=values["sm_pct"],
        memory_pct=values["memory_pct"], achieved_occupancy_pct=values["achieved_occupancy_pct"],
        theoretical_occupancy_pct=values["theoretical_occupancy_pct"], occupancy_limiter=_limiter(values),
        registers_per_thread=_int(values["registers_per_thread"]),
        shared_mem_per_block=None if all(s is None for s in smem) else _int(sum(s or 0.0 for s in smem)),
        block_size=_int(values["block_size"]), grid_size=_int(values["grid_size"]),
        waves_per_sm=values["waves_per_sm"], l1_hit_pct=values["l1_hit_pct"], l2_hit_pct=values["l2_hit_pct"],
        dram_read_bytes=values["dram_read_bytes"], dram_write_bytes=values["dram_write_bytes"],
        tensor_pct=max(tensor) if tensor else None, stalls=_stalls(row, where), findings=())


def launches(text: str) -> tuple[Launch, ...]:
    """Every launch in ncu's raw CSV page, in the order ncu profiled them."""
    return tuple(launch(row, f"launch {i + 1}") for i, row in enumerate(raw_rows(text)))
