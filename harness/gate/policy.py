"""Policy comes from the base: the fields of a spec that decide how a pull request is judged, and what the
gate does when the pull request changes them.

A spec's policy-carrying fields are its ``[gate]`` rule, its tolerances (per dtype and per tensor), its
``[waive]`` entries, its reference, the reference's precision, its oracle and its roofline model (which the
plausibility check of a timing reads), which outputs are ``grad = false`` (left out uncompared by a call that
returns the others), which inputs are ``static = true`` (never given new values by the checks), and the same of
its backward: each gradient's tolerance and
``[backward.roofline]`` (a bwd or full row is judged by them). The gate judges both sides of a kernel with the
*base's* values; a pull request that changes any of them gets each change listed in compare.md's "Policy
changes" section, and the change applies only when a maintainer accepted it for the pull request's exact head
commit (``--accept-policy SHA``, passed by the trusted workflow). A kernel with no base version is new: its own
policy applies, and the report says so.

Everything here reads specs as data (harness.spec.load imports nothing) and kernel sources with ``ast``: it
runs in the deciding process, which never imports pull-request code. :func:`effective` runs in the worker.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from harness.gate.model import PolicyChange, PolicyReview

_TREE_PREFIX = re.compile(r"^kh_(?:base|pr)_[0-9a-f]{12}\.")
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
UNSET = "(unset)"


def plain_path(path: str | None) -> str:
    """An import path without the gate's tree prefix (``kh_base_<sha>.kernels.x:f`` -> ``kernels.x:f``)."""
    return _TREE_PREFIX.sub("", path) if path else UNSET


def _num(value) -> str:
    return UNSET if value is None else f"{value:g}"


def fields_of(spec) -> dict[str, str]:
    """Every policy-carrying field of ``spec`` as text, keyed by its TOML key."""
    out = {"gate.min_effect": _num(spec.gate.min_effect if spec.gate else None),
           "gate.floor_us": _num(spec.gate.floor_us if spec.gate else None),
           "kernel.reference": plain_path(spec.reference),
           "kernel.reference_precision": spec.reference_precision,
           "kernel.oracle": plain_path(spec.oracle)}
    out.update({f"tolerance.{d}": t.describe() for d, t in spec.tolerances.items()})
    out.update({f"{'outputs' if t.output else 'inputs'}.{t.name}.tolerance": t.tolerance.describe()
                for t in spec.tensors if t.tolerance is not None})
    out.update({f"waive.{key}": "waived" for key in spec.waivers})
    # grad = false lets a call that returns its outputs leave that output out, uncompared
    out.update({f"outputs.{t.name}.grad": "false" for t in spec.outputs if not t.grad})
    # static = true lets a kernel keep what it derives from that input: the checks stop giving it new values
    out.update({f"inputs.{t.name}.static": "true" for t in spec.inputs if t.static})
    b = spec.backward
    if b is not None:
        out.update({f"backward.tolerance.{n}.{d}": t.describe() for (n, d), t in b.tolerances.items()})
    for key, r in (("roofline", spec.roofline), ("backward.roofline", b.roofline if b is not None else None)):
        if r is not None:
            out.update({f"{key}.{k}": getattr(r, k).source for k in ("bytes", "flops", "read_bytes", "write_bytes")
                        if getattr(r, k) is not None})
    return out


def _function_source(path: str, roots) -> str | None:
    """The ``ast.dump`` of the function an import path names, read from its file below one of ``roots``
    (None where the file or the function is not found: a reference in an installed package, say)."""
    module, _, name = plain_path(path).partition(":")
    parts = module.split(".")
    for root in roots:
        for candidate in (Path(root, *parts).with_suffix(".py"), Path(root, *parts, "__init__.py")):
            if candidate.is_file():
                try:
                    tree = ast.parse(candidate.read_bytes())
                except (SyntaxError, ValueError, OSError):
                    return None
                for node in tree.body:
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                        return ast.dump(node, include_attributes=False)
                return None
    return None


