"""A kernel below its roofline target, explained: the spec's ``[roofline] gap`` text, printed in the report under
a kernel whose run fell short of its target.

The results name the spec files they were measured with and their SHA-256 (``environment.spec_sha256``): the
text is read from those files where they still exist, and the report says when a spec was edited after the run
(the explanation may then describe newer code than was measured). The files are read as TOML, not loaded as
specs (which would import the kernels), so the torch-free ``nox -s report`` environment can do it.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.results.model import Results

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@dataclass(frozen=True)
class Gap:
    kernel: str
    text: str
    source: str          # the spec file, as the results name it
    edited: bool         # the file's SHA-256 differs from the one recorded with the results


def _read_gap(data: bytes) -> tuple[str, str] | None:
    """(kernel name, gap text) from a spec file's bytes, read as TOML only: loading the spec would import its
    kernel modules (torch, triton), which a report needs neither of. `harness validate` checks the key."""
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    name = (raw.get("kernel") or {}).get("name")
    gap = (raw.get("roofline") or {}).get("gap")
    if not isinstance(name, str) or not isinstance(gap, str) or not gap.strip():
        return None
    return name, " ".join(gap.split())


def spec_gaps(results: Results, root: Path | None = None) -> dict[str, Gap]:
    """kernel -> its spec's gap text, for the kernels with at least one candidate case below its target."""
    below = {c.kernel for c in results.cases if c.role == "candidate" and c.verdict == "below-target"}
    gaps: dict[str, Gap] = {}
    for name, sha in (results.environment.get("spec_sha256") or {}).items():
        path = Path(name) if root is None or Path(name).is_absolute() else root / name
        try:
            data = path.read_bytes()
        except OSError:
            continue  # moved since the run: the report has nothing to quote
        found = _read_gap(data)
        if found and found[0] in below:
            gaps[found[0]] = Gap(found[0], found[1], name, hashlib.sha256(data).hexdigest() != sha)
    return gaps
