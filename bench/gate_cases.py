"""The cases bench/gate_quality.py and bench/gate_host_quality.py time: every spec's bench (smoke: ci) cases in
bf16, one provider's launcher loaded twice, from a copy of kernels/ under its own module root (the A side, as
``bench --against`` loads a base) and from the working tree (the B side), both bound to one set of tensors.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Case:
    kernel: str
    case_id: str
    spec: object
    fa: object                    # the copy (the "base")
    fb: object                    # the working tree (the "PR")
    shape: dict = field(default_factory=dict)
    headline: bool = False
    timer: object = None
    medians: list = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.kernel} {self.case_id}"


def build_cases(device, specs_dir: str, provider: str, smoke: bool, notes: list) -> list[Case]:
    """Every spec's bench (smoke: ci) cases in bf16; a spec that cannot be set up is a note, not the end."""
    from harness.correctness.args import case_seed, make_args
    from harness.gate.basetree import rewrite_imports
    from harness.spec.imports import resolve_import
    from harness.spec.load import load

    root = Path(tempfile.mkdtemp(prefix="kh-gate-quality-"))
    atexit.register(shutil.rmtree, root, True)
    pkg = "kh_aa_copy"
    # The A side: the same source under its own module root, every file (a launcher reads its .cu beside it), the
    # imports of its Python rewritten.
    for f in (REPO / "kernels").rglob("*"):
        if not f.is_file() or "__pycache__" in f.parts:
            continue
        dest = root / pkg / "kernels" / f.relative_to(REPO / "kernels")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(rewrite_imports(f.read_bytes(), "kernels", pkg) if f.suffix == ".py" else f.read_bytes())
    (root / pkg / "__init__.py").write_text("")
    sys.path.append(str(root))
    cases = []
    for path in sorted(Path(specs_dir).glob("*.toml")):
        try:
            spec = load(path)
            if "bf16" not in spec.dtypes:
                notes.append(f"{spec.name}: no bf16, skipped")
                continue
            if spec.distributed is not None:  # one process per rank: not a callable this process can time
                notes.append(f"{spec.name}: runs on a process group of ranks, skipped")
                continue
            impl = spec.reference if provider == "reference" else spec.backends[provider].impl
            fa, fb = resolve_import(f"{pkg}.{impl}"), resolve_import(impl)
            for case in spec.cases["ci" if smoke else "bench"]:
                seed = case_seed(spec, "bf16", case)
                # one set of tensors for both sides, as the gate does (harness/gate/abcase.py says why)
                ka = kb = make_args(spec, case, "bf16", device.torch_device, seed).kwargs()
                cases.append(Case(spec.name, case.id, spec, functools.partial(fa, **ka), functools.partial(fb, **kb),
                                  case.values, case.headline))
        except Exception as exc:  # one spec that cannot be set up must not end the run
            notes.append(f"{path.stem}: not set up: {type(exc).__name__}: {str(exc)[:200]}")
    return cases


def rates(trials) -> dict:
    """Counts and rates of each verdict over trials (dicts with a "verdict")."""
    n = len(trials)
    count = {v: sum(t["verdict"] == v for t in trials) for v in ("SLOWER", "FASTER", "SAME", "INCONCLUSIVE")}
    return {"n": n, **count, **{f"{v.lower()}_rate": (count[v] / n if n else None) for v in count}}
