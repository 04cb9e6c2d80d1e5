"""The Triton backward kernels on a CPU, through the interpreter: kernels/rmsnorm_bwd.py, and the backwards in
kernels/layernorm.py, silu_and_mul.py and softmax.py.

Each launcher is checked against torch autograd on the reference forward and against its ``*_bwd_ref``, both at
the harness's upcast precision (fp64 for fp32 inputs, fp32 for 16-bit), with the harness's own comparison
(``mismatch``: the elementwise bound and the per-row normwise one) at the default tolerance of the dtype, as
the forward specs have no [tolerance] table. The outputs start as NaN, so an unwritten element fails, and the
inputs must come back bitwise unchanged. Cases: 0 rows, 1 row, hidden sizes that are not a multiple of the
block, row counts that are not a multiple of the partial-reduction chunk, the long-row path (also forced at
small sizes by an explicit config), non-contiguous and expanded (stride-0) grad_out, non-contiguous saved
tensors. Then determinism, gradcheck in fp64, the autograd.Functions, and the planted bugs of
tests/planted/backward_kernels.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch

from harness.correctness.numerics import bitwise_equal, mismatch
from harness.spec.model import DEFAULT_TOLERANCES, Tolerance
from kernels.layernorm_bwd import layernorm_autograd, layernorm_bwd, layernorm_bwd_ref
from kernels.rmsnorm_bwd import NormBwdConfig, rmsnorm_autograd, rmsnorm_bwd, rmsnorm_bwd_ref
from kernels.silu_and_mul import SiluAndMulConfig, silu_and_mul_autograd, silu_and_mul_bwd, silu_and_mul_bwd_ref
from kernels.softmax import SoftmaxBwdConfig, softmax_autograd, softmax_bwd, softmax_bwd_ref
from tests.e2e import seeded
from tests.planted import backward_kernels as planted

# on a GPU the compiled kernels, on a CPU the interpreter (tests/conftest.py's on_device)
pytestmark = pytest.mark.usefixtures("on_device")

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# the long-row path at a size the interpreter runs quickly: 200 columns in blocks of 64 (the last ragged), two
# rows per iteration, chunks of 6 rows (29 rows: five chunks, the last of 5)
LONG = NormBwdConfig(block_m=2, block_n=64, num_warps=1, single_pass=False, rows_per_program=6)
CHUNKED = NormBwdConfig(block_m=4, block_n=256, num_warps=1, single_pass=True, rows_per_program=8)


def _upcast(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype in (torch.float32, torch.float64) else torch.float32


def _tol(dtype: torch.dtype) -> Tolerance:
    return Tolerance(*DEFAULT_TOLERANCES[next(k for k, v in DTYPES.items() if v == dtype)])


@dataclasses.dataclass(frozen=True)
class Case:
    rows: int
    cols: int
    dy: str = "contiguous"  # grad_out: contiguous | transposed | padded | expanded | broadcast
    saved: str = "contiguous"  # the saved tensors and grad_x: contiguous | transposed | padded
    config: object = None
    shift: float = 0.0
    has_bias: bool = True


def _layout(t: torch.Tensor, how: str) -> torch.Tensor:
    """The same values in another layout: column-major, or rows padded by 3 elements."""
    if how == "transposed":
        return t.t().contiguous().t()
    if how == "padded":
        wide = torch.full((t.shape[0], t.shape[1] + 3), 7.0, dtype=t.dtype)
        wide[:, : t.shape[1]] = t
        return wide[:, : t.shape[1]]
    return t


def _strided(t: torch.Tensor, how: str) -> torch.Tensor:
    """A vector's values every other element of a buffer (any layout but contiguous)."""
    if how == "contiguous":
        return t
    wide = torch.full((2 * t.shape[0],), 7.0, dtype=t.dtype)
    wide[::2] = t
    return wide[::2]


