"""The two checks of a kernel as a PyTorch op: ``torch.library.opcheck`` and ``torch.compile(fullgraph=True)``.

Each runs on one backend x dtype at the spec's smallest cases (:func:`op_cases`), on seeded inputs from
:mod:`harness.correctness.args`, and raises :class:`CheckFailure` with one line per failing sub-test
(``opcheck: test_schema: RuntimeError: Argument x is not defined as mutable but was mutated``) and the
context: spec, backend, dtype, case, seed, arch.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import torch

from harness.correctness.args import FP8, case_seed, make_args, shape_of, tensor_dtype
from harness.correctness.checks import CaseContext
from harness.correctness.numerics import bitwise_equal
from harness.correctness.ops import bare_symbol, kernel_op
from harness.correctness.registry import CheckFailure
from harness.spec.model import Case, Spec

OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
COMPILE_SIZES = 3      # sizes of the dynamic dimension the compiled function is called with
COMPILE_LIMIT = 1      # frames compiled for all of them: one, dynamic from the first call (mark_dynamic)


def op_cases(spec: Spec) -> tuple[Case, ...]:
    """The smallest edge case and the smallest ci case that are contiguous, of plain values, and have every
    symbolic dimension at least 2 (torch.compile specialises sizes 0 and 1: they would test no dynamic shape)."""
    chosen = []
    for tier in ("edge", "ci"):
        fits = [(_numel(spec, c), c) for c in spec.cases.get(tier, ()) if _plain(spec, c)]
        if fits:
            chosen.append(min(fits, key=lambda nc: nc[0])[1])
    return tuple(chosen)


def _plain(spec: Spec, case: Case) -> bool:
    env = spec.env(case)
    # a constant 1 ([tokens, 1]) is no size; an output whose rank depends on the case sizes nothing of its own
    sized = [d(env) for t in spec.present(env) for d in t.shape if d.names]
    return case.layout == "contiguous" and not case.value_set and all(v >= 2 for v in sized)


def _numel(spec: Spec, case: Case) -> int:
    env = spec.env(case)
    return sum(math.prod(shape_of(t, env)) for t in spec.present(env))


def op_kwargs(spec: Spec, case: Case, dtype: str, device: str, seed: int) -> dict:
    """The op's arguments for a case: fresh contiguous inputs (the op allocates its outputs; an absent optional
    input is None) and the params."""
    args = make_args(spec, case, dtype, device, seed)
    kwargs = {t.name: args.tensors[t.name].clone(memory_format=torch.contiguous_format)
              if t.name in args.tensors else None for t in spec.inputs}
    kwargs.update(args.params)
    return kwargs


def _context(spec: Spec, backend: str, dtype: str, case: Case, seed: int, arch: str, device: str) -> str:
    return CaseContext(spec, backend, dtype, case, seed, arch, device).describe()


def run_opcheck(spec: Spec, backend: str, dtype: str, arch: str, device: str, base_seed: int = 0) -> list[str]:
    """torch.library.opcheck's sub-tests on each of :func:`op_cases`; the notes say what ran."""
    op = kernel_op(spec, backend)
    tests, notes = OPCHECK_TESTS, []
    if any(tensor_dtype(t, dtype) in FP8 for t in spec.inputs):
        # SchemaCheckMode compares each input before and after with torch.allclose, which torch implements for
        # no float8 dtype: the sub-test could only error. The harness's own `inputs` check (every input
        # bitwise unchanged unless declared inplace) covers what it would catch.
        tests = tuple(t for t in OPCHECK_TESTS if t != "test_schema")
        notes.append("opcheck test_schema not run: torch.allclose has no float8 kernel (the inputs check covers "
                     "mutation)")
    for case in op_cases(spec):
        seed = case_seed(spec, dtype, case, base_seed)
        results = torch.library.opcheck(op, (), op_kwargs(spec, case, dtype, device, seed),
                                        test_utils=tests, raise_exception=False)
        failed = [f"{name}: {_one_line(err)}" for name, err in results.items() if err != "SUCCESS"]
        if failed:
            raise CheckFailure("opcheck", "\nopcheck: ".join(failed) + "\n"
                               + _context(spec, backend, dtype, case, seed, arch, device))
    return [f"opcheck {op}: {', '.join(tests)} on {', '.join(c.id for c in op_cases(spec))}", *notes]


def _one_line(err: BaseException) -> str:
    """The error's first line, and dynamo's explanation of a specialised size where there is one."""
    text = [line.strip() for line in str(err).strip().splitlines()]
    why = next((line.lstrip("- ") for line in text[1:] if "specialized it" in line), "")
    return f"{type(err).__name__}: {text[0] if text else ''}" + (f" {why}" if why else "")


def dynamic_symbol(spec: Spec) -> str | None:
    """The symbol compiled as a dynamic size: the first input dimension that is a bare symbol a case sets."""
    given = {k for cases in spec.cases.values() for c in cases for k, _ in c.given}
    for t in spec.inputs:
        for d in t.shape:
            if bare_symbol(d) in given:
                return bare_symbol(d)
    return None


