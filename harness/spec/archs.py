"""Architecture names and rules: the one parser for ``cpu``, ``sm_90``, ``sm_90a``, ``gfx942``, ``>=sm_80``,
``sm_80..sm_90``, ``cuda`` and ``rocm``.

An architecture key is ``cpu``, ``sm_<major><minor>`` (NVIDIA: ``sm_80``, ``sm_90``, ``sm_100``...) or
``gfx<id>`` (AMD: ``gfx942`` for MI300, ``gfx950`` for MI350). A backend's rules are a list of ``cpu``,
``sm_90``, ``>=sm_80``, ``<sm_100``, ``sm_80..sm_90``, ``gfx942``, ``cuda`` (any NVIDIA GPU) or ``rocm``
(any AMD GPU); it may run where any rule matches. Comparisons and ranges order NVIDIA compute capabilities
only, so ``>=sm_80`` never matches an AMD device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# One grammar for every caller: spec rules, device names, nvcc targets, Triton's compile targets.
# "80", "sm80", "sm_90a", "compute_100f" all parse; a suffix (a: arch-specific features, f: family) matters
# when building and is ignored when matching a device, which reports its base architecture.
_ARCH = re.compile(r"^(?:sm_?|compute_?)?(\d+)([af]?)$")
# gfx90a, gfx942, gfx950, gfx1100; ROCm's gcnArchName adds target features ("gfx942:sramecc+:xnack-"),
# which say how the device is configured, not what it is.
_GFX = re.compile(r"^(gfx\d{2,3}[0-9a-f])(?::[\w+-]+)*$")
_NAME = r"sm_\d+[af]?"
_RULE = re.compile(rf"^(>=|<=|>|<)?\s*(cpu|{_NAME})$")
_RANGE = re.compile(rf"^({_NAME})\s*\.\.\s*({_NAME})$")
VENDORS = {"cuda": "nvidia", "rocm": "amd"}  # vendor-wide rule -> the vendor it matches
DEFAULT_ARCHS = ("sm_80", "sm_90", "sm_100", "gfx942", "gfx950")  # what `matrix` compiles for by default
EXPECTED = "cpu, sm_NN (e.g. sm_90 or sm_90a) or gfxNNN (e.g. gfx942)"


class ArchError(ValueError):
    pass


@dataclass(frozen=True, order=True)
class Arch:
    number: int          # 90 for sm_90 and sm_90a; 0 for AMD, whose targets have no order
    suffix: str = ""     # "a" or "f", or ""
    vendor: str = "nvidia"
    gfx: str = ""        # the AMD target ("gfx942"), without feature flags

    @property
    def name(self) -> str:
        return self.gfx if self.vendor == "amd" else f"sm_{self.number}{self.suffix}"

    @property
    def base(self) -> str:
        return self.gfx if self.vendor == "amd" else f"sm_{self.number}"


def parse_arch(arch: str | int) -> Arch:
    """80, "80", "sm80", "sm_90a", "compute_100", "gfx942", "gfx942:sramecc+:xnack-" -> Arch; raises
    ArchError for anything else."""
    text = str(arch).strip().lower()
    if m := _GFX.match(text):
        return Arch(0, "", "amd", m.group(1))
    m = _ARCH.match(text)
    if not m:
        raise ArchError(f"not an architecture: {arch!r} (expected {EXPECTED})")
    return Arch(int(m.group(1)), m.group(2))


def vendor_of(arch: str) -> str:
    """"cpu", "nvidia" or "amd"."""
    return "cpu" if str(arch).strip().lower() == "cpu" else parse_arch(arch).vendor


def is_amd(arch: str) -> bool:
    return vendor_of(arch) == "amd"


def arch_number(arch: str | int) -> int:
    a = parse_arch(arch)
    if a.vendor != "nvidia":
        raise ArchError(f"{a.name} is an AMD target: it has no compute capability")
    return a.number


def normalize_arch(arch: str | int) -> tuple[str, int]:
    """The base name and number: ("sm_90", 90) for sm_90a, ("gfx942", 0) for gfx942:xnack-. Limits and
    SASS listings are per base arch."""
    a = parse_arch(arch)
    return a.base, a.number


def capability_to_arch(major: int, minor: int) -> str:
    return f"sm_{major}{minor}"


@dataclass(frozen=True)
class ArchRule:
    text: str

    def matches(self, arch: str) -> bool:
        vendor = vendor_of(arch)
        if self.text in VENDORS:
            return VENDORS[self.text] == vendor
        if _GFX.match(self.text):
            return vendor == "amd" and parse_arch(self.text).gfx == parse_arch(arch).gfx
        if vendor == "amd":  # every other rule names cpu or NVIDIA capabilities
            return False
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
    if text in VENDORS or _RANGE.match(text) or _RULE.match(text):
        return ArchRule(text)
    if (m := _GFX.match(text.lower())) and ":" not in text:
        return ArchRule(m.group(1))
    if re.match(r"^(>=|<=|>|<)\s*gfx", text) or re.match(r"^gfx\w*\s*\.\.", text):
        raise ArchError(f"bad architecture rule {text!r}: AMD targets have no order; name them (gfx942, "
                        f"gfx950) or use rocm for any AMD GPU")
    raise ArchError(f"bad architecture rule {text!r} (expected cpu, sm_90, sm_90a, >=sm_80, <sm_100, "
                    f"sm_80..sm_90, gfx942, cuda or rocm)")


def build_target(rules, target: str) -> str:
    """The name a matrix target is built under for a backend: ``sm_90a`` where a rule names ``sm_90a`` (code
    that uses sm_90's arch-specific instructions, wgmma or setmaxnreg, builds for nothing else), else the
    target itself."""
    base = parse_arch(target)
    for text in rules:
        m = _RULE.match(str(text).strip())
        if m and m.group(1) is None and m.group(2) != "cpu":
            named = parse_arch(m.group(2))
            if named.suffix and named.number == base.number and base.vendor == "nvidia":
                return named.name
    return target


def parse_targets(items) -> tuple[str, ...]:
    """`--arch gfx942,sm_90` (repeatable) -> the matrix's targets, in the order given, each checked."""
    out = []
    for item in items:
        for a in str(item).split(","):
            if a.strip():
                out.append(parse_arch(a).name)
    return tuple(dict.fromkeys(out))
