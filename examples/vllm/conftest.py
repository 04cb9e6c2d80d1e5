"""The defects the harness finds in the vendored vLLM kernels are expected failures, each with its message.

known_defects.toml lists them. For every generated item (``specs/<kernel>.toml::<kernel>[...]``) this plugin
looks up the first defect whose ``items`` patterns name it:

- named, and the item fails with a first line that ``match`` (a regex, searched) accepts: reported as xfailed,
  the reason naming the defect and quoting the message;
- named, and it fails otherwise: stays failed, with a line saying what was expected;
- named, and it passes: fails ("no longer found"), so a defect the harness stops finding cannot go unnoticed;
- named by no defect: left as it is, so anything else must pass.

Each defect's ``exact`` items must fail with exactly the recorded first line where the kernels run through the
Triton interpreter (a GPU draws other inputs and rounds its own way), and each of them must still be generated: an
exact item that its spec no longer generates fails the session, unless the run left out its kernel or dtype
(``--kernel``, ``--dtype``) altogether. Deselecting it (``-k``) is the user's call.

The peers' findings at the bench shapes (``[[bench]]``) are `python -m harness bench`'s, not pytest's:
tests/test_bench_findings.py checks those.

This is the same mechanism as examples/liger/conftest.py, for another project's file: the spec language has no
"known defect" yet (README.md, "Gaps"), so each adopting project carries it.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

KNOWN = Path(__file__).with_name("known_defects.toml")
PROJECT = "vLLM"
_ITEM = re.compile(r"^(?P<kernel>\w+)\[(?P<backend>[^-\]]+)-(?P<dtype>[^-\]]+)-")


@dataclass(frozen=True)
class Defect:
    id: str
    summary: str
    items: tuple[re.Pattern, ...]
    match: re.Pattern
    exact: dict[str, str]

    def names(self, item_name: str) -> bool:
        return any(p.fullmatch(item_name) for p in self.items)


def glob(pattern: str) -> re.Pattern:
    """An item pattern: the item's name, ``*`` standing for any run of characters (and nothing else special:
    item names are full of brackets)."""
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def known(path: Path = KNOWN) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def load_defects(path: Path = KNOWN) -> list[Defect]:
    return [Defect(d["id"], d["summary"], tuple(glob(p) for p in d["items"]), re.compile(d["match"]),
                   dict(d.get("exact", {}))) for d in known(path).get("defect", [])]


def _first_line(report) -> str:
    text = report.longreprtext.strip()
    return text.splitlines()[0] if text else ""


def _generated(item) -> bool:
    return hasattr(item, "spec") and hasattr(item, "case")  # the harness's KernelCaseItem


_KEY = pytest.StashKey[dict]()


def pytest_configure(config):
    config.stash[_KEY] = {"defects": load_defects(), "ran": set(), "generated": set(), "problems": []}


def _defect_of(config, name: str) -> Defect | None:
    return next((d for d in config.stash[_KEY]["defects"] if d.names(name)), None)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Every generated item, before -k or --kernel deselects any."""
    config.stash[_KEY]["generated"] |= {i.name for i in items if _generated(i)}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when != "call" or not _generated(item):
        return report
    defect = _defect_of(item.config, item.name)
    if defect is None:
        return report
    item.config.stash[_KEY]["ran"].add(item.name)
    interpreted = bool(getattr(item.device, "interpreted", False))
    if report.passed:
        report.outcome = "failed"
        report.longrepr = (f"known {PROJECT} defect {defect.id} ({defect.summary}) is no longer found: this item "
                           f"passed, known_defects.toml expects a failure matching {defect.match.pattern!r}")
        return report
    if not report.failed:  # skipped: nothing was checked
        return report
    line = _first_line(report)
    want = defect.exact.get(item.name) if interpreted else None
    if not defect.match.search(line):
        why = f"expected a first line matching {defect.match.pattern!r}"
    elif want is not None and line != want:
        why = f"expected exactly (the Triton interpreter's run recorded in known_defects.toml):\n{want}"
    else:
        report.outcome = "skipped"
        report.wasxfail = f"known {PROJECT} defect {defect.id}: {line}"
        return report
    report.longrepr = f"{report.longreprtext}\nknown {PROJECT} defect {defect.id} ({defect.summary}), but {why}"
    return report


def pytest_sessionfinish(session, exitstatus):
    state = session.config.stash.get(_KEY, None)
    if not state or not state["generated"]:
        return
    pairs = {(m["kernel"], m["dtype"]) for n in state["generated"] if (m := _ITEM.match(n))}
    for defect in state["defects"]:
        for name in defect.exact:
            m = _ITEM.match(name)
            if m and (m["kernel"], m["dtype"]) in pairs and name not in state["generated"]:
                state["problems"].append(f"known {PROJECT} defect {defect.id}: {name} is no longer generated (the "
                                         "spec's cases changed? update known_defects.toml)")
    if state["problems"] and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = config.stash.get(_KEY, None)
    if not state or not state["ran"]:
        return
    terminalreporter.section(f"known {PROJECT} defects")
    for defect in state["defects"]:
        n = sum(1 for name in state["ran"] if defect.names(name) and _defect_of(config, name) is defect)
        if n:
            terminalreporter.write_line(f"{defect.id}: {n} item(s): {defect.summary}")
    for line in state["problems"]:
        terminalreporter.write_line(f"FAILED: {line}", red=True, bold=True)