def compile_cases(spec: Spec) -> tuple[str | None, tuple[Case, ...]]:
    """The smallest op case at :data:`COMPILE_SIZES` sizes of the dynamic symbol (those the constraints allow)."""
    base = op_cases(spec)[0]
    symbol = dynamic_symbol(spec)
    if symbol is None:
        return None, (base,)
    value = base.values[symbol]
    cases = []
    for size in range(value, value + 4 * COMPILE_SIZES):
        case = dataclasses.replace(base, given=tuple((k, size if k == symbol else v) for k, v in base.given))
        env = spec.env(case)
        if all(c(env) for c in spec.constraints):
            cases.append(case)
        if len(cases) == COMPILE_SIZES:
            break
    return symbol, tuple(cases)


def run_compile(spec: Spec, backend: str, dtype: str, arch: str, device: str, base_seed: int = 0,
                compiler: str | None = None) -> list[str]:
    """``op`` then a torch op on its results, compiled with fullgraph=True: no graph break, the eager result,
    and one compiled frame for every size of the dynamic dimension."""
    import torch._inductor.config
    from torch._dynamo.testing import CompileCounterWithBackend

    op = kernel_op(spec, backend)

    def program(**kwargs):
        results = op(**kwargs)
        results = () if results is None else (results,) if isinstance(results, torch.Tensor) else tuple(results)
        return tuple(r.to(torch.float64) * 2 for r in results + tuple(kwargs[n] for n in _mutated(spec, kwargs)))

    symbol, cases = compile_cases(spec)
    compiler = compiler or "inductor"  # the product path; on a CPU it compiles C++ around the opaque op
    counter = CompileCounterWithBackend(compiler)
    compiled = torch.compile(program, backend=counter, fullgraph=True)
    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    # Inductor's on-disk caches key a graph by its code, and the harness's op keeps its name and schema when
    # its spec changes an output's shape: a graph cached before the change asserts the old shape (seen: a
    # 0-d loss checked against a cached (1,), "wrong number of dimensions0"). Each check compiles afresh.
    fresh = torch._inductor.config.patch(force_disable_caches=True)
    if compiler == "inductor" and torch.device(device).type == "cpu":
        _pick_vec_isa()
    torch._dynamo.reset()
    try:
        with config.patch(**{limit: COMPILE_LIMIT + 1}), fresh, warnings.catch_warnings():
            warnings.filterwarnings("ignore", "dynamo_pgo force disabled")  # what the line above asks for
            for case in cases:
                seed = case_seed(spec, dtype, case, base_seed)
                context = _context(spec, backend, dtype, case, seed, arch, device)
                kwargs = op_kwargs(spec, case, dtype, device, seed)
                expected = program(**{k: _copy(v) for k, v in kwargs.items()})
                for t in spec.inputs:
                    for i, d in enumerate(t.shape):
                        # every dimension sized by the symbol (a per-row scale's "M if per_row else 1" too),
                        # else that input's static size changes with it and recompiles
                        if symbol is not None and symbol in d.names and kwargs[t.name] is not None \
                                and kwargs[t.name].shape[i] >= 2:
                            torch._dynamo.mark_dynamic(kwargs[t.name], i)
                try:
                    got = compiled(**kwargs)
                except Exception as exc:  # a graph break under fullgraph, a fake that fails, a recompile error
                    raise CheckFailure("compile", f"{_one_line(exc)}\n{context}") from None
                names = [t.name for t in spec.outputs] + _mutated(spec, kwargs)
                _compare(spec, dtype, names, expected, got, context)
        if counter.frame_count > COMPILE_LIMIT:
            raise CheckFailure("compile", f"compiled {counter.frame_count} frames for {len(cases)} sizes of "
                                          f"{symbol} (at most {COMPILE_LIMIT}): the shapes do not stay dynamic\n"
                                          f"{context}")
    finally:
        torch._dynamo.reset()
    sizes = ", ".join(str(c.values[symbol]) for c in cases) if symbol else "one size"
    return [f"compile ({compiler}, fullgraph) {op}: {counter.frame_count} frame for {symbol} = {sizes}"]


def _pick_vec_isa() -> None:
    """Inductor's pick of the CPU's vector ISA, made outside the fresh cache: it builds and loads a probe per ISA
    (five g++ builds on this AVX-512 machine, 5-7 s) into the cache directory and keeps the answer for the
    process. Inside ``force_disable_caches`` that directory is a new empty one, so every process that ran a
    compile check built the probes again; from Inductor's usual directory they are built once per machine. The
    graphs are still compiled afresh."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    pick_vec_isa()


def _copy(value):
    return value.clone() if isinstance(value, torch.Tensor) else value


def _mutated(spec: Spec, kwargs: dict) -> list[str]:
    """The in-place inputs a call passes: what the compiled program returns after the op's outputs."""
    return [t.name for t in spec.inputs if t.inplace and kwargs[t.name] is not None]


def _compare(spec: Spec, dtype: str, names: list[str], expected: tuple, got: tuple, context: str) -> None:
    """Bitwise, unless the spec waives determinism: then within the dtype's tolerance."""
    for name, want, have in zip(names, expected, got, strict=True):
        if "determinism" in spec.waivers:
            tol = spec.tolerance(dtype, name)
            same = torch.allclose(have, want, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
        else:
            same = bitwise_equal(have, want)
        if not bool(same.all()) if isinstance(same, torch.Tensor) else not same:
            diff = (have - want).abs().nan_to_num(nan=math.inf)
            raise CheckFailure("compile", f"{name}: the compiled result differs from eager (largest difference "
                                          f"{diff.max().item():g}, x2 in fp64)\n{context}")
