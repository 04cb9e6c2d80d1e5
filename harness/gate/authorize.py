"""Who may send a pull request's code to a GPU runner, and who may accept what the gate found (docs/ci.md).

The trusted workflow (gpu.yml, from the default branch) runs this from its own checkout, never the pull
request's copy. Everything here is a pure function over the event payload GitHub wrote and the answers of the
API, looked up when the decision is made (the pull request as it is now, its comments, each person's role):

- **running** the GPU jobs on a commit needs a person with write access, on the event itself: their own push
  (``opened``/``synchronize``/``reopened`` sent by them), the label ``gate:run`` *applied* by them (it
  authorizes the head of that moment, and only while the label stays on), or a comment ``/gate run <sha>``
  naming the head commit. A new push is a new head: it needs a new authorization.
- **accepting** a SLOWER verdict or a change of the gate's policy needs a comment
  ``/gate accept-regression <sha> <reason>`` or ``/gate accept-policy <sha> <reason>`` by a person with triage
  access or more who is not the pull request's author, naming the head commit. It counts only for that commit.
- **withdrawing**: removing the label, or editing or deleting a ``/gate`` comment, sets the status back to
  pending; the next authorized run decides again.

Nothing in a pull request's files, title or body authorizes anything: only events and comments GitHub
attributes to a person, and that person's role as the API reports it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

from harness.steps import BadInput

RUN_LABEL = "gate:run"
ROLES = ("none", "read", "triage", "write", "maintain", "admin")
RUN_ROLES = frozenset({"write", "maintain", "admin"})
ACCEPT_ROLES = RUN_ROLES | {"triage"}
ACCEPT_KINDS = ("regression", "policy")
AUTH_FORMAT = "kernel-harness-authorization/1"
MIN_SHA = 7  # the shortest commit prefix a command may name, as git shows it
_COMMAND = re.compile(r"/gate[ \t]+(run|accept-regression|accept-policy)(?:[ \t]+(\S+))?(?:[ \t]+(.*))?")
_SHA = re.compile(r"[0-9a-f]{40}")
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")
PR_ACTIONS = ("opened", "synchronize", "reopened")


@dataclass(frozen=True)
class Command:
    verb: str           # run | accept-regression | accept-policy
    sha: str            # the commit prefix it names, lower case; "" when it names none
    reason: str         # accept-*: why; "" for run
    by: str             # the comment's author, as GitHub records it
    comment_id: int
    problem: str = ""   # a command we read but cannot honour (no commit named, no reason)

    def names(self, head: str) -> bool:
        return len(self.sha) >= MIN_SHA and head.startswith(self.sha)


@dataclass(frozen=True)
class Trigger:
    kind: str           # push, label, unlabel, comment, withdrawn, trusted (no pull request), ignored
    pr: int | None
    actor: str          # who sent the event
    sha: str = ""       # the head commit the event names (a pull_request_target payload); "" for a comment
    command: Command | None = None
    why: str = ""       # ignored: why


@dataclass(frozen=True)
class Acceptance:
    kind: str           # regression | policy
    by: str
    reason: str


@dataclass(frozen=True)
class Decision:
    relevant: bool      # the status on the head commit changes (a run, or back to pending)
    run: bool           # the GPU jobs start
    pr: int | None
    sha: str            # the commit gated; "" when none
    base: str           # the base revision the gate compares against
    why: str            # one line, shown in the status and the comment
    by: str = ""        # who authorized the run
    accepts: tuple[Acceptance, ...] = ()

    def accepted(self, kind: str) -> Acceptance | None:
        return next((a for a in self.accepts if a.kind == kind), None)


def parse_command(body: str, by: str, comment_id: int) -> Command | None:
    """The ``/gate`` command on a comment's first non-blank line, or None when it holds none."""
    first = next((line.strip() for line in str(body or "").splitlines() if line.strip()), "")
    m = _COMMAND.fullmatch(first)
    if not m:
        return None
    verb, sha, rest = m.group(1), (m.group(2) or "").lower(), (m.group(3) or "").strip()
    problem = ""
    if not re.fullmatch(rf"[0-9a-f]{{{MIN_SHA},40}}", sha):
        problem = f"/gate {verb} must name the head commit (at least {MIN_SHA} hex digits)"
    elif verb != "run" and not rest:
        problem = f"/gate {verb} {sha} must say why"
    return Command(verb, sha, rest[:300] if verb != "run" else "", by, comment_id, problem)


def _login(user) -> str:
    login = str((user or {}).get("login") or "") if isinstance(user, dict) else ""
    return login if _LOGIN.fullmatch(login) else ""


