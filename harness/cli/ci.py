"""The GPU gate's commands, as the workflows run them (docs/ci.md), so each has tests instead of inline shell:

- ``ci-authorize``: may this event send the pull request's head to a GPU runner, and what was accepted for it
  (harness.gate.authorize, with the API's answers through harness.gate.github);
- ``ci-candidate``: the base checkout with the pull request's spec and kernel folders (harness.gate.candidate);
- ``ci-gpu``: the GPU job on the runner (harness.gate.ci);
- ``ci-gate``: the required status and the comment, decided by trusted code (harness.gate.status, .comment).
"""

from __future__ import annotations

import base64
import json
import os
import re
from dataclasses import replace
from pathlib import Path

from harness.cli.registry import EXIT_FAILED, EXIT_OK, BadInput, command, options
from harness.gate.ci import STEPS, CiRun
from harness.steps import execute

_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")


def _ci_gpu_options(p) -> None:
    p.add_argument("--against", required=True, help="the base revision for the merge gate (a pull request's base SHA)")
    p.add_argument("--kernels", required=True, help="comma list of kernels (harness affected's kernels=); '' = none")
    p.add_argument("--out", default="build/ci", help="folder for report.md, ci.json and the logs (default build/ci)")
    p.add_argument("--runner", default=os.environ.get("RUNNER_NAME", "local"), help="name shown in the report")
    p.add_argument("--authorization", metavar="FILE", help="ci-authorize's decision (acceptances; none: nightly)")
    p.add_argument("--candidate", metavar="SHA", help="the pull request's head: the gate's PR side (bench --candidate)")
    p.add_argument("--tests-dir", metavar="DIR", help="run the full-tier tests there (the candidate tree)")
    p.add_argument("--step-summary", metavar="FILE", help="append report.md here ($GITHUB_STEP_SUMMARY), cut at 1 MiB")
    p.add_argument("--tier", default="full", help="test tier (default full; ci for trying the job on a CPU)")
    p.add_argument("--tests-timeout", type=float, default=2400.0, help="seconds for the full-tier tests")
    p.add_argument("--gate-timeout", type=float, default=2400.0, help="seconds for the merge gate")


@command("ci-gpu", "the GPU CI job: full-tier tests of the given kernels, the merge gate, the decision")
@options(_ci_gpu_options)
def cmd_ci_gpu(args) -> int:
    first = CiRun(against=args.against, kernel_list=args.kernels, out=Path(args.out), runner=args.runner,
                  authorization=args.authorization, candidate=args.candidate,
                  tests_dir=Path(args.tests_dir) if args.tests_dir else None, step_summary=args.step_summary,
                  tier=args.tier, tests_timeout=args.tests_timeout, gate_timeout=args.gate_timeout)
    run = execute(STEPS, first, trace=os.environ.get("KH_TRACE_STEPS") == "1")
    return EXIT_OK if run.outcome.passed else EXIT_FAILED


def _append(path: str | None, lines: list[str]) -> None:
    print("\n".join(lines))
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def _read_json(path: str, what: str):
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"{what} {path}: unreadable: {exc.strerror}") from None
    except ValueError:
        raise BadInput(f"{what} {path}: not JSON") from None


def _authorize_options(p) -> None:
    p.add_argument("--event", required=True, metavar="FILE", help="the event payload ($GITHUB_EVENT_PATH)")
    p.add_argument("--event-name", required=True, help="$GITHUB_EVENT_NAME")
    p.add_argument("--repo", required=True, help="$GITHUB_REPOSITORY (owner/name)")
    p.add_argument("--sha", default="", help="the commit of a run with no pull request ($GITHUB_SHA)")
    p.add_argument("--against", default="", help="the base of a run with no pull request (default HEAD: A/A)")
    p.add_argument("--out", metavar="FILE", help="also write the decision as JSON (for ci-gpu, ci-gate)")
    p.add_argument("--github-output", metavar="FILE", help="append the key=value lines here ($GITHUB_OUTPUT)")


