"""Known defects: failures of generated items recorded in a file, each an expected failure with its message.

Enabled by ``[tool.kernel-harness] known-defects = "known_defects.toml"`` (docs/adopting.md, "Known defects").
A project that tests kernels it does not own records there what the harness finds in them. For every generated
item (a case, or an op item such as ``<kernel>[<backend>-fp32-opcheck]``) the first ``[[defect]]`` whose
``items`` patterns name it decides:

- the item fails with a first line that ``match`` (a regex, searched) accepts: xfailed, the reason naming the
  defect and quoting the line;
- it fails otherwise: stays failed, with the recorded message beside the new one;
- it passes: fails ("no longer found"), so a defect the harness stops finding cannot go unnoticed;
- no defect names it: left as it is, so anything else must pass.

A defect that shows on one kind of device only (``devices = ["gpu"]``: compiled code, a CUDA graph capture;
``["interpreter"]``: the Triton interpreter on a CPU) leaves its items alone elsewhere.

Where the kernels run through the Triton interpreter an item of a defect's ``exact`` table must fail with exactly
that first line (a GPU draws other inputs and rounds its own way). The file is checked when it is read (keys,
regexes, exact lines) and again once the items are collected: an ``items`` pattern that names no generated item,
or an ``exact`` item that is not generated, fails the run, unless the run left out its kernel, backend, dtype or
tier (``--kernel``, ``--dtype``, ``--tier``) altogether. ``-k`` deselects after that check: deselecting is the
user's call.
Top-level tables other than ``[[defect]]`` are the project's own data and are left alone.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.steps import BadInput

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

KEY = "known-defects"
OUTCOME = "kernel-harness-known-defect"  # a report's user property: (defect id, found | passed | changed)
DEFECT_KEYS = ("id", "summary", "why", "items", "match", "exact", "devices")
# Where a defect shows: the Triton interpreter on a CPU, or compiled code on a GPU (a CUDA-graph capture, say,
# exists only there). Elsewhere the defect does not own its items, which must then pass.
DEVICES = ("interpreter", "gpu")
REQUIRED = ("id", "summary", "items", "match")
# kernel[backend-dtype-(full-|huge-)... or kernel[bwd-backend-mode-dtype-...: the part of an item name the run's
# --kernel/--backend/--dtype/--tier can leave out (only the full and huge tiers name themselves in their items)
_SCOPE = re.compile(r"^[^\[\]*]+\[(?:bwd-[^-\]]*-[^-\]]*-|[^-\]]*-)[^-\]]*-(?:full-|huge-)?")


def glob(pattern: str) -> re.Pattern:
    """An item pattern: the item's name, ``*`` standing for any run of characters and nothing else special
    (item names are full of brackets)."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


@dataclass(frozen=True)
class Defect:
    id: str
    summary: str
    why: str
    items: tuple[str, ...]                  # the patterns as written
    match: re.Pattern
    exact: tuple[tuple[str, str], ...]      # (item name, its first line under the interpreter)
    devices: tuple[str, ...] = DEVICES

    def names(self, item_name: str) -> bool:
        return any(glob(p).fullmatch(item_name) for p in self.items)

    def shows_on(self, device) -> bool:
        return ("interpreter" if getattr(device, "interpreted", False) else "gpu") in self.devices

    def exact_line(self, item_name: str) -> str | None:
        return dict(self.exact).get(item_name)


def _owner(defects, name: str) -> Defect | None:
    return next((d for d in defects if d.names(name)), None)


def read(path: Path, shown: str | None = None) -> dict:
    """The whole file, the project's own tables included (examples/vllm's tests read its [[bench]] there)."""
    shown = shown or Path(path).name
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{shown}: no such file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"{shown}: not readable as TOML: {exc}") from None


def load_defects(path: Path, shown: str) -> tuple[Defect, ...]:
    """The [[defect]] entries of ``path``; every problem is one BadInput line starting with ``shown``."""
    doc = read(path, shown)
    for key in doc:
        if key != "defect" and key.lower().rstrip("s") == "defect":
            raise BadInput(f"{shown}: {key}: unknown table (did you mean [[defect]]?)")
    raw = doc.get("defect", [])
    if not isinstance(raw, list) or not all(isinstance(d, dict) for d in raw):
        raise BadInput(f"{shown}: defect: expected an array of tables ([[defect]]), got {raw!r}")
    defects: list[Defect] = []
    for i, entry in enumerate(raw):
        defects.append(_defect(entry, f"{shown}: defect[{i}]", defects))
    return tuple(defects)


