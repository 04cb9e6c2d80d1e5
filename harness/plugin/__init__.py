"""pytest plugin: every spec file of the spec folders becomes test items, kernel x backend x dtype x case.

Registered through the ``pytest11`` entry point, so plain ``pytest`` picks it up. Items are made by a
collection hook (no generated files); a broken spec becomes one failing item with its one-line problems,
so the other kernels still run. The spec folders, the import roots and the default tier come from the
project's ``[tool.kernel-harness]`` table (harness.config); ``--specs`` and ``--tier`` override it.
With its ``known-defects`` key, the failures recorded there are expected failures (known_defects.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.plugin.items import KernelCaseItem, SpecErrorItem, SpecFile, _close_pool
from harness.plugin.options import KEY as _KEY
from harness.spec.model import RUN_TIERS
from harness.spec.schema import did_you_mean
from harness.steps import comma_list


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("kernel-harness", "kernel-harness: generated kernel tests")
    g.addoption("--kernel", action="append", default=[], help="only these kernels (repeatable or comma list)")
    g.addoption("--dtype", action="append", default=[], help="only these dtypes (fp32, fp16, bf16)")
    g.addoption("--backend", action="append", default=[], help="only these backends (triton, cuda, reference)")
    g.addoption("--tier", choices=sorted(RUN_TIERS), default=None,
                help="ci: edge + ci cases; full: + realistic and >2**31-element cases (GPU) (default: "
                     "[tool.kernel-harness] tier, else ci)")
    g.addoption("--seed", type=int, default=0, help="base seed for the generated inputs")
    g.addoption("--specs", action="append", default=[], metavar="DIR",
                help="a spec folder (repeatable; default: [tool.kernel-harness] specs of pyproject.toml, else specs)")
    g.addoption("--isolate", action="store_true", dest="isolate", default=None,
                help="run each case in a worker process, so a crash or hang fails that case only "
                     "(default: on with a GPU, off on the CPU interpreter)")
    g.addoption("--no-isolate", action="store_false", dest="isolate", default=None,
                help="run the cases in the pytest process")
    g.addoption("--shard", default=None, metavar="I/N",
                help="run shard I of N (1-based) of the selected items, split by a hash of each item's id: "
                     "stable from run to run, so N runners of a CI matrix run every item once")
    g.addoption("--gpus", default=None, metavar="N|all",
                help="spread the items over N of this host's GPUs (all: every visible one), one pytest-xdist "
                     "worker per GPU with CUDA_VISIBLE_DEVICES set to it; the summary says which GPU ran what")


def _set(values) -> set[str]:
    return set(comma_list(values))


def _spec_folders(config: pytest.Config, project) -> tuple[Path, ...]:
    """--specs (each relative to where pytest runs, else to its rootdir), else the project's spec folders."""
    given = config.getoption("specs")
    if not given:
        return tuple(p.resolve() for p in project.specs)
    out = []
    for d in map(Path, given):
        here = Path(config.invocation_params.dir) / d
        out.append((d if d.is_absolute() else here if here.is_dir() else Path(config.rootpath) / d).resolve())
    return tuple(out)


