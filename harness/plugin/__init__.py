"""pytest plugin: every ``specs/*.toml`` becomes test items, kernel x backend x dtype x case.

Registered through the ``pytest11`` entry point, so plain ``pytest`` picks it up. Items are made by a
collection hook (no generated files); a broken spec becomes one failing item with its one-line problems,
so the other kernels still run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.spec.schema import SpecError, did_you_mean

TIER_CASES = {"ci": ("edge", "ci"), "full": ("edge", "ci", "full", "huge")}
_KEY = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("kernel-harness", "kernel-harness: generated kernel tests")
    g.addoption("--kernel", action="append", default=[], help="only these kernels (repeatable or comma list)")
    g.addoption("--dtype", action="append", default=[], help="only these dtypes (fp32, fp16, bf16)")
    g.addoption("--backend", action="append", default=[], help="only these backends (triton, cuda, reference)")
    g.addoption("--tier", choices=sorted(TIER_CASES), default="ci",
                help="ci: edge + ci cases (default); full: + realistic and >2**31-element cases (GPU)")
    g.addoption("--seed", type=int, default=0, help="base seed for the generated inputs")
    g.addoption("--specs", default="specs", help="directory of spec files (default: specs)")
    g.addoption("--isolate", action="store_true", dest="isolate", default=None,
                help="run each case in a worker process, so a crash or hang fails that case only "
                     "(default: on with a GPU, off on the CPU interpreter)")
    g.addoption("--no-isolate", action="store_false", dest="isolate", default=None,
                help="run the cases in the pytest process")


def _split(values: list[str]) -> set[str]:
    return {v.strip() for item in values for v in item.split(",") if v.strip()}


def pytest_configure(config: pytest.Config) -> None:
    from harness.spec.imports import use_interpreter_if_no_gpu

    use_interpreter_if_no_gpu()  # before any kernel module is imported
    specs_dir = Path(config.getoption("specs"))
    if not specs_dir.is_absolute():
        here = Path(config.invocation_params.dir) / specs_dir
        specs_dir = here if here.is_dir() else Path(config.rootpath) / specs_dir
    config.stash[_KEY] = {
        "specs_dir": specs_dir.resolve(), "kernels": _split(config.getoption("kernel")),
        "dtypes": _split(config.getoption("dtype")), "backends": _split(config.getoption("backend")),
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

    generated = (KernelCaseItem, SpecErrorItem, BenchCaseItem)
    keep = [i for i in items if isinstance(i, generated)]
    dropped = [i for i in items if not isinstance(i, generated)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


class SpecFile(pytest.File):
    def collect(self):
        from harness.correctness.args import case_seed
        from harness.spec.load import load as load_spec
        from harness.target.device import detect
        from harness.target.resolve import resolve

        opts = self.config.stash[_KEY]
        rel = _relative(self.path, Path.cwd())
        try:
            spec = load_spec(rel)
        except SpecError as exc:
            yield SpecErrorItem.from_parent(self, name=f"{self.path.stem}[spec]", problems=exc.problems)
            return
        device = detect()
        statuses = {s.backend: s for s in resolve(spec, device)}
        opts["specs"].append((spec, list(statuses.values())))
        from harness.plugin.bench_items import bench_items, wants_bench_items

        if wants_bench_items(self.config):
            yield from bench_items(self, spec, list(statuses.values()), device, opts["dtypes"])
            return
        for backend, status in statuses.items():
            if opts["backends"] and backend not in opts["backends"]:
                continue
            for dtype in spec.dtypes:
                if opts["dtypes"] and dtype not in opts["dtypes"]:
                    continue
                for tier in TIER_CASES[opts["tier"]]:
                    for case in spec.cases.get(tier, ()):
                        name = f"{spec.name}[{backend}-{dtype}-{case.id}]"
                        if tier in ("full", "huge"):
                            name = f"{spec.name}[{backend}-{dtype}-{tier}-{case.id}]"
                        yield KernelCaseItem.from_parent(
                            self, name=name, spec=spec, backend=backend, status=status, dtype=dtype, case=case,
                            seed=case_seed(spec, dtype, case, opts["seed"]), device=device)


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


class KernelError(Exception):
    """A kernel (or its reference) raised: the message and the case, without the tensors' frames."""


class SpecErrorItem(pytest.Item):
    def __init__(self, *, problems: list[str], **kw):
        super().__init__(**kw)
        self.problems = problems

    def runtest(self) -> None:
        raise SpecError(self.problems)

    def repr_failure(self, excinfo, style=None):
        return "invalid spec:\n" + "\n".join(self.problems)

    def reportinfo(self):
        return self.path, None, self.name


