"""The spec model: frozen dataclasses for a kernel's declaration, and the constants the spec language uses."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from harness.spec import expr as ex

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover
    pass


FLOAT_DTYPES = ("fp64", "fp32", "fp16", "bf16")


DTYPES = FLOAT_DTYPES + ("int64", "int32", "int16", "int8", "uint8", "bool")


# torch.testing.assert_close's defaults: the table every spec starts from (rtol, atol).
DEFAULT_TOLERANCES = {"fp64": (1e-7, 1e-7), "fp32": (1.3e-6, 1e-5), "fp16": (1e-3, 1e-5), "bf16": (1.6e-2, 1e-5)}


LAYOUTS = ("padded", "strided", "transposed")


TIERS = ("edge", "ci", "full", "huge", "bench")


WAIVABLE = ("determinism", "layout", "inputs", "nan_inf")


DISTRIBUTIONS = {"normal": (0, 2), "uniform": (2,), "randint": (2,)}


CASE_KEYS = ("layout", "headline")


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float
    reason: str = ""

    @property
    def loosened(self) -> bool:
        return bool(self.reason)


@dataclass(frozen=True)
class Distribution:
    kind: str
    args: tuple[ex.Expr, ...]


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[ex.Expr, ...]
    dtype: str                      # "case" or a fixed dtype name
    values: Distribution
    inplace: bool = False
    contiguous: bool = False
    output: bool = False


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

    @property
    def id(self) -> str:
        parts = ",".join(f"{k}={_fmt(v)}" for k, v in self.given)
        return parts if self.layout == "contiguous" else f"{parts}-{self.layout}"

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

    def read_fraction(self, env: dict) -> float | None:
        if self.read_bytes is None or self.write_bytes is None:
            return None
        read, written = float(self.read_bytes(env)), float(self.write_bytes(env))
        return read / (read + written) if read + written > 0 else None


@dataclass(frozen=True)
class Spec:
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

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if not t.output)

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        return tuple(t for t in self.tensors if t.output)

    @property
    def written(self) -> tuple[Tensor, ...]:
        """Everything the kernel writes: outputs and in-place inputs."""
        return tuple(t for t in self.tensors if t.output or t.inplace)

    def tolerance(self, dtype: str) -> Tolerance:
        if dtype in self.tolerances:
            return self.tolerances[dtype]
        rtol, atol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
        return Tolerance(rtol, atol)

    def layouts_for(self, backend: str) -> tuple[str, ...]:
        b = self.backends.get(backend)
        return self.layouts if b is None or b.layouts is None else b.layouts

    def env(self, case: Case) -> dict:
        """A case's symbols completed with the spec's defaults and derived symbols."""
        return ex.resolve_symbols(case.values, self.symbols)


def _fmt(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)
