"""The spec model: frozen dataclasses for a kernel's declaration, and the constants the spec language uses."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from harness.spec import expr as ex

FLOAT_DTYPES = ("fp64", "fp32", "fp16", "bf16")
# 8-bit floats (OCP FP8: e4m3 without infinities, as NVIDIA and torch's float8_e4m3fn; e5m2) for a tensor's
# fixed dtype: quantised GEMM operands. Drawn values saturate at the format's largest finite value, as a
# quantiser clamps; the reference gets them upcast to fp32 (or the case's wider reference dtype).
FP8_DTYPES = ("fp8_e4m3", "fp8_e5m2")


# The matmul rates the ceilings measure (harness.timing.ceilings), one of which a roofline's `compute` names.
COMPUTE_PRECISIONS = ("bf16", "fp16", "tf32", "fp32", "fp8")


DTYPES = FLOAT_DTYPES + FP8_DTYPES + ("int64", "int32", "int16", "int8", "uint8", "bool")


# torch.testing.assert_close's defaults: the table every spec starts from (rtol, atol).
DEFAULT_TOLERANCES = {"fp64": (1e-7, 1e-7), "fp32": (1.3e-6, 1e-5), "fp16": (1e-3, 1e-5), "bf16": (1.6e-2, 1e-5),
                      # torch.testing has none for FP8: half an ulp at 1 (one rounding), as its 16-bit rtols
                      "fp8_e4m3": (6.25e-2, 1e-5), "fp8_e5m2": (1.25e-1, 1e-5)}


LAYOUTS = ("padded", "strided", "transposed")


TIERS = ("edge", "ci", "full", "huge", "bench", "cpu")
BENCH_TIERS = ("bench", "cpu")  # what `bench` times (each may have a headline): the bench shapes, or the cpu tier
# What a run tier (`pytest --tier`, `sanitize --tier`) collects of the case tiers.
RUN_TIERS = {"ci": ("edge", "ci"), "full": ("edge", "ci", "full", "huge")}


DISTRIBUTIONS = {"normal": (0, 2), "uniform": (2,), "randint": (2,)}


CASE_KEYS = ("layout", "headline", "value_set")
# Named input value sets an input may ask for (`specials = [...]`); each adds a generated edge case.
VALUE_SETS = {
    "zero_rows": "every third row (last dimension) all zeros: the scale = 0 / division-by-zero branches",
    "ties": "half-integers in [-127, 127], each row's largest magnitude exactly 127: rounding ties after a "
            "per-row max/127 scale",
    "outliers": "normal values with one element in 64 at +-100 sigma",
    "large": "normal values times 1e4 (times 1e2 for fp16): magnitudes far from 1",
}
# What precision the reference runs at: "upcast" (fp32 for 16-bit inputs, fp64 for fp32), "input" (the case's
# own dtype: quantisation semantics are defined on the input precision), or a fixed float dtype.
REFERENCE_PRECISIONS = ("upcast", "input", "fp32", "fp64")


@dataclass(frozen=True)
class Tolerance:
    """Elementwise bound ``|got - ref| <= atol + rtol * |ref|``; a budget of elements may miss it by at most
    ``mismatch_atol``; ``norm_rtol`` bounds the normwise relative error (None: the dtype's default)."""

    rtol: float
    atol: float
    reason: str = ""
    max_mismatch: float = 0.0      # fraction of elements allowed outside the elementwise bound
    mismatch_atol: float = 0.0     # ... and how far outside it such an element may be
    norm_rtol: float | None = None
    # Bounds given as expressions over the case's symbols (atol = "1e-6 * K": a reduction's rounding grows with
    # its length), as (field, expression); that field's number is NaN until `at` evaluates it for a case.
    scaled: tuple[tuple[str, ex.Expr], ...] = ()

    @property
    def loosened(self) -> bool:
        return bool(self.reason)

    def at(self, env: dict) -> Tolerance:
        """The bound at one case: every expression evaluated over the case's symbols."""
        if not self.scaled:
            return self
        return dataclasses.replace(self, scaled=(), **{k: float(e(env)) for k, e in self.scaled})

    def loosest(self, envs) -> Tolerance:
        """The loosest bound over several cases: each field's largest value."""
        at = [self.at(env) for env in envs] or [self.at({})]
        return dataclasses.replace(at[0], **{k: max(getattr(t, k) for t in at) for k, _ in self.scaled})

    def describe(self) -> str:
        shown = dict(self.scaled)

        def show(k: str) -> str:
            return shown[k].source if k in shown else f"{getattr(self, k):g}"
        text = f"rtol={show('rtol')} atol={show('atol')}"
        if self.max_mismatch:
            text += f" max_mismatch={self.max_mismatch:g} (by <= {show('mismatch_atol')})"
        if self.norm_rtol is not None:
            text += f" norm_rtol={show('norm_rtol')}"
        return text


@dataclass(frozen=True)
class Distribution:
    kind: str
    args: tuple[ex.Expr, ...]


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[ex.Expr, ...]      # one expression per dimension; () where `shape_expr` gives the whole shape
    dtype: str                      # "case" or a fixed dtype name
    values: Distribution
    inplace: bool = False
    contiguous: bool = False
    output: bool = False
    tolerance: Tolerance | None = None   # this tensor's own, at every case dtype
    specials: tuple[str, ...] = ()        # VALUE_SETS this input is also tested with
    # An optional input: where this is false the implementation and the reference get None for it, and no
    # check, guard or poison touches it (None: always passed).
    present: ex.Expr | None = None
    # An output whose rank depends on the case: one expression evaluating to the list of dimensions
    # ("[BT, V] if reduction == 'none' else []"), instead of one expression per dimension.
    shape_expr: ex.Expr | None = None
    # False: an output no gradient flows back from, what a forward saves for its own backward (LayerNorm's mean
    # and rstd, as torch.native_layer_norm returns them): the backward gets no grad_<name> for it, and an
    # autograd callable may return the other outputs alone.
    grad: bool = True
    # True: an input with the same values on every call, as a model's weights have. The checks that write new
    # values into the inputs (stale, graph, stream, the timed re-check) leave it as it was, so a kernel may keep
    # what it derives from it (a repacked or dequantised weight, as Marlin and serving stacks do).
    static: bool = False

    @property
    def fixed_dtype(self) -> str | None:
        return None if self.dtype == "case" else self.dtype

    @property
    def shape_exprs(self) -> tuple[ex.Expr, ...]:
        """Every expression the shape is made of."""
        return self.shape if self.shape_expr is None else (self.shape_expr,)

    def dims(self, env: dict) -> tuple:
        """The shape's dimensions at a case, as the expressions give them (semantics checks they are sizes)."""
        if self.shape_expr is None:
            return tuple(d(env) for d in self.shape)
        value = self.shape_expr(env)
        if not isinstance(value, list):
            raise ex.ExprError(f"{self.shape_expr.source!r}: a shape must be a list of dimensions, got {value!r}")
        return tuple(value)

    def is_present(self, env: dict) -> bool:
        return self.present is None or self.present(env) is True


@dataclass(frozen=True)
class Backend:
    name: str
    impl: str
    arch: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    source: str | None = None
    build: str | None = None
    layouts: tuple[str, ...] | None = None   # None: the kernel's layouts


@dataclass(frozen=True)
class Peer:
    name: str
    impl: str
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    tier: str
    given: tuple[tuple[str, object], ...]   # the symbols the spec wrote, in order (they make the id)
    layout: str = "contiguous"
    headline: bool = False
    value_set: str = ""            # a VALUE_SETS name: the inputs that list it in `specials` get those values

    @property
    def id(self) -> str:
        parts = ",".join(f"{k}={_fmt(v)}" for k, v in self.given)
        parts = parts if self.layout == "contiguous" else f"{parts}-{self.layout}"
        return f"{parts}-{self.value_set}" if self.value_set else parts

    @property
    def values(self) -> dict:
        return dict(self.given)


@dataclass(frozen=True)
class Roofline:
    bytes: ex.Expr                   # bytes read + bytes written
    flops: ex.Expr
    target: float
    read_bytes: ex.Expr | None = None  # with write_bytes: the read share picks the bandwidth ceiling
    write_bytes: ex.Expr | None = None
    # The precision whose measured matmul rate is the compute ceiling ("fp8" for an FP8 GEMM with a bf16
    # output); None: the case dtype.
    compute: str | None = None
    # Why the kernel is below its target where it is, in the author's words (measurements, the bound, the next
    # step): the report prints it under a kernel whose run fell short, so a verdict is never left unexplained.
    gap: str | None = None

    def compute_dtype(self, case_dtype: str) -> str:
        return self.compute or case_dtype

    def read_fraction(self, env: dict) -> float | None:
        if self.read_bytes is None or self.write_bytes is None:
            return None
        read, written = float(self.read_bytes(env)), float(self.write_bytes(env))
        return read / (read + written) if read + written > 0 else None


TARGET_METRICS = ("device", "host")  # what a target compares: median device time, or host time per call


@dataclass(frozen=True)
class Target:
    """``[[targets]]``: a promise about one provider's speed against another's, at named bench cases. It holds in a
    run where, at every matched case, ``against``'s median over ``provider``'s is at least ``speedup``."""

    against: str
    speedup: float
    where: tuple[tuple[tuple[str, object], ...], ...]  # each: case values that a matched case has
    reason: str                                          # why this is the target
    provider: str | None = None                          # None: the run's candidate
    metric: str = "device"
    mode: str = "fwd"
    dtype: str | None = None                             # None: every dtype measured
    gap: str | None = None                               # why it is not met, as measured

    def label(self) -> str:
        who = f"`{self.provider}`" if self.provider else "the candidate"
        what = "host time per call" if self.metric == "host" else "device time"
        mode = "" if self.mode == "fwd" else f", {self.mode}"
        bound = (f"at least {self.speedup:g}x faster than" if self.speedup >= 1
                 else f"at most {1 / self.speedup:.3g}x slower than")
        return f"{who} {bound} `{self.against}` ({what}{mode})"


@dataclass(frozen=True)
class GateRule:
    """A kernel's own minimum effect for the merge gate, with the reason it differs from the default."""

    min_effect: float | None      # relative, e.g. 0.05 for 5 %
    floor_us: float | None        # absolute floor in microseconds for short kernels
    reason: str


# How a backward's grad outputs are drawn: "random", each output's gradient drawn like an input (normal, the
# case's dtype, in the case's layout); "loss", the gradient of a scalar loss ``s * sum(outputs)``: one random
# value expanded to each output's shape (every stride 0), as autograd hands it to the backward.
GRAD_OUTPUTS = ("random", "loss")


@dataclass(frozen=True)
class BackwardImpl:
    """One forward backend's backward: a differentiable callable, a standalone kernel, or both."""

    backend: str                      # the forward backend it belongs to (its arch, requires and layouts)
    autograd: str | None = None       # "module:attr": an autograd.Function (called through apply) or a callable
    args: tuple[str, ...] = ()        # autograd's positional arguments, inputs and params by name
    kernel: str | None = None         # "module:attr": destination-passing, saved tensors and grads by keyword
    # differentiable = true: autograd is the forward backend's impl itself, called as the forward is (keywords,
    # output buffers included), whose returned outputs carry a grad_fn: an adopter's wrapper of its library's
    # autograd.Function serves both passes
    keywords: bool = False

    def call_autograd(self, fn, values: dict):
        """``fn`` (the resolved autograd) on ``values`` (the forward's keywords by name, the leaves in place)."""
        return fn(**values) if self.keywords else fn(*[values.get(a) for a in self.args])


@dataclass(frozen=True)
class Distributed:
    """``[distributed]``: a kernel that runs on every rank of a process group, one process per rank. Each case
    runs at each world size, which cases see as the symbol ``world``; each rank draws its own inputs."""
    world_sizes: tuple[int, ...]


WORLD = "world"  # the case symbol a distributed spec's world size is


@dataclass(frozen=True)
class Backward:
    """``[backward]``: which inputs get gradients, how grad outputs are drawn, what a standalone backward takes
    of the forward, each backend's backward, and each gradient's own tolerance per dtype."""

    inputs: tuple[str, ...]
    grad_outputs: str = "random"
    saved: tuple[str, ...] = ()
    backends: dict[str, BackwardImpl] = dataclasses.field(default_factory=dict)
    tolerances: dict[tuple[str, str], Tolerance] = dataclasses.field(default_factory=dict)  # (input, dtype)
    # ``[backward.roofline]``: the backward's own traffic and arithmetic, over the forward's symbols and the
    # gradients' (``bytes_grad_<output>`` for a grad output, ``bytes_grad_<input>`` for a gradient); None: a
    # benchmark's bwd and full rows get no % of roofline (full adds it to the forward's [roofline]).
    roofline: Roofline | None = None

    def modes(self, backend: str) -> tuple[str, ...]:
        """The backward items of a backend: "autograd", "kernel", both or none."""
        b = self.backends.get(backend)
        return () if b is None else tuple(m for m in ("autograd", "kernel") if getattr(b, m))


@dataclass(frozen=True)
class Spec:
    # the normwise floor of gradients (harness.correctness.numerics.mismatch): True for a backward's grad spec
    atol_floor: ClassVar[bool] = False
    path: str
    name: str
    summary: str
    reference: str
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    fallback: tuple[str, ...]
    backends: dict[str, Backend]
    peers: dict[str, Peer]
    params: dict[str, ex.Expr]
    tensors: tuple[Tensor, ...]
    tolerances: dict[str, Tolerance]
    waivers: dict[str, str]
    symbols: dict[str, ex.Expr]
    constraints: tuple[ex.Expr, ...]
    cases: dict[str, tuple[Case, ...]]
    roofline: Roofline | None
    timeout_s: float
    sha256: str
    reference_precision: str = "upcast"
    gate: GateRule | None = None
    op: str | None = None           # "module:attr" of the kernel's own torch op; None: the harness registers one
    oracle: str | None = None       # an independent implementation the reference backend is checked against
    # Optional params: name -> the expression saying where it is passed (elsewhere it is None).
    param_present: dict[str, ex.Expr] = dataclasses.field(default_factory=dict)
    backward: Backward | None = None  # ``[backward]``; None: the forward only
    distributed: Distributed | None = None  # ``[distributed]``; None: one process, one device
    targets: tuple[Target, ...] = ()         # ``[[targets]]``

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if not t.output)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.output)

    @property
    def differentiable_outputs(self) -> tuple[Tensor, ...]:
        """The outputs a gradient flows back from: each gets a grad output in the backward."""
        return tuple(t for t in self.outputs if t.grad)

    @property
    def written(self) -> tuple[Tensor, ...]:
        """Everything the kernel writes: outputs and in-place inputs."""
        return tuple(t for t in self.tensors if t.output or t.inplace)

    def present(self, env: dict) -> tuple[Tensor, ...]:
        """The tensors a case passes: all but the optional inputs whose ``present`` is false there."""
        return tuple(t for t in self.tensors if t.is_present(env))

    def param_values(self, env: dict) -> dict[str, object]:
        """Every param's value at a case; an optional param whose ``present`` is false there is None."""
        return {n: p(env) if n not in self.param_present or self.param_present[n](env) is True else None
                for n, p in self.params.items()}

    def tolerance(self, dtype: str, tensor: str | None = None, case: Case | None = None) -> Tolerance:
        """The bound for ``tensor`` (or any written tensor) at case dtype ``dtype``, its expressions evaluated
        at ``case``; without a case (a summary line) at the loosest of the spec's cases."""
        tol = self._declared_tolerance(dtype, tensor)
        if not tol.scaled:
            return tol
        if case is not None:
            return tol.at(self.env(case))
        return tol.loosest(self.env(c) for cases in self.cases.values() for c in cases)

    def _declared_tolerance(self, dtype: str, tensor: str | None) -> Tolerance:
        """A tensor's own ``tolerance`` wins; an integer tensor is compared exactly; otherwise the spec's
        ``[tolerance.<dtype>]``, else torch.testing.assert_close's default for the dtype."""
        t = next((t for t in self.tensors if t.name == tensor), None) if tensor else None
        if t is not None and t.tolerance is not None:
            return t.tolerance
        if t is not None and t.fixed_dtype and t.fixed_dtype not in FLOAT_DTYPES:
            return Tolerance(0.0, 0.0)
        if dtype in self.tolerances:
            return self.tolerances[dtype]
        rtol, atol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
        return Tolerance(rtol, atol)

    def grad_tolerance(self, dtype: str, name: str, case: Case | None = None) -> Tolerance:
        """The bound for input ``name``'s gradient: its own ``[backward.tolerance.<name>.<dtype>]``, else the
        forward's at ``dtype`` (``[tolerance.<dtype>]`` or torch.testing's default)."""
        own = self.backward.tolerances.get((name, dtype)) if self.backward else None
        tol = own or self._declared_tolerance(dtype, None)
        return tol.at(self.env(case)) if case is not None else tol

    def layouts_for(self, backend: str) -> tuple[str, ...]:
        b = self.backends.get(backend)
        return self.layouts if b is None or b.layouts is None else b.layouts

    def must_refuse(self, backend: str, layout: str) -> bool:
        """The one rule for a launcher refusing a layout, in the generated tests and the matrix alike: a backend
        must refuse (raise anything, before launching) a layout its spec does not list, unless the layout check
        is waived. The reference never has to: a plain-torch reference that works on any layout is no defect."""
        return (layout != "contiguous" and backend != "reference" and layout not in self.layouts_for(backend)
                and "layout" not in self.waivers)

    def env(self, case: Case) -> dict:
        """A case's symbols completed with the spec's defaults and derived symbols."""
        return ex.resolve_symbols(case.values, self.symbols)


def _fmt(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)
