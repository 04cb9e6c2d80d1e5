"""The spec model: ``specs/<name>.toml`` loaded and validated into frozen dataclasses.

Loading never raises a traceback for a spec mistake: every problem becomes one line in a
:class:`~harness.schema.SpecError`, ``"<file>: <key.path>: <message>"``.
"""

from __future__ import annotations

import functools
import hashlib
import keyword
import math
import sys
from pathlib import Path

from harness.spec import expr as ex
from harness.spec.archs import ArchError, parse_rule
from harness.spec.roofline import read_roofline as _roofline
from harness.spec.schema import Reader, SpecError, describe, did_you_mean, one_line
from harness.spec.schema import parse_expr as _expr
from harness.spec.tolerance import read_tolerance as _tolerance
from harness.spec.waivers import flat_waivers, key_problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
from harness.spec.model import (
    DISTRIBUTIONS,
    DTYPES,
    FLOAT_DTYPES,
    FP8_DTYPES,
    LAYOUTS,
    REFERENCE_PRECISIONS,
    VALUE_SETS,
    Backend,
    Distribution,
    GateRule,
    Peer,
    Spec,
    Tensor,
)


def load(path: str | Path) -> Spec:
    """Load and validate one spec; raise SpecError with every problem found."""
    from harness.spec.semantics import check_semantics

    path = str(path)
    r = Reader(path)
    try:
        raw_bytes = Path(path).read_bytes()
        raw = tomllib.loads(raw_bytes.decode("utf-8"))
    except FileNotFoundError:
        raise SpecError([f"{path}: file not found"]) from None
    except OSError as exc:  # a folder, no permission
        raise SpecError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    except ValueError as exc:  # TOMLDecodeError, UnicodeDecodeError, an integer too long for int()
        raise SpecError([f"{path}: invalid TOML: {one_line(str(exc))}"]) from None
    except RecursionError:
        raise SpecError([f"{path}: invalid TOML: nested too deeply"]) from None
    spec = _build(r, raw, hashlib.sha256(raw_bytes).hexdigest())
    if spec is not None and not r.problems:
        check_semantics(r, spec)
    if r.problems:
        raise SpecError(r.problems)
    return spec


def load_cached(path: str | Path) -> Spec:
    """:func:`load`, once per file version in this process (worker processes load a spec for every task)."""
    st = Path(path).stat()
    return _load_version(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=256)
def _load_version(path: str, _mtime_ns: int, _size: int) -> Spec:
    return load(path)


def load_all(paths) -> tuple[list[Spec], list[str]]:
    specs, problems = [], []
    for p in paths:
        try:
            specs.append(load(p))
        except SpecError as exc:
            problems.extend(exc.problems)
    return specs, problems