def _grad_out(shape, dtype, how: str, gen) -> torch.Tensor:
    if how == "expanded":  # what autograd hands the backward of y.sum() * c
        return torch.randn((), generator=gen).to(dtype).expand(*shape)
    if how == "broadcast":  # a gradient broadcast down the rows: stride (0, 1)
        return torch.randn(shape[-1], generator=gen).to(dtype).expand(*shape)
    return _layout(torch.randn(*shape, generator=gen).to(dtype), how)


@dataclasses.dataclass(frozen=True)
class Kernel:
    """A backward under test: its primals, the reference forward (differentiable, upcast), the saved tensors the
    backward takes, and which gradient output belongs to which primal."""

    name: str
    bwd: Callable
    ref: Callable
    primals: Callable  # (case, dtype, gen) -> {name: tensor}
    forward: Callable  # (case, upcast primals) -> output
    saved: Callable  # (case, primals, forward output in the case's dtype) -> {name: tensor}
    grads: Callable  # case -> {primal: gradient output name}
    params: Callable = lambda case: {}
    out_cols: Callable = lambda case: case.cols
    # (case, upcast saved tensors, upcast grad_out) -> gradients, where autograd's backward works from a saved
    # output rather than the primals (softmax's): the same saved values as the kernel gets
    saved_autograd: Callable | None = None


def _norm_primals(case, dtype, gen):
    p = {"x": torch.randn(case.rows, case.cols, generator=gen) + case.shift,
         "weight": torch.randn(case.cols, generator=gen), "bias": torch.randn(case.cols, generator=gen)}
    return {k: v.to(dtype) for k, v in p.items()}


def _rms_forward(case, p):
    x = p["x"]
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * p["weight"]


def _ln_forward(case, p):
    return torch.nn.functional.layer_norm(p["x"], (case.cols,), p["weight"], p["bias"] if case.has_bias else None,
                                          1e-5)


def _ln_saved(stats: bool):
    """x and weight, and with ``stats`` each row's mean and rstd as the forward saves them (fp32, fp64 for fp64
    x), computed in fp64."""
    def saved(case, p, y):
        x = p["x"]
        if not stats:
            return {"x": x, "weight": p["weight"]}
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        xd = x.double()
        mean = xd.mean(-1)
        rstd = torch.rsqrt((xd - mean[:, None]).pow(2).mean(-1) + 1e-5)
        return {"x": x, "weight": p["weight"], "mean": mean.to(acc), "rstd": rstd.to(acc)}
    return saved


def _silu_forward(case, p):
    return torch.nn.functional.silu(p["x"][:, : case.cols]) * p["x"][:, case.cols:]


KERNELS = {
    "rmsnorm": Kernel(
        "rmsnorm", rmsnorm_bwd, rmsnorm_bwd_ref, _norm_primals, _rms_forward,
        saved=lambda case, p, y: {"x": p["x"], "weight": p["weight"]},
        grads=lambda case: {"x": "grad_x", "weight": "grad_weight"}, params=lambda case: {"eps": 1e-6}),
    "layernorm": Kernel(  # mean and rstd recomputed from x
        "layernorm", layernorm_bwd, layernorm_bwd_ref, _norm_primals, _ln_forward, saved=_ln_saved(False),
        grads=lambda case: {"x": "grad_x", "weight": "grad_weight", **({"bias": "grad_bias"} if case.has_bias else {})},
        params=lambda case: {"eps": 1e-5, "has_bias": case.has_bias} | ({} if case.has_bias else {"grad_bias": None})),
    "silu_and_mul": Kernel(  # cols is d: x is [rows, 2 * d]
        "silu_and_mul", silu_and_mul_bwd, silu_and_mul_bwd_ref,
        lambda case, dtype, gen: {"x": torch.randn(case.rows, 2 * case.cols, generator=gen).to(dtype)},
        _silu_forward, saved=lambda case, p, y: {"x": p["x"]}, grads=lambda case: {"x": "grad_x"}),
    "softmax": Kernel(  # the saved tensor is the forward's output
        "softmax", softmax_bwd, softmax_bwd_ref,
        lambda case, dtype, gen: {"x": (3 * torch.randn(case.rows, case.cols, generator=gen)).to(dtype)},
        lambda case, p: torch.softmax(p["x"], dim=-1), saved=lambda case, p, y: {"out": y},
        grads=lambda case: {"x": "grad_x"},
        # SoftmaxBackward0's own call: autograd of softmax computes from the output it saved, and a 16-bit output's
        # rounding moves dx far more than the kernel's error where dy - sum(y * dy) cancels (peaked rows)
        saved_autograd=lambda case, saved, dy: {
            "grad_x": torch.ops.aten._softmax_backward_data(dy, saved["out"], -1, dy.dtype)}),
}