def _defect(entry: dict, where: str, before: list[Defect]) -> Defect:
    unknown = sorted(set(entry) - set(DEFECT_KEYS))
    if unknown:
        raise BadInput(f"{where}.{unknown[0]}: unknown key (known: {', '.join(DEFECT_KEYS)})")
    missing = [k for k in REQUIRED if k not in entry]
    if missing:
        raise BadInput(f"{where}: missing key {missing[0]}")
    for key in ("id", "summary", "why", "match"):
        if key in entry and (not isinstance(entry[key], str) or not entry[key].strip()):
            raise BadInput(f"{where}.{key}: expected a string, got {entry[key]!r}")
    where = f"{where} ({entry['id']})"
    if any(d.id == entry["id"] for d in before):
        raise BadInput(f"{where}.id: a defect listed before has the same id")
    items = entry["items"]
    if not isinstance(items, list) or not items or not all(isinstance(p, str) and p.strip() for p in items):
        raise BadInput(f"{where}.items: expected a non-empty list of item-name patterns, got {items!r}")
    try:
        match = re.compile(entry["match"])
    except re.error as exc:
        raise BadInput(f"{where}.match: not a regex: {exc}") from None
    exact = entry.get("exact", {})
    if not isinstance(exact, dict):
        raise BadInput(f"{where}.exact: expected a table of item name = first line, got {exact!r}")
    devices = entry.get("devices", list(DEVICES))
    if not isinstance(devices, list) or not devices or not set(devices) <= set(DEVICES):
        raise BadInput(f"{where}.devices: expected a non-empty list of {', '.join(map(repr, DEVICES))}, "
                       f"got {devices!r}")
    defect = Defect(entry["id"], entry["summary"], entry.get("why", ""), tuple(items), match, tuple(exact.items()),
                    tuple(devices))
    for name, line in defect.exact:
        if not isinstance(line, str) or "\n" in line:
            raise BadInput(f"{where}.exact.{name}: expected the failure's first line, got {line!r}")
        if not defect.names(name):
            raise BadInput(f"{where}.exact.{name}: not named by this defect's items")
        if (owner := _owner(before, name)) is not None:
            raise BadInput(f"{where}.exact.{name}: taken by {owner.id}, listed before (the first defect naming an "
                           "item wins)")
        if not match.search(line):
            raise BadInput(f"{where}.exact.{name}: the line does not match {match.pattern!r}")
    return defect


def _generated(item) -> bool:
    from harness.plugin.backward_items import BackwardCaseItem
    from harness.plugin.items import KernelCaseItem
    from harness.plugin.op_items import OpCheckItem

    return isinstance(item, (KernelCaseItem, BackwardCaseItem, OpCheckItem))


def _first_line(report) -> str:
    text = report.longreprtext.strip()
    return text.splitlines()[0] if text else ""


def enable(config: pytest.Config, project) -> None:
    """Read the project's known-defects file and register the hooks that apply it (a bad file: UsageError)."""
    path = project.known_defects
    shown = f"{project.where(KEY)}: {path.name}"
    try:
        defects = load_defects(path, shown)
    except BadInput as exc:
        raise pytest.UsageError(str(exc)) from None
    config.pluginmanager.register(KnownDefects(path.name, defects), "kernel-harness-known-defects")