def _build(r: Reader, raw: dict, sha: str) -> Spec | None:
    r.keys(raw, ["kernel", "backends", "peers", "params", "inputs", "outputs", "tolerance", "waive",
                 "cases", "roofline", "gate", "backward", "distributed", "targets"], "",
           required=["kernel", "inputs", "cases"])
    k = r.table(raw, "kernel", "")
    r.keys(k, ["name", "summary", "reference", "reference_precision", "dtypes", "layouts", "fallback", "timeout",
               "op", "oracle"],
           "kernel", required=["name", "reference"])
    name = r.get(k, "name", str, "kernel", default="")
    if name and name != Path(r.path).stem:
        r.problem("kernel.name", f'"{name}" must match the file name "{Path(r.path).stem}"')
    dtypes = r.str_list(k, "dtypes", "kernel", default=("fp32", "fp16", "bf16"))
    for i, d in enumerate(dtypes):
        if d not in FLOAT_DTYPES:
            r.problem(f"kernel.dtypes[{i}]", f'unknown dtype "{d}"{did_you_mean(d, FLOAT_DTYPES)}')
    layouts = _layouts(r, k, "kernel", ())
    backends = {n: _backend(r, n, b) for n, b in r.table(raw, "backends", "").items()
                if _is_table(r, b, f"backends.{n}")}
    if "reference" in backends:
        r.problem("backends.reference", "is reserved: the reference backend is kernel.reference")
    default_order = tuple(backends) + ("reference",)
    fallback = r.str_list(k, "fallback", "kernel", default=default_order)
    for i, b in enumerate(fallback):
        if b != "reference" and b not in backends:
            r.problem(f"kernel.fallback[{i}]", f'no backend "{b}"{did_you_mean(b, list(backends) + ["reference"])}')
    peers = {}
    for n, p in r.table(raw, "peers", "").items():
        if _is_table(r, p, f"peers.{n}"):
            r.keys(p, ["impl", "requires"], f"peers.{n}", required=["impl"])
            peers[n] = Peer(n, _import_path(r, p, f"peers.{n}"), r.str_list(p, "requires", f"peers.{n}"))
    params, param_present = {}, {}
    for n, p in r.table(raw, "params", "").items():
        if _is_table(r, p, f"params.{n}"):
            r.keys(p, ["value", "expr", "present"], f"params.{n}")
            if ("value" in p) == ("expr" in p):
                r.problem(f"params.{n}", "give exactly one of value (a constant) or expr (an expression)")
                continue
            if "value" in p:
                v = r.get(p, "value", (bool, int, float, str), f"params.{n}")
                params[n] = ex.constant(v) if v is not None else None
            else:
                params[n] = _expr(r, p.get("expr"), f"params.{n}.expr")
            if "present" in p:
                param_present[n] = _present(r, p, f"params.{n}")
    tensors = [_tensor(r, n, t, False) for n, t in r.table(raw, "inputs", "", required=True).items()
               if _is_table(r, t, f"inputs.{n}")]
    tensors += [_tensor(r, n, t, True) for n, t in r.table(raw, "outputs", "").items()
                if _is_table(r, t, f"outputs.{n}")]
    _argument_names(r, raw)
    if tensors and None not in tensors and not any(t.output or t.inplace for t in tensors):
        r.problem("outputs", "the kernel writes nothing: declare [outputs] or an input with inplace = true")
    tolerances = {}
    for d, t in r.table(raw, "tolerance", "").items():
        if d not in FLOAT_DTYPES:
            r.problem(f"tolerance.{d}", f'unknown dtype "{d}"{did_you_mean(d, FLOAT_DTYPES)}')
        elif _is_table(r, t, f"tolerance.{d}"):
            tolerances[d] = _tolerance(r, f"tolerance.{d}", t, d)
    waivers = {}
    for check, reason in flat_waivers(r.table(raw, "waive", "")):
        if problem := key_problem(check, peers):
            r.problem(f"waive.{check}", problem)
        elif not isinstance(reason, str) or not reason.strip():
            r.problem(f"waive.{check}", f"expected the reason as a non-empty string, got {describe(reason)}")
        else:
            waivers[check] = reason
    from harness.spec.cases import read_cases

    specials = tuple(dict.fromkeys(v for t in tensors if t is not None for v in t.specials))
    symbols, constraints, cases = read_cases(r, r.table(raw, "cases", "", required=True), layouts, specials)
    distributed = None
    if "distributed" in raw and _is_table(r, raw["distributed"], "distributed"):
        from harness.spec.distributed import over_worlds, read_distributed

        distributed = read_distributed(r, raw["distributed"])
        cases = over_worlds(r, cases, distributed) if distributed else cases
    roofline = _roofline(r, raw["roofline"]) if isinstance(raw.get("roofline"), dict) else None
    if "roofline" in raw and not isinstance(raw["roofline"], dict):
        r.problem("roofline", f"expected a table, got {describe(raw['roofline'])}")
    if None in params.values() or None in param_present.values() or any(t is None for t in tensors):
        return None
    from harness.spec.backward import read_backward

    backward = (read_backward(r, raw["backward"], tensors, params, backends, dtypes, peers) if "backward" in raw
                else None)
    from harness.spec.targets import read_targets

    targets = (read_targets(r, raw["targets"], list(backends) + list(peers), dtypes, list(cases.get("bench", ())),
                            "backward" in raw) if "targets" in raw else ())
    return Spec(
        path=r.path, name=name, summary=r.get(k, "summary", str, "kernel", default=""),
        reference=_import_path(r, k, "kernel", "reference"), dtypes=dtypes, layouts=layouts,
        fallback=fallback, backends=backends, peers=peers, params=params, tensors=tuple(tensors),
        tolerances=tolerances, waivers=waivers, symbols=symbols, constraints=constraints, cases=cases,
        roofline=roofline, timeout_s=_timeout(r, k), sha256=sha,
        reference_precision=_reference_precision(r, k), gate=_gate(r, raw),
        op=_import_path(r, k, "kernel", "op") or None, oracle=_import_path(r, k, "kernel", "oracle") or None,
        param_present=param_present, backward=backward, distributed=distributed, targets=targets,
    )


def _reference_precision(r: Reader, k: dict) -> str:
    value = r.get(k, "reference_precision", str, "kernel", default="upcast")
    if value not in REFERENCE_PRECISIONS:
        hint = did_you_mean(value, REFERENCE_PRECISIONS)
        r.problem("kernel.reference_precision",
                  f'unknown precision "{value}"{hint} (one of {", ".join(REFERENCE_PRECISIONS)})')
    return value