NORM_CASES = {
    "rows=0": Case(0, 256), "rows=1": Case(1, 256), "hidden=7": Case(5, 7), "hidden=769": Case(5, 769),
    "rows=83": Case(83, 256),  # the interpreter's chunks are 24 rows: three full, one of 11
    "chunked": Case(29, 200, config=CHUNKED), "long": Case(29, 200, config=LONG), "hidden=8193": Case(2, 8193),
    "dy=transposed": Case(83, 256, dy="transposed"), "dy=padded": Case(5, 769, dy="padded"),
    "dy=expanded": Case(83, 256, dy="expanded"), "dy=broadcast": Case(29, 200, dy="broadcast", config=LONG),
    "saved=transposed": Case(83, 256, saved="transposed"), "saved=padded": Case(29, 200, saved="padded", config=LONG),
}
# the forward's statistics given: the same backward's other path
KERNELS["layernorm-stats"] = dataclasses.replace(KERNELS["layernorm"], name="layernorm-stats", saved=_ln_saved(True))
LN_CASES = {**NORM_CASES, "shift=6": Case(83, 769, shift=6.0), "long-shift=10": Case(29, 200, config=LONG, shift=10.0),
            "no-bias": Case(5, 256, has_bias=False), "long-no-bias": Case(29, 200, config=LONG, has_bias=False)}
CASES = {
    "rmsnorm": NORM_CASES,
    "layernorm-stats": {k: c for k, c in LN_CASES.items() if k not in ("dy=transposed", "dy=padded", "dy=broadcast")},
    "layernorm": LN_CASES,
    "silu_and_mul": {
        "rows=0": Case(0, 128), "rows=1": Case(1, 128), "d=7": Case(3, 7), "d=769": Case(5, 769),
        "tiles": Case(83, 130, config=SiluAndMulConfig(block_m=16, block_n=64, num_warps=1)),
        "dy=transposed": Case(83, 130, dy="transposed"), "dy=expanded": Case(5, 769, dy="expanded"),
        "saved=transposed": Case(83, 130, saved="transposed"), "saved=padded": Case(5, 769, saved="padded"),
    },
    "softmax": {
        "rows=0": Case(0, 256), "cols=0": Case(17, 0), "rows=1": Case(1, 256), "cols=7": Case(17, 7),
        "cols=769": Case(83, 769), "long": Case(3, 100, config=SoftmaxBwdConfig(2, 16, 1, False)),
        "cols=16385": Case(1, 16385), "dy=transposed": Case(83, 769, dy="transposed"),
        "dy=expanded": Case(17, 256, dy="expanded"), "saved=transposed": Case(83, 769, saved="transposed"),
    },
}


def _setup(kernel: Kernel, case: Case, dtype: torch.dtype, seed: int = 0):
    """The backward's keyword arguments (outputs NaN) and the primals and grad_out the references start from."""
    gen = seeded(seed)
    primals = kernel.primals(case, dtype, gen)
    with torch.no_grad():
        y = kernel.forward(case, {k: v.to(_upcast(dtype)) for k, v in primals.items()}).to(dtype)
    saved = {k: _layout(v, case.saved) if v.dim() == 2 else _strided(v, case.saved) if k in ("mean", "rstd") else v
             for k, v in kernel.saved(case, primals, y).items()}
    grad_out = _grad_out((case.rows, kernel.out_cols(case)), dtype, case.dy, gen)
    outs = {g: _layout(torch.full_like(primals[p], float("nan")), case.saved) if primals[p].dim() == 2
            else torch.full_like(primals[p], float("nan")) for p, g in kernel.grads(case).items()}
    extra = {"config": case.config} if case.config is not None else {}
    return {**saved, "grad_out": grad_out, **outs, **kernel.params(case), **extra}, primals, y, grad_out