def changes(kernel: str, base_spec, pr_spec, base_roots=(), pr_roots=()) -> tuple[PolicyChange, ...]:
    """What the pull request's spec changes of the base's policy, field by field. With the trees' roots, a
    reference whose code (its function's syntax tree, not its helpers') differs is a change too."""
    base, pr = fields_of(base_spec), fields_of(pr_spec)
    found = [PolicyChange(kernel, key, base.get(key, UNSET), pr.get(key, UNSET))
             for key in sorted(set(base) | set(pr)) if base.get(key, UNSET) != pr.get(key, UNSET)]
    if base_roots and pr_roots and base["kernel.reference"] == pr["kernel.reference"]:
        a = _function_source(base_spec.reference, base_roots)
        b = _function_source(pr_spec.reference, pr_roots)
        if a is not None and b is not None and a != b:
            found.append(PolicyChange(kernel, "kernel.reference (its code)", f"{base['kernel.reference']} at the base",
                                      "edited by the pull request"))
    return tuple(found)


def accepted(accept_sha: str | None, candidate_sha: str, dirty: bool = False) -> tuple[bool, str]:
    """Whether a maintainer's acceptance applies to this candidate, and the report's line about it. It names
    one commit, the full SHA: a later push is another commit and needs its own."""
    if not accept_sha:
        return False, ""
    sha = accept_sha.strip().lower()
    if not _SHA.fullmatch(sha):
        return False, f"--accept-policy {accept_sha!r}: not a full commit SHA, so nothing was accepted"
    if dirty:
        return False, "--accept-policy: the pull request side has uncommitted changes, which no SHA names"
    if sha != candidate_sha.lower():
        return False, (f"--accept-policy {sha[:12]}: not the candidate's commit {candidate_sha[:12]} (an acceptance "
                       "holds for the one commit it names), so nothing was accepted")
    return True, f"policy changes accepted for commit {sha[:12]}: the pull request's values applied"


def review(pairs, new_kernels, *, accept_sha: str | None, candidate_sha: str, dirty: bool = False,
           base_roots=(), pr_roots=()) -> PolicyReview:
    """Every kernel's policy changes (``pairs``: name -> (base spec, PR spec)), and whether they apply."""
    found = tuple(c for name in sorted(pairs) for c in changes(name, *pairs[name], base_roots, pr_roots))
    ok, line = accepted(accept_sha, candidate_sha, dirty)
    return PolicyReview(found, bool(found) and ok, tuple(sorted(new_kernels)), line)


def effective(pr_spec, base_spec):
    """The pull request's spec judged by the base's policy: its cases, tensors and backends with the base's
    tolerances, waivers, reference, reference precision and ``[gate]`` (in the worker, before checks). A
    tensor gets the tolerance of the base's same-named tensor (none where that has none). The base's
    reference is also the oracle of the pull request's own reference provider, which is then checked in
    full against it (the caller takes the providers from the pull request's own spec)."""
    base_tol = {t.name: t.tolerance for t in base_spec.tensors}
    # which outputs may be left out uncompared (grad = false) is the base's too: a new output is compared
    base_grad = {t.name: t.grad for t in base_spec.outputs}
    # and which inputs keep their values under the checks (static = true): a new input gets new values
    base_static = {t.name: t.static for t in base_spec.inputs}
    tensors = tuple(dataclasses.replace(t, tolerance=base_tol.get(t.name), grad=base_grad.get(t.name, True),
                                        static=base_static.get(t.name, False) and not t.output)
                    for t in pr_spec.tensors)
    backward = pr_spec.backward
    if backward is not None:  # the gradients' bounds and model too: the base's, none where the base has none
        base_bwd = base_spec.backward
        backward = dataclasses.replace(backward, tolerances=dict(base_bwd.tolerances) if base_bwd else {},
                                       roofline=base_bwd.roofline if base_bwd else None)
    return dataclasses.replace(pr_spec, tolerances=dict(base_spec.tolerances), waivers=dict(base_spec.waivers),
                               reference=base_spec.reference, reference_precision=base_spec.reference_precision,
                               oracle=base_spec.oracle or base_spec.reference, gate=base_spec.gate,
                               tensors=tensors, backward=backward)
