"""What GitHub would run for an event, from the workflow files as data: which tree's definitions it reads, which
workflows the event triggers, the jobs of a local reusable workflow, and each job's ``if:``, evaluated with a
small interpreter of GitHub's expression language (the subset the workflows use). The authorize job's outputs
come from the real decision (harness.gate.authorize), so a simulated run is the workflow logic played as Python.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

# Events whose workflow definitions come from the pull request's merge commit; every other event here reads the
# default branch's (GitHub's "Events that trigger workflows").
PR_COPY_EVENTS = {"pull_request", "pull_request_review", "pull_request_review_comment"}
_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|&&|\|\||[!(),.\[\]])"
                    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))")


def load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    if True in doc:  # YAML 1.1 reads the key `on` as a boolean
        doc["on"] = doc.pop(True)
    return doc


def triggers(doc: dict) -> set[str]:
    on = doc.get("on")
    return {on} if isinstance(on, str) else set(on or ())


class Expr:
    """``evaluate(text, context)`` for ``${{ }}`` expressions: literals, property access, ``! == != && ||``,
    parentheses, and the functions always, success, contains, startsWith, fromJSON, toJSON, format, join."""

    def __init__(self, text: str, ctx: dict):
        self.toks, self.i, self.ctx = self._tokens(text), 0, ctx

    @staticmethod
    def _tokens(text: str) -> list[tuple[str, str]]:
        out, pos = [], 0
        while pos < len(text.rstrip()):
            m = _TOKEN.match(text, pos)
            if not m:
                raise ValueError(f"cannot read {text[pos:pos + 20]!r}")
            out.append((m.lastgroup, m.group(m.lastgroup)))
            pos = m.end()
        return out

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def take(self, value=None):
        tok = self.peek()
        if value is not None and tok[1] != value:
            raise ValueError(f"expected {value!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def parse(self):
        v = self.or_()
        if self.i != len(self.toks):
            raise ValueError(f"trailing {self.peek()[1]!r}")
        return v

    def _chain(self, op: str, operand, combine):
        v = operand()
        while self.peek()[1] == op:
            self.take()
            v = combine(v, operand())
        return v

    def or_(self):
        return self._chain("||", self.and_, lambda v, r: v if truthy(v) else r)

    def and_(self):
        return self._chain("&&", self.cmp, lambda v, r: r if truthy(v) else v)

    def cmp(self):
        v = self.unary()
        while self.peek()[1] in ("==", "!="):
            op = self.take()[1]
            r = self.unary()
            same = _loose(v) == _loose(r)
            v = same if op == "==" else not same
        return v

    def unary(self):
        if self.peek()[1] == "!":
            self.take()
            return not truthy(self.unary())
        return self.postfix(self.atom())

    def atom(self):
        kind, value = self.take()
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind == "num":
            return float(value)
        if value == "(":
            v = self.or_()
            self.take(")")
            return v
        if kind != "name":
            raise ValueError(f"unexpected {value!r}")
        if value in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[value]
        if self.peek()[1] == "(":
            self.take("(")
            args = []
            while self.peek()[1] != ")":
                args.append(self.or_())
                if self.peek()[1] == ",":
                    self.take()
            self.take(")")
            return call(value, args, self.ctx)
        return self.ctx.get(value)

    def postfix(self, v):
        while self.peek()[1] in (".", "["):
            if self.take()[1] == ".":
                key = self.take()[1]
            else:
                key = self.or_()
                self.take("]")
            v = v.get(key) if isinstance(v, dict) else (v[int(key)] if isinstance(v, list) else None)
        return v


def _loose(v):
    return v.lower() if isinstance(v, str) else v


def truthy(v) -> bool:
    return v not in (None, False, "", 0)


def call(name: str, args: list, ctx: dict):
    if name in ("always", "success"):
        return True if name == "always" else ctx.get("_success", True)
    if name == "contains":
        hay, needle = args
        return needle in hay if isinstance(hay, (list, str)) else False
    if name == "startsWith":
        return str(args[0]).lower().startswith(str(args[1]).lower())
    if name == "fromJSON":
        return json.loads(args[0])
    if name == "toJSON":
        return json.dumps(args[0])
    if name == "format":
        return re.sub(r"\{(\d+)\}", lambda m: str(args[1 + int(m.group(1))]), args[0])
    if name == "join":
        return (args[1] if len(args) > 1 else ",").join(map(str, args[0]))
    raise ValueError(f"function {name} is not simulated")


def evaluate(text, ctx: dict):
    """A value with ``${{ }}`` parts evaluated (a whole expression keeps its type), or a bare ``if:``."""
    if not isinstance(text, str):
        return text
    whole = re.fullmatch(r"\s*\$\{\{(.*)\}\}\s*", text, re.S)
    if whole:
        return Expr(whole.group(1), ctx).parse()
    if "${{" in text:
        return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(Expr(m.group(1), ctx).parse()), text, flags=re.S)
    return text


def condition(job: dict, ctx: dict) -> bool:
    """A job's ``if:``; as on GitHub, one without a status function also needs every needed job to succeed."""
    if "if" not in job:
        return ctx.get("_success", True)
    text = str(job["if"])
    value = truthy(evaluate(text if "${{" in text else "${{ " + text + " }}", ctx))
    if not re.search(r"\b(always|success|failure|cancelled)\(", text):
        value = value and ctx.get("_success", True)
    return value


