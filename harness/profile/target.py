"""What Nsight Compute runs: one call of a kernel's provider at one bench case, alone in the profiled range.

``python -m harness.profile.target --spec specs/rope.toml --case ID --dtype bf16 --provider triton``

The inputs are built as the benchmark builds them (harness.correctness.args, the same seed). Warm-up calls
run first, outside the range, so Triton's compilation and autotuning are never profiled; then one call on
fresh inputs runs between cudaProfilerStart and cudaProfilerStop, which ncu (``--profile-from-start off``)
turns into the only launches it profiles.
"""

from __future__ import annotations

import argparse
import sys

EXIT_BAD_INPUT = 2


def _implementation(spec, name: str, device):
    from harness.spec.imports import resolve_import
    from harness.target.resolve import check_backend

    if name == "reference":
        return resolve_import(spec.reference)
    if name not in spec.backends:
        raise LookupError(f"{spec.name}: no backend {name!r} (backends: {', '.join(spec.backends) or 'none'})")
    ok, reason = check_backend(spec, name, device)  # builds a backend that needs building, as resolution does
    if not ok:
        raise LookupError(f"{spec.name}: backend {name} cannot run here: {reason}")
    return resolve_import(spec.backends[name].impl)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.profile.target", description=__doc__.splitlines()[0])
    p.add_argument("--spec", required=True)
    p.add_argument("--case", required=True, help="a [[cases.bench]] id")
    p.add_argument("--dtype", required=True)
    p.add_argument("--provider", required=True, help="a backend name, or reference")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3, help="calls before the profiled one (compile, autotune)")
    args = p.parse_args(argv)

    import torch

    from harness.config import load_config, use_import_roots
    from harness.correctness.args import case_seed, make_args
    from harness.spec.load import load
    from harness.spec.schema import SpecError
    from harness.steps import BadInput
    from harness.target.device import detect

    try:
        use_import_roots(load_config())  # ncu starts this as a script: the project's kernels import as in bench
        spec = load(args.spec)
    except BadInput as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    except SpecError as exc:
        print("\n".join(exc.problems), file=sys.stderr)
        return EXIT_BAD_INPUT
    case = next((c for c in spec.cases.get("bench", ()) if c.id == args.case), None)
    if case is None or args.dtype not in spec.dtypes:
        print(f"{args.spec}: no bench case {args.case!r} with dtype {args.dtype!r}", file=sys.stderr)
        return EXIT_BAD_INPUT
    device = detect()
    if not device.is_gpu:
        print("profile target: no CUDA device (ncu profiles GPU kernels only)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        fn = _implementation(spec, args.provider, device)
    except LookupError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_BAD_INPUT
    seed = case_seed(spec, args.dtype, case, args.seed)
    warm = make_args(spec, case, args.dtype, device.torch_device, seed)
    for _ in range(args.warmup):
        fn(**warm.kwargs())
    fresh = make_args(spec, case, args.dtype, device.torch_device, seed)  # what the benchmark's call sees
    kwargs = fresh.kwargs()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    try:
        fn(**kwargs)
        torch.cuda.synchronize()
    finally:
        torch.cuda.profiler.stop()
    print(f"profiled one call: {spec.name} {args.provider} {args.dtype} {case.id}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
