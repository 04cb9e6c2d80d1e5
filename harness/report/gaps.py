"""A kernel below its roofline target, explained: the spec's ``[roofline] gap`` text, printed in the report under
a kernel whose run fell short of its target.

The results name the spec files they were measured with and their SHA-256 (``environment.spec_sha256``): the
text is read from those files where they still exist, and the report says when a spec was edited after the run
(the explanation may then describe newer code than was measured). Loading a spec is pure (no kernel, torch or
triton), so the torch-free ``nox -s report`` environment reads it like any other command.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.results.model import Results
from harness.spec.load import load
from harness.spec.model import Spec
from harness.spec.schema import SpecError


@dataclass(frozen=True)
class Gap:
    kernel: str
    text: str
    source: str          # the spec file, as the results name it
    edited: bool         # the file's SHA-256 differs from the one recorded with the results


def run_specs(results: Results, root: Path | None = None) -> Iterator[tuple[str, Spec, bool]]:
    """(the file as the results name it, its spec, whether it was edited since the run) for each spec the run was
    measured with that still loads."""
    for name, sha in (results.environment.get("spec_sha256") or {}).items():
        path = Path(name) if root is None or Path(name).is_absolute() else root / name
        try:
            data, spec = path.read_bytes(), load(path)
        except (OSError, SpecError):
            continue  # moved or broken since the run: the report has nothing to quote (validate says why)
        yield name, spec, hashlib.sha256(data).hexdigest() != sha


def spec_gaps(results: Results, specs=None) -> dict[str, Gap]:
    """kernel -> its spec's gap text, for the kernels with at least one candidate case below its target.
    ``specs``: :func:`run_specs` of the results, where the caller has read them already."""
    below = {c.kernel for c in results.cases if c.role == "candidate" and c.verdict == "below-target"}
    return {spec.name: Gap(spec.name, spec.roofline.gap, name, edited)
            for name, spec, edited in (run_specs(results) if specs is None else specs)
            if spec.name in below and spec.roofline is not None and spec.roofline.gap}