@command("ci-authorize", "may this event run the GPU gate on the pull request's head, and what is accepted")
@options(_authorize_options)
def cmd_ci_authorize(args) -> int:
    from harness.gate import authorize as au
    from harness.gate.github import api

    if not _REPO.fullmatch(args.repo):
        raise BadInput(f"--repo {args.repo!r}: expected owner/name")
    trigger = au.read_event(args.event_name, _read_json(args.event, "--event"))
    pull, comments, roles = None, [], {}
    if trigger.pr is not None and trigger.kind not in ("ignored", "trusted"):
        pull = api(f"repos/{args.repo}/pulls/{trigger.pr}")
        comments = api(f"repos/{args.repo}/issues/{trigger.pr}/comments?per_page=100", paginate=True) or []
        for login in au.logins_to_look_up(trigger, comments):
            roles[login] = au.parse_role(api(f"repos/{args.repo}/collaborators/{login}/permission",
                                             missing_ok=True))
    decision = au.decide(trigger, pull, roles, comments, sha=args.sha, against=args.against or "HEAD")
    if args.out:
        Path(args.out).write_text(json.dumps(au.authorization_doc(decision), indent=1) + "\n", encoding="utf-8")
    _append(args.github_output, au.output_lines(decision))
    return EXIT_OK


def _candidate_options(p) -> None:
    p.add_argument("--head", required=True, help="the pull request's head commit (40 hex)")
    p.add_argument("--from", dest="source", metavar="DIR", help="a checkout holding that commit, to fetch it from")


@command("ci-candidate", "put the pull request's spec and kernel folders (only those) into this base checkout")
@options(_candidate_options)
def cmd_ci_candidate(args) -> int:
    from harness.config import load_config
    from harness.gate.basetree import GitError, repo_root
    from harness.gate.candidate import folders, take

    try:
        repo = repo_root(Path.cwd())
    except GitError as exc:
        raise BadInput(f"ci-candidate: not in a git repository ({exc})") from None
    paths = take(repo, args.head, folders(load_config(), repo), Path(args.source) if args.source else None)
    print(f"ci-candidate: {', '.join(paths)} from {args.head[:12]}; everything else is the base's")
    return EXIT_OK


def _gate_options(p) -> None:
    p.add_argument("reports", nargs="*", help="folders holding */ci.json (the downloaded GPU artifacts)")
    p.add_argument("--authorization", required=True, metavar="FILE", help="the decision that started the run")
    p.add_argument("--fresh", required=True, metavar="FILE", help="the same event decided again, at the end")
    p.add_argument("--plan-run", required=True, choices=("true", "false"), help="the plan job's run= output")
    p.add_argument("--link", default="", help="this run's URL (the comment links the whole reports there)")
    p.add_argument("--note", default="", help="a line for the comment (the kernels gated)")
    p.add_argument("--policy", default="enforce", choices=("enforce", "advisory"),
                   help="advisory: a failing gate is reported, and the status still passes")
    p.add_argument("--github-output", metavar="FILE", help="append state, description, comment (base64) here")


@command("ci-gate", "the required status and the pull-request comment, from validated GPU reports")
@options(_gate_options)
def cmd_ci_gate(args) -> int:
    from harness.gate.authorize import read_authorization
    from harness.gate.comment import render
    from harness.gate.status import DESCRIPTION_LIMIT, parse_needs, verdict

    auth = read_authorization(_text(args.authorization), f"--authorization {args.authorization}")
    fresh = read_authorization(_text(args.fresh), f"--fresh {args.fresh}")
    needs = parse_needs(os.environ.get("NEEDS", ""), "NEEDS")
    files = [f for d in map(Path, args.reports) for f in sorted(d.glob("*/ci.json")) + sorted(d.glob("ci.json"))]
    v = verdict(auth, fresh, needs, args.plan_run == "true", files)
    if args.policy == "advisory" and v.state == "failure":
        v = replace(v, state="success", description=f"advisory: {v.description}"[:DESCRIPTION_LIMIT])
    body = render(v, fresh if fresh.run else auth, link=args.link, note=args.note)
    print(f"ci-gate: {v.state}: {v.description}")
    for problem in v.problems:
        print(f"ci-gate: refused: {problem}")
    lines = [f"state={v.state}", f"description={v.description}",
             f"comment={base64.b64encode(body.encode()).decode()}"]
    if args.github_output:
        with open(args.github_output, "a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return EXIT_OK


def _text(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"{path}: unreadable: {exc.strerror}") from None
