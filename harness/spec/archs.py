"""Architecture names and rules: the one parser for ``cpu``, ``sm_90``, ``sm_90a``, ``>=sm_80``, ``sm_80..sm_90``.

An architecture key is ``cpu`` or ``sm_<major><minor>`` (``sm_80``, ``sm_90``, ``sm_100``...). A backend's
rules are a list of ``cpu``, ``sm_90``, ``>=sm_80``, ``<sm_100``, ``sm_80..sm_90``; it may run where any
rule matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One grammar for every caller: spec rules, device names, nvcc targets, Triton's compile targets.
# "80", "sm80", "sm_90a", "compute_100f" all parse; a suffix (a: arch-specific features, f: family) matters
# when building and is ignored when matching a device, which reports its base architecture.
_ARCH = re.compile(r"^(?:sm_?|compute_?)?(\d+)([af]?)$")
_NAME = r"sm_\d+[af]?"
_RULE = re.compile(rf"^(>=|<=|>|<)?\s*(cpu|{_NAME})$")
_RANGE = re.compile(rf"^({_NAME})\s*\.\.\s*({_NAME})$")
DEFAULT_ARCHS = ("sm_80", "sm_90", "sm_100")  # what `matrix` compiles for when no --arch is given


class ArchError(ValueError):
    pass


@dataclass(frozen=True, order=True)
class Arch:
    number: int        # 90 for sm_90 and sm_90a
    suffix: str = ""   # "a" or "f", or ""

    @property
    def name(self) -> str:
        return f"sm_{self.number}{self.suffix}"

    @property
    def base(self) -> str:
        return f"sm_{self.number}"


def parse_arch(arch: str | int) -> Arch:
    """80, "80", "sm80", "sm_90a", "compute_100" -> Arch; raises ArchError for anything else."""
    m = _ARCH.match(str(arch).strip().lower())
    if not m:
        raise ArchError(f"not an architecture: {arch!r} (expected cpu or sm_NN, e.g. sm_90 or sm_90a)")
    return Arch(int(m.group(1)), m.group(2))


def arch_number(arch: str | int) -> int:
    return parse_arch(arch).number


def normalize_arch(arch: str | int) -> tuple[str, int]:
    """The base name and number: ("sm_90", 90) for sm_90a. Limits and SASS listings are per base arch."""
    a = parse_arch(arch)
    return a.base, a.number


def capability_to_arch(major: int, minor: int) -> str:
    return f"sm_{major}{minor}"


@dataclass(frozen=True)
class ArchRule:
    text: str

    def matches(self, arch: str) -> bool:
        rng = _RANGE.match(self.text)
        if rng:
            if arch == "cpu":
                return False
            return arch_number(rng.group(1)) <= arch_number(arch) <= arch_number(rng.group(2))
        op, target = _RULE.match(self.text).groups()
        if target == "cpu" or arch == "cpu":
            return op is None and target == arch
        a, b = arch_number(arch), arch_number(target)
        return {None: a == b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]


def parse_rule(text: str) -> ArchRule:
    text = text.strip()
    if _RANGE.match(text) or _RULE.match(text):
        return ArchRule(text)
    raise ArchError(f"bad architecture rule {text!r} (expected cpu, sm_90, sm_90a, >=sm_80, <sm_100 or sm_80..sm_90)")