class KnownDefects:
    """The hooks, with the run's state: which items were generated, and what each defect's items did."""

    def __init__(self, name: str, defects: tuple[Defect, ...]):
        self.name, self.defects = name, defects
        self.outcomes: dict[str, list[str]] = {d.id: [] for d in defects}  # found | passed | changed
        self.problems: list[str] = []

    @pytest.hookimpl(tryfirst=True)  # before -k deselects: the file is checked against everything generated
    def pytest_collection_modifyitems(self, config, items):
        generated = {i.name for i in items if _generated(i)}
        if not generated:  # `pytest tests/`: no spec collected, nothing to check the file against
            return

        def in_scope(pattern: str) -> bool:
            m = _SCOPE.match(pattern)
            return m is None or any(glob(m.group(0) + "*").fullmatch(n) for n in generated)

        for d in self.defects:
            named = set()
            for p in d.items:
                hits = {n for n in generated if glob(p).fullmatch(n)}
                if not hits and in_scope(p):
                    self.problems.append(f"{self.name}: {d.id}: items pattern {p!r} names no generated item")
                named |= hits
            if named and not any(_owner(self.defects, n) is d for n in named):
                self.problems.append(f"{self.name}: {d.id}: every item it names is taken by a defect listed "
                                     "before it")
            for name, _ in d.exact:
                if name not in generated and in_scope(name):
                    self.problems.append(f"{self.name}: {d.id}: exact item {name} is no longer generated (the "
                                         f"spec's cases changed? update {self.name})")
        if hasattr(config, "workeroutput"):  # a pytest-xdist worker: its exit status never reaches the controller
            config.workeroutput[OUTCOME] = list(self.problems)

    # Outermost, so the harness's own wrapper records the item's real outcome, and this one sees the last word.
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if report.when != "call" or not _generated(item):
            return report
        defect = _owner([d for d in self.defects if d.shows_on(item.device)], item.name)
        if defect is None or report.skipped:  # skipped: nothing was checked
            return report
        head = f"known defect {defect.id} ({defect.summary})"
        if report.passed:
            report.user_properties.append((OUTCOME, (defect.id, "passed")))
            report.outcome = "failed"
            report.longrepr = (f"{head} is no longer found: this item passed, {self.name} expects a failure "
                               f"matching {defect.match.pattern!r}")
            return report
        line = _first_line(report)
        want = defect.exact_line(item.name) if getattr(item.device, "interpreted", False) else None
        if defect.match.search(line) and (want is None or line == want):
            report.user_properties.append((OUTCOME, (defect.id, "found")))
            report.outcome = "skipped"
            report.wasxfail = f"known defect {defect.id}: {line}"
            return report
        report.user_properties.append((OUTCOME, (defect.id, "changed")))
        recorded = (f"exactly (the Triton interpreter's run recorded in {self.name}): {want}" if want is not None
                    else f"a first line matching {defect.match.pattern!r}")
        report.longrepr = (f"{report.longreprtext}\n{head}: its message changed\n  now:      {line}\n"
                           f"  recorded: {recorded}")
        return report

    def pytest_runtest_logreport(self, report):
        """Where the summary's counts come from: every report, the workers' too under pytest-xdist."""
        for key, value in getattr(report, "user_properties", ()):
            if key == OUTCOME and value[0] in self.outcomes:
                self.outcomes[value[0]].append(value[1])

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        """pytest-xdist's controller: the file problems its workers found at their collections."""
        for line in getattr(node, "workeroutput", {}).get(OUTCOME, ()):
            if line not in self.problems:
                self.problems.append(line)

    def pytest_sessionfinish(self, session, exitstatus):
        if self.problems and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config):
        ran = {d: outs for d, outs in self.outcomes.items() if outs}
        if not ran and not self.problems:
            return
        tr = terminalreporter
        tr.section(f"known defects ({self.name})")
        for d in self.defects:
            outs = ran.get(d.id)
            if not outs:
                continue
            found, gone, changed = (outs.count(k) for k in ("found", "passed", "changed"))
            status = "found" if found == len(outs) else "NO LONGER FOUND" if gone else "MESSAGE CHANGED"
            tr.write_line(f"{status}: {d.id}: {found} of {len(outs)} item(s) as recorded"
                          + (f", {gone} passed" if gone else "") + (f", {changed} changed" if changed else "")
                          + f": {d.summary}", red=status != "found")
        totals = [sum(o.count(k) for o in ran.values()) for k in ("found", "passed", "changed")]
        tr.write_line(f"{len(ran)} defect(s) run: {totals[0]} item(s) found as recorded, {totals[1]} no longer "
                      f"found, {totals[2]} with a changed message")
        for line in self.problems:
            tr.write_line(f"FAILED: {line}", red=True, bold=True)