def _pr_number(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def read_event(name: str, event: dict) -> Trigger:
    """What the event asks for. A payload that is not what GitHub writes for ``name`` is BadInput."""
    if not isinstance(event, dict):
        raise BadInput(f"event {name}: expected a JSON object")
    actor = _login(event.get("sender"))
    if name in ("schedule", "workflow_dispatch", "push"):
        # the default branch's own code, started by GitHub's clock or by someone with write access
        return Trigger("trusted", None, actor, why=f"{name} run")
    if name == "pull_request_target":
        pr = event.get("pull_request") or {}
        number, sha = _pr_number(pr.get("number")), str((pr.get("head") or {}).get("sha") or "")
        if number is None or not _SHA.fullmatch(sha) or not actor:
            raise BadInput("event pull_request_target: no pull_request.number, head.sha or sender.login")
        action = event.get("action")
        label = str((event.get("label") or {}).get("name") or "")
        if action in PR_ACTIONS:
            return Trigger("push", number, actor, sha)
        if action in ("labeled", "unlabeled") and label == RUN_LABEL:
            return Trigger("label" if action == "labeled" else "unlabel", number, actor, sha)
        return Trigger("ignored", number, actor, sha, why=f"{action} {label or ''}".strip() + ": not for the gate")
    if name == "issue_comment":
        issue, comment = event.get("issue") or {}, event.get("comment") or {}
        number = _pr_number(issue.get("number"))
        if number is None or not isinstance(comment, dict):
            raise BadInput("event issue_comment: no issue.number or comment")
        if not issue.get("pull_request"):
            return Trigger("ignored", number, actor, why="a comment on an issue, not a pull request")
        by, cid = _login(comment.get("user")), comment.get("id")
        cid = cid if isinstance(cid, int) else 0
        now = parse_command(comment.get("body", ""), by, cid)
        action = event.get("action")
        if action == "created" and now:
            return Trigger("comment", number, by, command=now)
        before = parse_command(((event.get("changes") or {}).get("body") or {}).get("from", ""), by, cid)
        if action in ("edited", "deleted") and (now or before):
            return Trigger("withdrawn", number, by, command=before or now)
        return Trigger("ignored", number, by, why="no /gate command")
    return Trigger("ignored", None, actor, why=f"event {name}: not for the gate")


def parse_role(answer: dict | None) -> str:
    """A person's role from ``GET repos/{repo}/collaborators/{login}/permission``; None (404): none."""
    if not isinstance(answer, dict):
        return "none"
    for key in ("role_name", "permission"):
        role = str(answer.get(key) or "")
        if role in ROLES:
            return role
    return "none"


def logins_to_look_up(trigger: Trigger, comments: list[dict]) -> list[str]:
    """Whose role the decision needs: the event's actor and every author of a ``/gate`` comment."""
    found = [trigger.actor] if trigger.actor else []
    for c in comments:
        cmd = parse_command(c.get("body", ""), _login(c.get("user")), 0)
        if cmd and cmd.by and cmd.by not in found:
            found.append(cmd.by)
    return found


def acceptances(head: str, author: str, comments: list[dict], roles: dict[str, str]) -> tuple[Acceptance, ...]:
    """The latest acceptance of each kind that names ``head``, by someone allowed who is not the author."""
    latest: dict[str, Acceptance] = {}
    for c in comments:
        cmd = parse_command(c.get("body", ""), _login(c.get("user")), 0)
        if not cmd or cmd.verb == "run" or cmd.problem or not cmd.names(head):
            continue
        if cmd.by == author or roles.get(cmd.by, "none") not in ACCEPT_ROLES:
            continue
        kind = cmd.verb.removeprefix("accept-")
        latest[kind] = Acceptance(kind, cmd.by, cmd.reason)
    return tuple(latest[k] for k in ACCEPT_KINDS if k in latest)


def decide(trigger: Trigger, pull: dict | None, roles: dict[str, str], comments: list[dict], *,
           sha: str = "", against: str = "HEAD") -> Decision:
    """The decision for ``trigger``, from the pull request as the API shows it now (``pull``), its comments and
    the roles of the people involved. ``sha``/``against``: the commit and base of a trusted run (nightly, by hand,
    a push): no status to post, every kernel, the base ``against`` (HEAD: an A/A run)."""
    if trigger.kind == "trusted":
        if not _SHA.fullmatch(sha) or not re.fullmatch(r"[0-9a-f]{40}|HEAD|[A-Za-z0-9_./-]{1,100}", against) \
                or against.startswith("-"):
            raise BadInput(f"{trigger.why}: --sha {sha[:50]!r} / --against {against[:50]!r}: not revisions")
        return Decision(False, True, None, sha, against, trigger.why, trigger.actor)
    if trigger.kind == "ignored" or pull is None:
        return Decision(False, False, trigger.pr, "", "", trigger.why or "no pull request")
    head = str((pull.get("head") or {}).get("sha") or "")
    base = str((pull.get("base") or {}).get("sha") or "")
    author = _login(pull.get("user"))
    if not _SHA.fullmatch(head) or not _SHA.fullmatch(base) or pull.get("number") != trigger.pr:
        raise BadInput(f"pull request #{trigger.pr}: the API's answer has no head.sha, base.sha or number")
    if pull.get("state") != "open":
        return Decision(False, False, trigger.pr, head, base, "the pull request is not open")
    role = roles.get(trigger.actor, "none")
    short = head[:MIN_SHA]
    waiting = f"waiting for a maintainer: `/gate run {short}` or the label {RUN_LABEL}"

    def hold(why: str, relevant: bool = True) -> Decision:
        return Decision(relevant, False, trigger.pr, head, base, why)

    def run(why: str) -> Decision:
        return Decision(True, True, trigger.pr, head, base, why, trigger.actor,
                        acceptances(head, author, comments, roles))

    if trigger.sha and trigger.sha != head and trigger.kind != "unlabel":
        # the head moved after the event: the newer push has its own event, and its own decision
        return hold(f"the head moved to {short} after this event", relevant=trigger.kind == "label")
    if trigger.kind == "push":
        if role in RUN_ROLES:
            return run(f"pushed by {trigger.actor} ({role})")
        return hold(waiting)
    if trigger.kind == "label":
        labels = {str(lab.get("name")) for lab in pull.get("labels") or () if isinstance(lab, dict)}
        if RUN_LABEL not in labels:
            return hold(f"the label {RUN_LABEL} was removed; {waiting}")
        if role in RUN_ROLES:
            return run(f"label {RUN_LABEL} applied by {trigger.actor} ({role})")
        return hold(f"the label {RUN_LABEL} was applied by {trigger.actor} ({role}), who cannot authorize; {waiting}")
    if trigger.kind == "unlabel":
        return hold(f"authorization withdrawn: {trigger.actor} removed the label {RUN_LABEL}; {waiting}")
    cmd = trigger.command
    needed = RUN_ROLES if cmd.verb == "run" else ACCEPT_ROLES
    if role not in needed or (cmd.verb != "run" and cmd.by == author):
        # not theirs to give (or to take back): no effect at all, so nobody's comment can flip a status
        return hold(f"{cmd.by or 'someone'} ({role}) may not use /gate {cmd.verb} here", relevant=False)
    if trigger.kind == "withdrawn":
        return hold(f"a /gate {cmd.verb} comment by {cmd.by} was edited or deleted; {waiting}")
    if cmd.problem:
        return hold(cmd.problem + f"; {waiting}")
    if not cmd.names(head):
        return hold(f"/gate {cmd.verb} {cmd.sha} does not name the head {short}; {waiting}")
    if not any(c.get("id") == cmd.comment_id and parse_command(c.get("body", ""), _login(c.get("user")),
                                                               cmd.comment_id) == cmd for c in comments):
        return hold(f"the /gate {cmd.verb} comment is gone or changed; {waiting}")
    if role in RUN_ROLES:
        return run(f"/gate {cmd.verb} {cmd.sha} by {cmd.by} ({role})")
    # a triager's acceptance is recorded in the comments; the next authorized run counts it
    return hold(f"acceptance by {cmd.by} recorded for {short}", relevant=False)


def authorization_doc(d: Decision) -> dict:
    """The decision as the GPU job and the gate job read it (``--authorization``)."""
    return {"format": AUTH_FORMAT, **{k: v for k, v in asdict(d).items() if k != "accepts"},
            "accept": {k: (asdict(a) if (a := d.accepted(k)) else None) for k in ACCEPT_KINDS}}


def read_authorization(text: str, where: str) -> Decision:
    """An ``authorization_doc`` back into a Decision; anything else is BadInput naming ``where``."""
    try:
        doc = json.loads(text)
    except ValueError:
        raise BadInput(f"{where}: not JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != AUTH_FORMAT:
        raise BadInput(f"{where}: format: expected {AUTH_FORMAT!r}")
    try:
        accepts = tuple(Acceptance(k, str(a["by"]), str(a["reason"])) for k in ACCEPT_KINDS
                        if isinstance(a := doc["accept"].get(k), dict))
        d = Decision(bool(doc["relevant"]), bool(doc["run"]), _pr_number(doc["pr"]), str(doc["sha"]),
                     str(doc["base"]), str(doc["why"]), str(doc["by"]), accepts)
    except (KeyError, TypeError, AttributeError) as exc:
        raise BadInput(f"{where}: missing or malformed key {exc}") from None
    if d.run and not (_SHA.fullmatch(d.sha) and re.fullmatch(r"[A-Za-z0-9_./-]{1,100}", d.base)
                      and not d.base.startswith("-")):
        raise BadInput(f"{where}: sha/base: not commits")
    return d


def output_lines(d: Decision) -> list[str]:
    """``key=value`` lines for ``$GITHUB_OUTPUT`` (no value holds a newline)."""
    one = " ".join(d.why.split())
    return [f"relevant={'true' if d.relevant else 'false'}", f"run={'true' if d.run else 'false'}",
            f"pr={d.pr or ''}", f"sha={d.sha}", f"base={d.base}", f"why={one}",
            f"authorization={json.dumps(authorization_doc(d), separators=(',', ':'))}"]