def _gate(r: Reader, raw: dict) -> GateRule | None:
    if "gate" not in raw:
        return None
    t = r.table(raw, "gate", "")
    r.keys(t, ["min_effect", "floor_us", "reason"], "gate", required=["reason"])
    effect = r.get(t, "min_effect", float, "gate")
    floor = r.get(t, "floor_us", float, "gate")
    if effect is not None and not 0 < effect < 1:
        r.problem("gate.min_effect", f"must be a fraction in (0, 1), e.g. 0.05 for 5 %, got {effect:g}")
    if floor is not None and not 0 <= floor < math.inf:
        r.problem("gate.floor_us", f"must be a finite number of microseconds >= 0, got {floor:g}")
    if effect is None and floor is None:
        r.problem("gate", "give min_effect, floor_us or both")
    reason = r.get(t, "reason", str, "gate", default="").strip()
    if "reason" in t and not reason:
        r.problem("gate.reason", "must say why this kernel needs its own minimum effect")
    return GateRule(effect, floor, reason)


def _timeout(r: Reader, k: dict) -> float:
    timeout = r.get(k, "timeout", float, "kernel", default=120.0)
    if not 0 < timeout < math.inf:
        r.problem("kernel.timeout", f"must be a positive number of seconds, got {timeout}")
    return timeout


def _argument_names(r: Reader, raw: dict) -> None:
    """Tensors and params are passed to the kernel as keyword arguments: identifiers, each name once."""
    seen: dict[str, str] = {}
    for section in ("inputs", "outputs", "params"):
        table = raw.get(section)
        for name in table if isinstance(table, dict) else ():
            key = f"{section}.{name}"
            if not name.isidentifier() or keyword.iskeyword(name):
                r.problem(key, "not a Python identifier: every tensor and param is passed by its name "
                               "as a keyword argument")
            elif name in seen:
                r.problem(key, f"{seen[name]} has the same name: every tensor and param is passed by its "
                               "name as a keyword argument")
            else:
                seen[name] = key


def _is_table(r: Reader, value, key: str) -> bool:
    if not isinstance(value, dict):
        r.problem(key, f"expected a table, got {describe(value)}")
        return False
    return True


def _import_path(r: Reader, table: dict, where: str, name: str = "impl") -> str:
    value = r.get(table, name, str, where, default="", required=name in ("impl", "reference"))
    if value and (value.count(":") != 1 or not all(value.split(":"))):
        r.problem(f"{where}.{name}", f'expected "package.module:function", got "{value}"')
    return value


def _layouts(r: Reader, table: dict, key: str, default) -> tuple[str, ...]:
    layouts = r.str_list(table, "layouts", key, default=default)
    for i, lay in enumerate(layouts):
        if lay not in LAYOUTS:
            r.problem(f"{key}.layouts[{i}]",
                      f'unknown layout "{lay}"{did_you_mean(lay, LAYOUTS)} (one of {", ".join(LAYOUTS)})')
    return layouts


def _backend(r: Reader, name: str, b: dict) -> Backend:
    key = f"backends.{name}"
    r.keys(b, ["impl", "arch", "requires", "tools", "source", "build", "layouts"], key, required=["impl"])
    arch = r.str_list(b, "arch", key)
    for i, rule in enumerate(arch):
        try:
            parse_rule(rule)
        except ArchError as exc:
            r.problem(f"{key}.arch[{i}]", str(exc))
    source = _import_path(r, b, key, "source") if "source" in b else None
    build = _import_path(r, b, key, "build") if "build" in b else None
    layouts = _layouts(r, b, key, ()) if "layouts" in b else None
    return Backend(name, _import_path(r, b, key), arch, r.str_list(b, "requires", key),
                   r.str_list(b, "tools", key), source, build, layouts)


def _present(r: Reader, table: dict, key: str) -> ex.Expr | None:
    """``present``: an expression over the case's symbols (true or false at each case, which semantics checks)."""
    source = r.get(table, "present", (bool, str), key)
    return None if source is None else _expr(r, source, f"{key}.present")


def _shape(r: Reader, t: dict, key: str) -> tuple[list, ex.Expr | None]:
    """(one expression per dimension, None), or ([], one expression giving the list of them)."""
    shape = r.get(t, "shape", (list, str), key, default=[])
    if isinstance(shape, str):  # a rank that depends on the case: "[BT, V] if reduction == 'none' else []"
        whole = _expr(r, shape, f"{key}.shape", lists=True)
        return ([], whole) if whole is not None else ([None], None)
    dims = []
    for i, d in enumerate(shape):
        if isinstance(d, bool) or not isinstance(d, (str, int)):
            r.problem(f"{key}.shape[{i}]", f"expected a symbol expression or an integer, got {describe(d)}")
            continue
        dims.append(_expr(r, d, f"{key}.shape[{i}]"))
    return dims, None


