"""``validate`` and ``resolve``: commands that read specs and print, with no GPU work."""

from __future__ import annotations

from harness.cli.registry import EXIT_OK, BadInput, command, load_specs, options, spec_paths, specs_option


@command("validate", "check spec files; one line per problem, exit 2 on any")
@options(lambda p: (p.add_argument("specs", nargs="*", help="spec files (default: those of the spec folders)"),
                    specs_option(p)))
def cmd_validate(args) -> int:
    specs = load_specs(spec_paths(args.specs, args.specs_dir))
    for s in specs:
        n = sum(len(c) for c in s.cases.values())
        print(f"{s.path}: ok ({len(s.backends)} backend(s), {len(s.dtypes)} dtypes, {n} cases)")
    return EXIT_OK


@command("resolve", "print which backend runs for each kernel on this (or another) architecture")
@options(lambda p: (p.add_argument("--arch", help="pretend to be this architecture: cpu, sm_80, sm_90..."),
                    p.add_argument("--kernel", action="append", default=[]),
                    specs_option(p)))
def cmd_resolve(args) -> int:
    from harness.spec.archs import ArchError
    from harness.target.device import detect, fake_device
    from harness.target.resolve import resolve

    try:
        device = fake_device(args.arch) if args.arch else detect()
    except ArchError as exc:
        raise BadInput(f"--arch: {exc}") from None
    for spec in load_specs(spec_paths([], args.specs_dir, args.kernel)):
        for s in resolve(spec, device):
            state = "RUNS" if s.selected else ("available" if s.runnable else "skipped")
            print(f"{spec.name:<20} {device.arch:<7} {s.backend:<10} {state:<10} {s.reason}")
    return EXIT_OK