def _autograd(kernel: Kernel, case: Case, primals: dict, y: torch.Tensor, grad_out: torch.Tensor,
              from_saved: bool = True) -> dict:
    acc = _upcast(grad_out.dtype)
    if from_saved and kernel.saved_autograd is not None:
        saved = {k: v.to(acc) for k, v in kernel.saved(case, primals, y).items()}
        return kernel.saved_autograd(case, saved, grad_out.to(acc))
    wanted = kernel.grads(case)
    leaves = {k: v.to(acc).requires_grad_(k in wanted) for k, v in primals.items()}
    out = kernel.forward(case, leaves)
    grads = torch.autograd.grad(out, [leaves[k] for k in wanted], grad_out.to(acc), allow_unused=True)
    return {wanted[k]: g for k, g in zip(wanted, grads, strict=True)}


def _reference(kernel: Kernel, case: Case, kwargs: dict) -> dict:
    acc = _upcast(kwargs["grad_out"].dtype)
    up = {k: v.to(acc) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items() if k != "config"}
    outs = {g: torch.empty(kwargs[g].shape, dtype=acc) for g in kernel.grads(case).values()}
    kernel.ref(**{**up, **outs})
    return outs


def _problems(got: dict, expected: dict, dtype: torch.dtype, what: str) -> list[str]:
    return [f"{name} vs {what}: {p}" for name in expected if (p := mismatch(got[name], expected[name], _tol(dtype)))]


ITEMS = [(k, c, d) for k in KERNELS for c in CASES[k] for d in DTYPES]


@pytest.mark.parametrize(("kernel", "case", "dtype"), ITEMS, ids=[f"{k}-{c}-{d}" for k, c, d in ITEMS])
def test_backward_matches_autograd_and_reference(kernel, case, dtype):
    kern, cse, dt = KERNELS[kernel], CASES[kernel][case], DTYPES[dtype]
    kwargs, primals, y, grad_out = _setup(kern, cse, dt)
    inputs = {k: v.clone() for k, v in kwargs.items() if isinstance(v, torch.Tensor) and not k.startswith("grad_")}
    inputs["grad_out"] = grad_out.clone()
    kern.bwd(**kwargs)
    got = {g: kwargs[g] for g in kern.grads(cse).values()}
    problems = _problems(got, _reference(kern, cse, kwargs), dt, "the *_bwd_ref")
    problems += _problems(got, _autograd(kern, cse, primals, y, grad_out), dt, "autograd")
    for name, before in inputs.items():
        after = kwargs[name]
        if not bool(bitwise_equal(after, before).all()):
            problems.append(f"{name}: an input the backward changed")
    assert not problems, "\n".join(problems)


def test_reference_is_autograd_in_fp64():
    """The closed forms themselves, against autograd where both are exact to fp64's rounding."""
    for name, kern in KERNELS.items():
        for case in (Case(83, 77), Case(5, 40, shift=3.0, dy="expanded"), Case(4, 9, has_bias=False)):
            kwargs, primals, y, grad_out = _setup(kern, case, torch.float64)
            ref = _reference(kern, case, kwargs)
            auto = _autograd(kern, case, primals, y, grad_out, from_saved=False)
            for g in ref:
                torch.testing.assert_close(ref[g], auto[g], rtol=1e-12, atol=1e-12, msg=f"{name} {g}")


@pytest.mark.parametrize(("kernel", "case"), [("rmsnorm", "rows=83"), ("rmsnorm", "long"), ("layernorm", "rows=83"),
                                              ("layernorm", "long"), ("silu_and_mul", "d=769"), ("softmax", "long")])