def pytest_configure(config: pytest.Config) -> None:
    from harness.config import load_config, use_import_roots
    from harness.spec.imports import use_interpreter_if_no_gpu
    from harness.steps import BadInput

    try:
        project = load_config(Path(config.invocation_params.dir))
    except BadInput as exc:
        raise pytest.UsageError(str(exc)) from None
    tier = config.getoption("tier") or project.tier
    if tier not in RUN_TIERS:
        raise pytest.UsageError(f"{project.where('tier')}: expected one of {', '.join(sorted(RUN_TIERS))}, "
                                f"got {tier!r}")
    if project.known_defects is not None:  # the project's recorded defects: expected failures (known_defects.py)
        from harness.plugin.known_defects import enable

        enable(config, project)
    from harness.plugin.sharding import enable as enable_sharding

    enable_sharding(config, config.getoption("shard"))
    from harness.plugin.gpus import enable as enable_gpus

    enable_gpus(config, config.getoption("gpus"))
    use_import_roots(project)  # before any kernel module is imported, as is the interpreter switch
    use_interpreter_if_no_gpu()
    folders = _spec_folders(config, project)
    config.stash[_KEY] = {
        "specs_dirs": folders, "kernels": _set(config.getoption("kernel")),
        "dtypes": _set(config.getoption("dtype")), "backends": _set(config.getoption("backend")),
        "tier": tier, "seed": config.getoption("seed"), "specs": [], "outcomes": {},
    }
    # Spec folders outside what pytest was asked to collect are collected too, so `pytest --specs DIR` and a
    # plain `pytest` in a project whose testpaths do not name its spec folders both run the specs. Paths given
    # on the command line without --specs (`pytest tests/test_x.py`), or the folder pytest runs in, are left
    # as they are, and so is a folder the arguments already reach into (`--specs specs specs/rope.toml`).
    if config.getoption("specs") or config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        config.args += [str(d) for d in folders if d.is_dir() and not any(_covers(a, d, config) for a in config.args)]
    known = {p.stem for d in folders for p in d.glob("*.toml")}
    for k in sorted(config.stash[_KEY]["kernels"] - known):
        where = ", ".join(str(d) for d in folders)
        raise pytest.UsageError(f"--kernel {k}: no spec {k}.toml in {where}{did_you_mean(k, known)}")


def _covers(arg: str, path: Path, config) -> bool:
    """Whether a collection argument is the folder, holds it, or names something in it (a spec, one item)."""
    p = Path(arg.split("::")[0])
    p = (p if p.is_absolute() else Path(config.invocation_params.dir) / p).resolve()
    return p == path or p in path.parents or path in p.parents


def pytest_ignore_collect(collection_path: Path, config: pytest.Config):
    """With --kernel, nothing but the spec folders is collected: the project's other tests (the harness's own,
    in this repository) are not even imported."""
    opts = config.stash.get(_KEY, None)
    if not opts or not opts["kernels"]:
        return None
    p = collection_path.resolve()
    if any(p == d or d in p.parents or p in d.parents for d in opts["specs_dirs"]):
        return None
    return True


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    opts = parent.config.stash[_KEY]
    if file_path.suffix != ".toml" or file_path.parent.resolve() not in opts["specs_dirs"]:
        return None
    if opts["kernels"] and file_path.stem not in opts["kernels"]:
        return None
    return SpecFile.from_parent(parent, path=file_path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.stash[_KEY]["kernels"]:
        return
    # --kernel selects generated kernel tests only: what was collected anyway (a test file named on the command
    # line) is deselected.
    from harness.plugin.backward_items import BackwardCaseItem
    from harness.plugin.bench_items import BenchCaseItem
    from harness.plugin.op_items import OpCheckItem

    generated = (KernelCaseItem, SpecErrorItem, BenchCaseItem, OpCheckItem, BackwardCaseItem)
    keep = [i for i in items if isinstance(i, generated)]
    dropped = [i for i in items if not isinstance(i, generated)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if isinstance(item, KernelCaseItem) and report.when == "call":
        item.config.stash[_KEY]["outcomes"].setdefault(item.spec.name, []).append(report.outcome)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    from harness.spec.waivers import spec_waivers
    from harness.target.resolve import describe

    opts = config.stash.get(_KEY, None)
    if not opts or not opts["specs"]:
        return
    tr = terminalreporter
    tr.section("kernel-harness")
    for _spec, statuses in opts["specs"]:
        tr.write_line(describe(statuses))
    lines = [w for s, _ in opts["specs"] for w in spec_waivers(s)]
    if lines:
        tr.write_line("loosened tolerances and waived checks:")
        for w in lines:
            tr.write_line(f"  {w.kernel}: {w.what}: {w.reason}")
    for name in opts.get("all_skipped", []):
        tr.write_line(f"FAILED: every test of kernel {name} was skipped on this device: nothing was tested",
                      red=True, bold=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    _close_pool(session.config)
    opts = session.config.stash.get(_KEY, None)
    if not opts:
        return
    skipped_all = sorted(k for k, outs in opts["outcomes"].items() if outs and all(o == "skipped" for o in outs))
    opts["all_skipped"] = skipped_all
    if skipped_all and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    _close_pool(config)  # also after an interrupted session: no worker outlives pytest
