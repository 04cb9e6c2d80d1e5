"""The cases bench/gate_quality.py and bench/gate_host_quality.py time: every spec's bench (smoke: ci) cases in
bf16, one provider's launcher loaded twice, from a copy of kernels/ under its own module root (the A side, as
``bench --against`` loads a base) and from the working tree (the B side), both bound to one set of tensors.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import shutil
import sys
import tempfile
import time
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


def aa_passes(cases, reps: int, go_on, trial, make_timer, out: dict, what: str) -> None:
    """A/A passes over every case into ``out["aa"]`` (its ``trials``, ``pass_wall_s``, ``rates``): ``trial(case)``
    is a verdict record of the case against itself, on the timer ``make_timer(case)`` made once per case; each
    base median is kept on its case. A pass begins while ``go_on(rep)``; a case that fails is an error, not the
    end."""
    aa = out["aa"]
    for rep in range(reps):
        if not go_on(rep):
            aa["stopped"] = f"time: {rep} passes done"
            break
        began = time.monotonic()
        for case in cases:
            try:
                if case.timer is None:
                    case.timer = make_timer(case)
                t = trial(case)
                case.medians.append(t["base_median_us"])
                aa["trials"].append({**t, "rep": rep})
            except Exception as exc:
                out["errors"].append(f"{what} {case.label} rep {rep}: {type(exc).__name__}: {str(exc)[:300]}")
        aa["pass_wall_s"].append(time.monotonic() - began)
        print(f"{what} pass {rep + 1}: {aa['pass_wall_s'][-1]:.1f} s, {rates(aa['trials'])}", flush=True)
    aa["rates"] = rates(aa["trials"])


def options(description: str, time_limit: tuple[float, float], reps: tuple[int, int]) -> argparse.ArgumentParser:
    """The options both scripts take; ``time_limit`` and ``reps``: the defaults (full run, --smoke)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", required=True)
    p.add_argument("--smoke", action="store_true", help="tiny settings: ci shapes, eager torch, host timer")
    p.add_argument("--time-limit", type=float,
                   help=f"seconds for the whole script (default {time_limit[0]:g}; smoke {time_limit[1]:g})")
    p.add_argument("--aa-reps", type=int, help=f"A/A passes (default {reps[0]}; smoke {reps[1]})")
    p.add_argument("--planted-reps", type=int, help=f"repetitions per planted slowdown (default {reps[0]})")
    p.add_argument("--provider", help="backend to time (default triton; reference with --smoke)")
    p.add_argument("--specs-dir", default=str(REPO / "specs"))
    p.set_defaults(defaults=(time_limit, reps))
    return p


def parsed(p: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """The options with their defaults filled in, full or smoke."""
    a = p.parse_args(argv)
    (limit, smoke_limit), (reps, smoke_reps) = a.defaults
    del a.defaults
    a.time_limit = a.time_limit or (smoke_limit if a.smoke else limit)
    a.aa_reps = a.aa_reps or (smoke_reps if a.smoke else reps)
    a.planted_reps = a.planted_reps or (smoke_reps if a.smoke else reps)
    a.provider = a.provider or ("reference" if a.smoke else "triton")
    return a


def start(args, t0: float, block_config: dict):
    """What both scripts begin with: (device, output folder, cases, the run record's head). The interpreter is
    switched on first where there is no GPU, as the harness does."""
    from harness.spec.imports import use_interpreter_if_no_gpu

    use_interpreter_if_no_gpu()
    from harness.target.device import detect
    from harness.timing.environment import collect_environment

    device = detect()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    notes: list = []
    cases = build_cases(device, args.specs_dir, args.provider, args.smoke, notes)
    out = {"environment": collect_environment(device=device.torch_device), "settings": vars(args),
           "block_config": block_config, "errors": [], "notes": notes, "n_cases": len(cases),
           "setup_s": time.monotonic() - t0}
    return device, out_dir, cases, out


def calibration_doc(entries: dict, env: dict, verdicts, script: str) -> dict:
    """A calibration file: each derived entry (harness.gate.calibration.derive) as the gate reads it, its derivation
    beside it, and the machine and software its A/A verdicts were taken on."""
    doc = {k: {"min_effect": v["min_effect"], "floor_us": v["floor_us"], "derivation": v} for k, v in entries.items()}
    doc["provenance"] = {"summary": f"{env.get('device')}, driver {env.get('driver')}, torch {env.get('torch')}, "
                                    f"{env.get('date')}, {verdicts} {script}", "commit": env.get("git_commit")}
    return doc


def closing_lines(out: dict, seconds: float) -> list[str]:
    """The summary's last lines: every error, the notes and the script's wall time."""
    return [f"Errors ({len(out['errors'])}):"] + [f"- {e}" for e in out["errors"]] + [
        "", f"Notes: {'; '.join(out['notes']) or 'none'}", f"Script wall time: {seconds:.1f} s"]