def test_backward_is_deterministic(kernel, case):
    kern, cse = KERNELS[kernel], CASES[kernel][case]
    runs = []
    for _ in range(2):
        kwargs, *_ = _setup(kern, cse, torch.float32)
        kern.bwd(**kwargs)
        runs.append({g: kwargs[g] for g in kern.grads(cse).values()})
    for g in runs[0]:
        assert bool(bitwise_equal(runs[0][g], runs[1][g]).all()), f"{kernel} {g}: two runs differ"


GRADCHECK = [("rmsnorm", Case(4, 6)), ("rmsnorm", Case(5, 6, config=NormBwdConfig(2, 4, 1, False, 2))),
             ("layernorm", Case(4, 6, shift=2.0)), ("layernorm", Case(5, 6, config=NormBwdConfig(2, 4, 1, False, 2))),
             ("silu_and_mul", Case(3, 4)), ("softmax", Case(3, 5)),
             ("softmax", Case(2, 6, config=SoftmaxBwdConfig(1, 4, 1, False)))]


@pytest.mark.parametrize(("kernel", "case"), GRADCHECK, ids=[f"{k}-{c.rows}x{c.cols}-{'cfg' if c.config else 'default'}"
                                                             for k, c in GRADCHECK])
def test_gradcheck_fp64(kernel, case):
    """torch.autograd.gradcheck of the Triton backward, computing in fp64 (the interpreter runs fp64), against
    finite differences of the reference forward."""
    kern = KERNELS[kernel]
    primals = kern.primals(case, torch.float64, seeded(1))
    names = list(kern.grads(case))

    class Checked(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *leaves):
            p = {**primals, **dict(zip(names, leaves, strict=True))}
            y = kern.forward(case, p)
            ctx.save_for_backward(*leaves, y)
            return y

        @staticmethod
        def backward(ctx, grad_out):
            *leaves, y = ctx.saved_tensors
            p = {**primals, **dict(zip(names, leaves, strict=True))}
            outs = {g: torch.empty_like(p[k]) for k, g in kern.grads(case).items()}
            extra = {"config": case.config} if case.config is not None else {}
            kern.bwd(**kern.saved(case, p, y), grad_out=grad_out, **outs, **kern.params(case), **extra)
            return tuple(outs[kern.grads(case)[k]] for k in names)

    leaves = [primals[k].clone().requires_grad_() for k in names]
    assert torch.autograd.gradcheck(Checked.apply, leaves, eps=1e-6, atol=1e-8, rtol=1e-6)


def test_autograd_functions_match_torch():
    """The functional wrappers on 3-D inputs, backpropagating a loss (sum: an expanded grad_out) and a weighted
    sum, against torch's own modules."""
    gen = seeded(2)
    x = torch.randn(2, 5, 64, generator=gen, dtype=torch.float64).float()
    w, b = torch.randn(64, generator=gen).float(), torch.randn(64, generator=gen).float()
    c = torch.randn(2, 5, 64, generator=gen).float()
    pairs = {
        "rmsnorm": (lambda x, w, b: rmsnorm_autograd(x, w, 1e-6),
                    lambda x, w, b: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w),
        "layernorm": (lambda x, w, b: layernorm_autograd(x, w, b, 1e-5),
                      lambda x, w, b: torch.nn.functional.layer_norm(x, (64,), w, b, 1e-5)),
        "layernorm-no-bias": (lambda x, w, b: layernorm_autograd(x, w, None, 1e-5) + b,
                              lambda x, w, b: torch.nn.functional.layer_norm(x, (64,), w, None, 1e-5) + b),
        "silu_and_mul": (lambda x, w, b: silu_and_mul_autograd(x) * w[:32],
                         lambda x, w, b: torch.nn.functional.silu(x[..., :32]) * x[..., 32:] * w[:32]),
        "softmax": (lambda x, w, b: softmax_autograd(x) * w, lambda x, w, b: torch.softmax(x, -1) * w),
    }
    for name, (ours, theirs) in pairs.items():
        for loss in (lambda y: y.sum(), lambda y: (y * c[..., : y.shape[-1]]).sum()):
            grads = []
            for f in (ours, theirs):
                leaves = [t.clone().requires_grad_() for t in (x, w, b)]
                loss(f(*leaves)).backward()
                grads.append([t.grad for t in leaves])
            for g_ours, g_theirs in zip(*grads, strict=True):
                assert (g_ours is None) == (g_theirs is None), name
                if g_ours is not None:
                    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-5, atol=1e-5, msg=name)
    empty = torch.zeros(0, 64, requires_grad=True)
    rmsnorm_autograd(empty, w.clone().requires_grad_()).sum().backward()
    assert empty.grad.shape == (0, 64)


