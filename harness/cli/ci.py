"""``ci-gpu`` and ``ci-needs``: what the GPU workflow runs, as commands with tests instead of inline shell.

The job's policy and its run are harness.gate.ci's; here are the options and the exit codes.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.cli.registry import EXIT_FAILED, EXIT_OK, command, options
from harness.gate.ci import STEPS, CiRun, needs_code, parse_needs
from harness.steps import execute


def _ci_gpu_options(p) -> None:
    p.add_argument("--against", required=True, help="the base revision for the merge gate (a pull request's base SHA)")
    p.add_argument("--kernels", required=True, help="comma list of kernels (harness affected's kernels=); '' = none")
    p.add_argument("--out", default="build/ci", help="folder for report.md, ci.json and the logs (default build/ci)")
    p.add_argument("--runner", default=os.environ.get("RUNNER_NAME", "local"), help="name shown in the report")
    p.add_argument("--event", metavar="FILE", help="the event payload ($GITHUB_EVENT_PATH): labels and body")
    p.add_argument("--step-summary", metavar="FILE", help="append report.md here ($GITHUB_STEP_SUMMARY), cut at 1 MiB")
    p.add_argument("--tier", default="full", help="test tier (default full; ci for trying the job on a CPU)")
    p.add_argument("--tests-timeout", type=float, default=2400.0, help="seconds for the full-tier tests")
    p.add_argument("--gate-timeout", type=float, default=2400.0, help="seconds for the merge gate")


@command("ci-gpu", "the GPU CI job: full-tier tests of the given kernels, the merge gate, the decision")
@options(_ci_gpu_options)
def cmd_ci_gpu(args) -> int:
    first = CiRun(against=args.against, kernel_list=args.kernels, out=Path(args.out), runner=args.runner,
                  event=args.event, step_summary=args.step_summary, tier=args.tier,
                  tests_timeout=args.tests_timeout, gate_timeout=args.gate_timeout)
    run = execute(STEPS, first, trace=os.environ.get("KH_TRACE_STEPS") == "1")
    return EXIT_OK if run.outcome.passed else EXIT_FAILED


@command("ci-needs", "fail unless every job in ${{ toJSON(needs) }} (env NEEDS) succeeded or was skipped")
@options(lambda p: p.add_argument("--env", default="NEEDS", help="the environment variable holding the JSON"))
def cmd_ci_needs(args) -> int:
    return needs_code(parse_needs(os.environ.get(args.env, ""), args.env))  # 0 or 1: EXIT_OK, EXIT_FAILED
