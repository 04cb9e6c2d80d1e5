"""The waiver grammar, in one place: what a spec's ``[waive]`` keys mean, how they are validated and matched,
and every loosened tolerance and waived check of a spec with its reason, for test output and reports.

A key is one of three kinds: a waivable check's name (``determinism``), ``matrix.<target>`` (a matrix target
or a whole vendor, ``matrix.gfx950``, ``matrix.rocm``: its compile problems are reported as waived, not
failed) or ``bench.<provider>`` (a baseline or peer not timed, ``bench.torch.compile``). TOML reads a dotted
key as nested tables; :func:`flat_waivers` makes each one key again.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.spec.archs import EXPECTED, VENDORS, ArchError, parse_arch, vendor_of
from harness.spec.checks import WAIVABLE
from harness.spec.model import Spec
from harness.spec.schema import did_you_mean

_MATRIX, _BENCH, _BACKWARD = "matrix", "bench", "backward"
# The backward items' checks a spec may waive, as backward.<check> (a forward waiver leaves the backward's alone:
# a split-K forward with atomics says nothing of its backward's reduction).
BACKWARD_WAIVABLE = ("zero-size", "inputs", "determinism")
BASELINES = ("reference", "torch.compile")  # the providers every kernel has besides its backends and peers


@dataclass(frozen=True)
class Waiver:
    """A loosened tolerance, waived check or skip, with its reason (test summaries and results files alike)."""

    kernel: str
    what: str
    reason: str


def parse_key(key: str) -> tuple[str, str]:
    """(kind, name) of a ``[waive]`` key: ("check", "determinism"), ("matrix", "gfx950"), ("bench", "liger")."""
    kind, dot, name = key.partition(".")
    if dot and kind in (_MATRIX, _BENCH, _BACKWARD):
        return kind, name
    return "check", key


def flat_waivers(table: dict) -> list[tuple[str, object]]:
    """A spec's [waive] entries, the dotted keys TOML nests (`matrix.gfx950 = ...`, `bench.torch.compile = ...`)
    flattened to one key each."""
    def flat(key: str, value) -> list[tuple[str, object]]:
        if not isinstance(value, dict):
            return [(key, value)]
        return [item for k, v in value.items() for item in flat(f"{key}.{k}", v)]

    out: list[tuple[str, object]] = []
    for key, value in table.items():
        out += flat(key, value) if key in (_MATRIX, _BENCH, _BACKWARD) else [(key, value)]
    return out


def key_problem(key: str, peers=()) -> str:
    """"" for a valid ``[waive]`` key, else what is wrong with it, in one line."""
    kind, name = parse_key(key)
    if kind == _BACKWARD and name.startswith(f"{_MATRIX}."):  # the standalone backward kernel's matrix target
        kind, name = parse_key(name)
    if kind == _MATRIX:
        if name in VENDORS:
            return ""
        try:
            parse_arch(name)
        except ArchError:
            return f"not a matrix target: {name!r} (expected {EXPECTED}, or cuda or rocm for a whole vendor)"
        return ""
    if kind == _BACKWARD:
        if name in BACKWARD_WAIVABLE:
            return ""
        return (f"not a waivable backward check: {name!r}{did_you_mean(name, BACKWARD_WAIVABLE)} (one of "
                f"{', '.join(BACKWARD_WAIVABLE)}; or matrix.<target> for the backward kernel's compile)")
    if kind == _BENCH:
        known = BASELINES + tuple(peers)
        if name in known:
            return ""
        return (f"not a baseline or peer of this kernel: {name!r} (one of {', '.join(known)}; its backends are "
                "always benchmarked)")
    if key in WAIVABLE:
        return ""
    return (f"not a waivable check{did_you_mean(key, WAIVABLE)} (one of {', '.join(WAIVABLE)}; or "
            "matrix.<target>, e.g. matrix.gfx950; or bench.<baseline or peer>)")


def bench_waiver(waivers: dict[str, str], provider: str) -> str | None:
    """The reason a spec leaves ``provider`` out of the benchmark, or None."""
    return waivers.get(f"{_BENCH}.{provider}")


def matrix_waiver(waivers: dict[str, str], arch: str, prefix: str = "") -> str | None:
    """The reason a spec waives `arch` in the matrix (by its name or its vendor), or None. ``prefix``: the
    backward kernel's waivers (``backward.matrix.<target>``) with ``backward.``."""
    name, vendor = parse_arch(arch).name, vendor_of(arch)
    for key, reason in waivers.items():
        if not key.startswith(prefix):
            continue
        kind, target = parse_key(key.removeprefix(prefix))
        if kind != _MATRIX:
            continue
        if VENDORS.get(target) == vendor or (target not in VENDORS and parse_arch(target).name == name):
            return reason
    return None


def backward_matrix_waiver(waivers: dict[str, str], arch: str) -> str | None:
    """The reason a spec waives `arch` for its standalone backward kernel's compile, or None."""
    return matrix_waiver(waivers, arch, f"{_BACKWARD}.")


def _what(key: str) -> str:
    kind, name = parse_key(key)
    if kind == _BACKWARD:
        return f"backward kernel's {name} waived" if name.startswith(f"{_MATRIX}.") else f"backward check {name} waived"
    return f"provider {name} not benchmarked" if kind == _BENCH else f"check {key} waived"


def spec_waivers(spec: Spec) -> list[Waiver]:
    lines = [Waiver(spec.name, f"tolerance {d} {t.describe()}", t.reason)
             for d, t in spec.tolerances.items() if t.loosened]
    lines += [Waiver(spec.name, f"tolerance of {t.name} {t.tolerance.describe()}", t.tolerance.reason)
              for t in spec.tensors if t.tolerance is not None and t.tolerance.loosened]
    if spec.backward is not None:
        lines += [Waiver(spec.name, f"tolerance of the gradient of {n} at {d} {t.describe()}", t.reason)
                  for (n, d), t in spec.backward.tolerances.items() if t.loosened]
    lines += [Waiver(spec.name, _what(c), r) for c, r in spec.waivers.items()]
    if spec.gate is not None:
        lines.append(Waiver(spec.name, f"gate minimum effect {spec.gate.min_effect} floor {spec.gate.floor_us} us",
                            spec.gate.reason))
    return lines
