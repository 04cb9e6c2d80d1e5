"""``profile``: Nsight Compute on each kernel's candidate at its headline bench case, with a diagnosis.

Writes ``profile.json`` (the records), ``profile.md`` (the section alone), ``<kernel>.ncu-rep`` (for the
Nsight Compute GUI) and ``ncu-<kernel>.log`` to --out, the benchmark's folder by default, and re-renders
``report.md`` there when a ``results.json`` sits beside it. Exit codes: 0 every kernel profiled, 1 a profile
failed, 2 bad input or a machine that cannot profile (no ncu, no GPU, counters not readable).
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

from harness.cli.registry import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    BadInput,
    command,
    load_specs,
    options,
    spec_paths,
    specs_option,
)

LOG_TAIL = 40  # lines of ncu's own output shown when a profile fails; the whole of it is in ncu-<kernel>.log


def _options(p) -> None:
    p.add_argument("--kernel", action="append", default=[], help="only these kernels (repeatable, comma list)")
    p.add_argument("--dtype", default="bf16", help="the dtype to profile (default bf16, else the spec's first)")
    p.add_argument("--out", help="output directory (default: build/reports/<device>/, as bench)")
    p.add_argument("--results", help="results.json whose measured ceilings place each kernel on the roofline "
                                     "(default: the one in --out; else the cached ceilings, measured if none)")
    p.add_argument("--no-ceilings", action="store_true",
                   help="no roofline position: neither a results.json nor the ceilings (which may take minutes to "
                        "measure on a machine that has none cached)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per kernel under ncu (default 600)")
    p.add_argument("--ncu", help="the ncu executable (default: PATH, the CUDA toolkit, /opt/nvidia/nsight-compute)")
    p.add_argument("--ncu-arg", action="append", default=[],
                   help="one more ncu option (repeatable); the clocks are never changed (--clock-control none)")
    specs_option(p)


def _ceilings(args, out: Path, device):
    """(ceilings, where they came from): a bench run's, else the cache's, measured when nothing is cached."""
    from harness.results.load import load_results
    from harness.results.model import ResultsError

    if args.no_ceilings:
        return None, "none (--no-ceilings)"
    results = Path(args.results) if args.results else out / "results.json"
    if args.results or results.exists():
        try:
            return load_results(results).ceilings, str(results)
        except ResultsError as exc:
            raise BadInput(str(exc)) from None
    from harness.timing.ceilings import measure_ceilings

    return measure_ceilings(device.torch_device), "cached ceilings (~/.cache/kernel-harness)"


def _tail(log: str) -> str:
    return "\n".join(log.rstrip().splitlines()[-LOG_TAIL:])


@command("profile", "Nsight Compute on each kernel's candidate at its headline bench case, with a diagnosis")
@options(_options)
def cmd_profile(args) -> int:
    from harness.profile.ncu import NOT_FOUND, find_ncu

    ncu = find_ncu(args.ncu)
    if ncu is None:  # first, before torch is imported: on a CPU machine this is the whole answer
        raise BadInput(f"--ncu {args.ncu}: not an executable file" if args.ncu else NOT_FOUND)
    from harness.bench.plan import default_out_dir
    from harness.profile import ncu as ncu_mod
    from harness.profile.runner import Target, candidate, headline_case, pick_dtype, profile_kernel
    from harness.report.profile import profile_markdown
    from harness.results.io import atomic_write_text
    from harness.results.profile import PROFILE_SCHEMA_VERSION, ProfileFile, write_profile
    from harness.target.device import detect

    paths = spec_paths([], args.specs_dir, args.kernel)
    specs = load_specs(paths)
    device = detect()
    if not device.is_gpu:
        raise BadInput("profile: no NVIDIA GPU visible to torch; profiling needs NVIDIA Nsight Compute on a "
                       "machine with an NVIDIA GPU")
    try:
        ncu_mod.profile_argv(ncu, "x", [], extra=args.ncu_arg)
    except ValueError as exc:
        raise BadInput(f"--ncu-arg: {exc}") from None
    out = Path(args.out) if args.out else default_out_dir(device)
    out.mkdir(parents=True, exist_ok=True)
    ceilings, source = _ceilings(args, out, device)
    records = []
    for i, (spec, path) in enumerate(zip(specs, paths, strict=True), 1):
        case = headline_case(spec)
        if case is None:
            print(f"[{i}/{len(specs)}] {spec.name}: no [[cases.bench]] to profile", file=sys.stderr)
            continue
        if spec.distributed is not None:  # ncu profiles one process; a collective's call needs all its ranks
            print(f"[{i}/{len(specs)}] {spec.name}: a [distributed] kernel: not profiled (its call needs every rank "
                  "of a group, ncu runs one process)", file=sys.stderr)
            continue
        t = Target(spec, str(path), case, pick_dtype(spec, args.dtype), candidate(spec, device))
        print(f"[{i}/{len(specs)}] {t.label}: under ncu", file=sys.stderr, flush=True)
        record, log = profile_kernel(ncu, t, out, ceilings, seed=args.seed, timeout=args.timeout,
                                     extra=args.ncu_arg)
        atomic_write_text(out / f"ncu-{spec.name}.log", log)
        records.append(record)
        if record.status == "ok":
            fired = [f.rule for la in record.launches for f in la.findings] + [f.rule for f in record.findings]
            print(f"    {len(record.launches)} launch(es), {record.duration_us:.2f} us; rules: "
                  f"{', '.join(dict.fromkeys(fired)) or 'none fired'}", flush=True)
        else:
            print(f"    {record.status}: {record.reason}\n--- ncu output (last {LOG_TAIL} lines) ---\n"
                  f"{_tail(log)}\n---", file=sys.stderr, flush=True)
    environment = {"device": device.name, "arch": device.arch, "ncu": ncu, "ncu_version": ncu_mod.version(ncu),
                   "clock_control": "none", "ceilings": source,
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    doc = ProfileFile(PROFILE_SCHEMA_VERSION, environment, tuple(records))
    written = [write_profile(doc, out / "profile.json"), out / "profile.md"]
    atomic_write_text(written[1], profile_markdown(doc))
    if (out / "results.json").exists():
        from harness.report.render import render_report
        from harness.results.model import ResultsError

        try:
            written.append(render_report(out / "results.json", out))
        except ResultsError as exc:
            print(f"report.md not re-rendered: {exc}", file=sys.stderr)
    print(f"wrote {', '.join(map(str, written))}")
    statuses = {r.status for r in records}
    return EXIT_FAILED if "error" in statuses else EXIT_BAD_INPUT if "not-profiled" in statuses else EXIT_OK