def _tensor(r: Reader, name: str, t: dict, output: bool) -> Tensor | None:
    key = f"{'outputs' if output else 'inputs'}.{name}"
    allowed = ["shape", "dtype", "tolerance"] + (["grad"] if output else ["values", "inplace", "contiguous",
                                                                         "specials", "present", "static"])
    r.keys(t, allowed, key, required=["shape"])
    if not output and isinstance(t.get("shape"), str):
        r.problem(f"{key}.shape", "expected a list of dimensions: a whole-shape expression is for outputs (an "
                                  "input's dimensions are what the op binds the symbols from)")
        dims, whole = [None], None
    else:
        dims, whole = _shape(r, t, key)
    present = _present(r, t, key) if "present" in t else None
    dtype = r.get(t, "dtype", str, key, default="case")
    if dtype != "case" and dtype not in DTYPES:
        r.problem(f"{key}.dtype", f'unknown dtype "{dtype}"{did_you_mean(dtype, DTYPES)}')
    # an unknown dtype (already reported) counts as a float: one problem, not a second about its values
    is_float = dtype == "case" or dtype in FLOAT_DTYPES + FP8_DTYPES or dtype not in DTYPES
    # outputs are allocated and poisoned by the harness, never filled: they take no values
    values = None if output else _distribution(r, t.get("values", "normal" if is_float else None),
                                               f"{key}.values", is_float)
    inplace = r.get(t, "inplace", bool, key, default=False)
    static = r.get(t, "static", bool, key, default=False)
    if static and inplace:
        r.problem(f"{key}.static", "an inplace input is written by every call: it cannot keep its values")
    tolerance = None
    if "tolerance" in t:
        if not (output or inplace):
            r.problem(f"{key}.tolerance", "only a tensor the kernel writes (an output or an inplace input) is compared")
        elif _is_table(r, t["tolerance"], f"{key}.tolerance"):
            tolerance = _tolerance(r, f"{key}.tolerance", t["tolerance"], dtype if dtype != "case" else None)
    specials = r.str_list(t, "specials", key)
    for i, v in enumerate(specials):
        if v not in VALUE_SETS:
            r.problem(f"{key}.specials[{i}]", f'unknown value set "{v}"{did_you_mean(v, VALUE_SETS)} '
                                              f'(one of {", ".join(VALUE_SETS)})')
        elif v != "zero_rows" and not is_float:
            r.problem(f"{key}.specials[{i}]", f'"{v}" needs a floating-point tensor')
    if None in dims or values is None and not output or "present" in t and present is None:
        return None
    return Tensor(name, tuple(dims), dtype, values or Distribution("normal", ()), inplace,
                  r.get(t, "contiguous", bool, key, default=False), output, tolerance, specials, present, whole,
                  r.get(t, "grad", bool, key, default=True), static)


def _distribution(r: Reader, source, key: str, is_float: bool) -> Distribution | None:
    if source is None:
        r.problem(key, 'integer tensors need explicit values, e.g. "randint(0, 100)"')
        return None
    # the arguments are expressions like any other (sqrt, min, ...): "uniform(0.05 / sqrt(K), 0.2 / sqrt(K))"
    e = _expr(r, source, key, functions={**ex.FUNCTIONS, **DISTRIBUTIONS})
    if e is None:
        return None
    body = e.tree.body
    kind, args = (body.id, ()) if isinstance(body, ex.ast.Name) else (
        (body.func.id, body.args) if isinstance(body, ex.ast.Call) else (None, ()))
    if kind not in DISTRIBUTIONS:
        r.problem(key, f"expected one of {', '.join(DISTRIBUTIONS)} (with arguments), got {describe(source)}")
        return None
    if len(args) not in DISTRIBUTIONS[kind]:
        r.problem(key, f"{kind} takes {' or '.join(map(str, DISTRIBUTIONS[kind]))} arguments, got {len(args)}")
        return None
    if kind == "randint" and is_float or kind != "randint" and not is_float:
        r.problem(key, f"{kind} does not suit a {'floating' if is_float else 'integer'} tensor")
        return None
    parsed = tuple(_expr(r, ex.ast.unparse(a), key) for a in args)  # a distribution inside one: one problem
    return None if None in parsed else Distribution(kind, parsed)