def workflow_tree(event_name: str, base: Path, pr: Path) -> Path:
    """Whose ``.github/workflows`` GitHub reads for the event."""
    return pr if event_name in PR_COPY_EVENTS else base


def started_jobs(event_name: str, event: dict, base: Path, pr: Path, authorize) -> list[dict]:
    """Every job GitHub would start for the event, as {workflow, job, runs_on, ref}. ``authorize(event_name,
    event)`` gives the authorize job's outputs (the real decision in the tests)."""
    tree = workflow_tree(event_name, base, pr)
    ref = "refs/pull/7/merge" if tree == pr else "refs/heads/main"
    out = []
    for path in sorted((tree / ".github" / "workflows").glob("*.yml")):
        doc = load(path)
        if event_name not in triggers(doc):
            continue
        ctx = {"github": {"event_name": event_name, "event": event, "repository": "o/r", "run_id": "1"},
               "inputs": {}, "vars": {}}
        out += _jobs(doc, ctx, tree, f"o/r/.github/workflows/{path.name}@{ref}", authorize, event_name, event)
    return out


def _jobs(doc: dict, ctx: dict, tree: Path, ref: str, authorize, event_name: str, event: dict) -> list[dict]:
    results: dict[str, dict] = {}
    started = []
    for name, job in (doc.get("jobs") or {}).items():  # the workflows list jobs after the ones they need
        needs = [job["needs"]] if isinstance(job.get("needs"), str) else list(job.get("needs") or ())
        jctx = {**ctx, "needs": {n: results.get(n, {"result": "skipped", "outputs": {}}) for n in needs},
                "_success": all(results.get(n, {}).get("result") == "success" for n in needs)}
        if not condition(job, jctx):
            results[name] = {"result": "skipped", "outputs": {}}
            continue
        if "uses" in job and str(job["uses"]).startswith("./"):
            inner = load(tree / job["uses"][2:])
            defaults = {k: v.get("default") for k, v in inner["on"]["workflow_call"].get("inputs", {}).items()}
            given = {k: evaluate(v, jctx) for k, v in (job.get("with") or {}).items()}
            started += _jobs(inner, {**ctx, "inputs": {**defaults, **given}}, tree, ref, authorize, event_name,
                             event)
            results[name] = {"result": "success", "outputs": {}}
            continue
        runs_on = job.get("runs-on")
        matrix = (job.get("strategy") or {}).get("matrix")
        legs = evaluate(matrix.get("runner"), jctx) if isinstance(matrix, dict) and "runner" in matrix else [None]
        for leg in legs:
            labels = evaluate(runs_on, {**jctx, "matrix": {"runner": leg}})
            started.append({"job": name, "runs_on": labels, "ref": ref, "steps": job.get("steps") or []})
        outputs = authorize(event_name, event) if name == "authorize" else {"run": "true", "kernels": "k"}
        results[name] = {"result": "success", "outputs": outputs}
    return started


def self_hosted(job: dict) -> bool:
    labels = job["runs_on"]
    return "self-hosted" in (labels if isinstance(labels, list) else [labels])