class KernelCaseItem(pytest.Item):
    def __init__(self, *, spec, backend, status, dtype, case, seed, device, **kw):
        super().__init__(**kw)
        self.spec, self.backend, self.status, self.dtype = spec, backend, status, dtype
        self.case, self.seed, self.device = case, seed, device
        self.user_properties += [("kernel", spec.name), ("seed", seed), ("arch", device.arch)]
        tol = spec.tolerance(dtype)
        if tol.loosened:
            self.user_properties.append(("tolerance", f"rtol={tol.rtol:g} atol={tol.atol:g}: {tol.reason}"))

    def _skip_reason(self) -> str | None:
        if not self.status.runnable:
            return f"backend {self.backend} cannot run here: {self.status.reason}"
        tier = self.case.tier
        if tier in ("full", "huge") and self.device.interpreted:
            return f"{tier} cases need a GPU: the Triton interpreter on the CPU would take hours"
        if tier == "huge":
            from harness.correctness.memory import huge_case_fits

            return huge_case_fits(self.spec, self.case, self.dtype, self.device)
        return None

    def runtest(self) -> None:
        from harness.correctness.checks import CaseContext, CheckFailure, run_checks
        from harness.spec.imports import resolve_import

        reason = self._skip_reason()
        if reason:
            pytest.skip(reason)
        ctx = CaseContext(self.spec, self.backend, self.dtype, self.case, self.seed, self.device.arch,
                          self.device.torch_device)
        if _isolating(self.config):
            return self._runtest_isolated(ctx)
        impl = self.spec.reference if self.backend == "reference" else self.spec.backends[self.backend].impl
        try:
            outcome = run_checks(ctx, resolve_import(impl), resolve_import(self.spec.reference))
            error = None
        except CheckFailure:
            raise
        except Exception as exc:  # a crashing kernel: keep its text, drop the frames holding its tensors
            error = KernelError(f"{type(exc).__name__}: {exc}\n{ctx.describe()}")
        finally:
            if self.device.is_gpu:
                import torch

                torch.cuda.empty_cache()
        if error is not None:
            raise error
        self.user_properties.append(("checks", ",".join(outcome.checks)))
        for note in outcome.notes:
            self.user_properties.append(("note", note))

    def _runtest_isolated(self, ctx) -> None:
        from harness.correctness.checks import CheckFailure
        from harness.correctness.tasks import failure_text

        outcome = _isolated_outcome(self)
        if outcome.status != "ok":  # raised, crashed or timed out: the case's failure, the run goes on
            raise KernelError(failure_text(outcome, ctx.describe()))
        result = outcome.value
        if result["status"] == "failed":
            raise CheckFailure(result["check"], result["message"].removeprefix(f"{result['check']}: "))
        self.user_properties.append(("checks", ",".join(result["checks"])))
        for note in result["notes"]:
            self.user_properties.append(("note", note))

    def repr_failure(self, excinfo, style=None):
        from harness.correctness.checks import CaseContext, CheckFailure

        ctx = CaseContext(self.spec, self.backend, self.dtype, self.case, self.seed, self.device.arch,
                          self.device.torch_device)
        if isinstance(excinfo.value, (CheckFailure, KernelError)):
            return str(excinfo.value)
        return f"{super().repr_failure(excinfo, style='short')}\n{ctx.describe()}"

    def reportinfo(self):
        return self.path, None, f"{self.name} seed={self.seed}"


def _isolating(config: pytest.Config) -> bool:
    opts = config.stash[_KEY]
    if opts.get("isolate") is None:
        isolate = config.getoption("isolate")
        if isolate is None:  # a GPU kernel can take the process down; the CPU interpreter raises instead
            from harness.target.device import detect

            isolate = detect().is_gpu
        opts["isolate"] = isolate
    return opts["isolate"]


def _isolated_outcome(item: KernelCaseItem):
    """Run the item's case in the session's worker pool; with several GPUs the next items go out too."""
    from harness.correctness.tasks import case_task

    opts = item.config.stash[_KEY]
    if opts.get("pool") is None:
        from harness.workers.pool import WorkerPool, default_devices

        opts["pool"] = WorkerPool(default_devices())
    pool, pending = opts["pool"], opts.setdefault("pending", {})
    if pool.size > 1:  # shard across the workers, one per GPU: keep each busy with the items that follow
        items = item.session.items
        position = opts.setdefault("positions", {it.nodeid: k for k, it in enumerate(items)})
        start = position.get(item.nodeid, len(items))
        for other in items[start:start + 4 * pool.size]:
            if len(pending) >= 2 * pool.size:
                break
            if isinstance(other, KernelCaseItem) and other.nodeid not in pending and not other._skip_reason():
                pending[other.nodeid] = pool.submit(case_task(other.spec, other.backend, other.dtype, other.case,
                                                              other.seed))
    ticket = pending.pop(item.nodeid, None)
    if ticket is None:
        ticket = pool.submit(case_task(item.spec, item.backend, item.dtype, item.case, item.seed))
    return pool.wait(ticket)


def _close_pool(config: pytest.Config) -> None:
    opts = config.stash.get(_KEY, None)
    if opts and opts.get("pool") is not None:
        opts.pop("pool").close()


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
