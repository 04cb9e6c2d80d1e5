"""pytest plugin: every ``specs/*.toml`` becomes test items, kernel x backend x dtype x case.

Registered through the ``pytest11`` entry point, so plain ``pytest`` picks it up. Items are made by a
collection hook (no generated files); a broken spec becomes one failing item with its one-line problems,
so the other kernels still run.
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
    g.addoption("--tier", choices=sorted(RUN_TIERS), default="ci",
                help="ci: edge + ci cases (default); full: + realistic and >2**31-element cases (GPU)")
    g.addoption("--seed", type=int, default=0, help="base seed for the generated inputs")
    g.addoption("--specs", default="specs", help="directory of spec files (default: specs)")
    g.addoption("--isolate", action="store_true", dest="isolate", default=None,
                help="run each case in a worker process, so a crash or hang fails that case only "
                     "(default: on with a GPU, off on the CPU interpreter)")
    g.addoption("--no-isolate", action="store_false", dest="isolate", default=None,
                help="run the cases in the pytest process")


def _set(values) -> set[str]:
    return set(comma_list(values))


def pytest_configure(config: pytest.Config) -> None:
    from harness.spec.imports import use_interpreter_if_no_gpu

    use_interpreter_if_no_gpu()  # before any kernel module is imported
    specs_dir = Path(config.getoption("specs"))
    if not specs_dir.is_absolute():
        here = Path(config.invocation_params.dir) / specs_dir
        specs_dir = here if here.is_dir() else Path(config.rootpath) / specs_dir
    config.stash[_KEY] = {
        "specs_dir": specs_dir.resolve(), "kernels": _set(config.getoption("kernel")),
        "dtypes": _set(config.getoption("dtype")), "backends": _set(config.getoption("backend")),
        "tier": config.getoption("tier"), "seed": config.getoption("seed"), "specs": [], "outcomes": {},
    }
    # --specs elsewhere than testpaths: collect it too, so `pytest --specs DIR` just works.
    explicit = config.getoption("specs") != "specs"
    if explicit and specs_dir.is_dir() and not any(_covers(a, specs_dir, config) for a in config.args):
        config.args.append(str(specs_dir))
    known = {p.stem for p in specs_dir.glob("*.toml")}
    for k in sorted(config.stash[_KEY]["kernels"] - known):
        raise pytest.UsageError(f"--kernel {k}: no spec {specs_dir / (k + '.toml')}{did_you_mean(k, known)}")


def _covers(arg: str, path: Path, config) -> bool:
    p = Path(arg.split("::")[0])
    p = (p if p.is_absolute() else Path(config.invocation_params.dir) / p).resolve()
    return p == path or p in path.parents


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    opts = parent.config.stash[_KEY]
    if file_path.suffix != ".toml" or file_path.parent.resolve() != opts["specs_dir"]:
        return None
    if opts["kernels"] and file_path.stem not in opts["kernels"]:
        return None
    return SpecFile.from_parent(parent, path=file_path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.stash[_KEY]["kernels"]:
        return
    # --kernel selects generated kernel tests only: the harness's own tests are deselected.
    from harness.plugin.bench_items import BenchCaseItem
    from harness.plugin.op_items import OpCheckItem

    generated = (KernelCaseItem, SpecErrorItem, BenchCaseItem, OpCheckItem)
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