# ---------------------------------------------------------------------------------------------------------- planted


def _rms(bwd, case: Case, dtype=torch.float32, seed=0, **extra):
    kwargs, primals, y, grad_out = _setup(KERNELS["rmsnorm"], case, dtype, seed)
    pristine, ref = grad_out.clone(), _reference(KERNELS["rmsnorm"], case, kwargs)
    bwd(**kwargs, **extra)
    return {"grad_x": kwargs["grad_x"], "grad_weight": kwargs["grad_weight"]}, ref, kwargs["grad_out"], pristine


# Chunks of 24 rows pinned: a GPU's own choice spreads 83 rows over its SMs a row a program, which leaves no
# partial chunk to drop (on an H100 the plant then passed).
_CHUNKS_OF_24 = NormBwdConfig(block_m=8, block_n=256, num_warps=4, single_pass=True, rows_per_program=24)


def test_planted_drops_last_partial():
    """Caught where the rows are not a whole number of chunks (83 rows, chunks of 24), not where they are (96)."""
    got, ref, *_ = _rms(planted.rmsnorm_bwd_drops_last_partial, Case(83, 256), config=_CHUNKS_OF_24)
    assert mismatch(got["grad_weight"], ref["grad_weight"], _tol(torch.float32)) is not None
    assert mismatch(got["grad_x"], ref["grad_x"], _tol(torch.float32)) is None
    got, ref, *_ = _rms(planted.rmsnorm_bwd_drops_last_partial, Case(96, 256), config=_CHUNKS_OF_24)
    assert mismatch(got["grad_weight"], ref["grad_weight"], _tol(torch.float32)) is None


def test_planted_ignores_weight():
    got, ref, *_ = _rms(planted.rmsnorm_bwd_ignores_weight, Case(83, 256))
    assert mismatch(got["grad_x"], ref["grad_x"], _tol(torch.float32)) is not None
    assert mismatch(got["grad_weight"], ref["grad_weight"], _tol(torch.float32)) is None


def test_planted_writes_grad_output():
    """Every output is right: only grad_out, compared with its copy from before the call, shows it."""
    got, ref, grad_out, pristine = _rms(planted.rmsnorm_bwd_writes_grad_output, Case(83, 256))
    assert all(mismatch(got[g], ref[g], _tol(torch.float32)) is None for g in got)
    assert not bool(bitwise_equal(grad_out, pristine).all())


def test_planted_atomic_reduction():
    """Right to rounding against the reference, so only two runs on the same inputs show it: they differ."""
    runs = [_rms(planted.rmsnorm_bwd_atomic, Case(83, 256)) for _ in range(2)]
    for got, ref, *_ in runs:
        assert mismatch(got["grad_weight"], ref["grad_weight"], _tol(torch.float32)) is None
    assert not bool(bitwise_equal(runs[0][0]["grad_weight"], runs[1][0]["grad_weight"]).all())


def test_shipped_backward_passes_what_catches_the_planted_bugs():
    runs = [_rms(rmsnorm_bwd, Case(83, 256)) for _ in range(2)]
    for got, ref, grad_out, pristine in runs:
        assert all(mismatch(got[g], ref[g], _tol(torch.float32)) is None for g in got)
        assert bool(bitwise_equal(grad_out, pristine).all())
    assert bool(bitwise_equal(runs[0][0]["grad_weight"], runs[1][0]["grad_weight"]).all())
