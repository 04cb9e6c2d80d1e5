"""Reading ``[cases]``: symbol defaults, constraints, explicit tiers and generated edge cases.

Edge cases are generated, not listed: from a small ``base`` case, every symbol in ``vary`` takes each of
its values (0, 1, odd and unaligned sizes); the base case is repeated in every non-contiguous layout, and
each layout is crossed once with the odd sizes (every varied symbol at its smallest odd, non-power-of-two
value at once: unaligned sizes in strided storage are where stride bugs live, and one crossing per layout
keeps the CPU tier small); and the base case is repeated with each named input value set the inputs ask
for (``specials``). Generated cases that break a constraint are dropped; explicit ones are errors.
"""

from __future__ import annotations

from dataclasses import replace

from harness.spec import expr as ex
from harness.spec.model import BENCH_TIERS, CASE_KEYS, LAYOUTS, TIERS, Case
from harness.spec.schema import Reader, describe


def read_cases(r: Reader, t: dict, layouts, specials: tuple[str, ...] = ()) -> tuple[dict, tuple, dict]:
    r.keys(t, ["symbols", "constraints"] + list(TIERS), "cases")
    symbols = {}
    for name, value in r.table(t, "symbols", "cases").items():
        if isinstance(value, (bool, int, float, str)):
            try:
                symbols[name] = ex.parse(value)
            except ex.ExprError as exc:
                r.problem(f"cases.symbols.{name}", f"bad expression: {exc}")
        else:
            r.problem(f"cases.symbols.{name}", f"expected a number, boolean or expression, got {describe(value)}")
    constraints = []
    for i, c in enumerate(r.str_list(t, "constraints", "cases")):
        try:
            constraints.append(ex.parse(c))
        except ex.ExprError as exc:
            r.problem(f"cases.constraints[{i}]", f"bad expression: {exc}")
    cases: dict[str, tuple[Case, ...]] = {}
    for tier in TIERS:
        if tier == "edge":
            cases[tier] = _edge(r, t.get("edge"), symbols, tuple(constraints), specials)
        elif tier in t:
            items = t[tier]
            if not isinstance(items, list):
                r.problem(f"cases.{tier}", f"expected a list of tables ([[cases.{tier}]]), got {describe(items)}")
                continue
            cases[tier] = tuple(c for i, item in enumerate(items)
                                if (c := _case(r, item, tier, f"cases.{tier}[{i}]", specials)) is not None)
        else:
            cases[tier] = ()
    if "cpu" not in t:
        cases["cpu"] = _cpu_default(cases.get("ci", ()))
    for tier in BENCH_TIERS:
        headlines = [c for c in cases.get(tier, ()) if c.headline]
        if len(headlines) > 1:
            r.problem(f"cases.{tier}", f"{len(headlines)} cases say headline = true; at most one may")
    return symbols, tuple(constraints), cases


def _kind(value) -> str | None:
    """'bool', 'str', '' for a number, None for anything else: what a varied symbol's values must share."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "str"
    return "" if isinstance(value, (int, float)) else None


def _cpu_default(ci: tuple[Case, ...]) -> tuple[Case, ...]:
    """The cpu bench tier a spec does not declare: its ci cases, the last (usually the largest) the headline.
    Small shapes are what a CPU times in seconds; the spec's bench shapes would take it an hour."""
    return tuple(replace(c, tier="cpu", headline=i == len(ci) - 1) for i, c in enumerate(ci))


def _case(r: Reader, item, tier: str, key: str, specials: tuple[str, ...] = ()) -> Case | None:
    if not isinstance(item, dict):
        r.problem(key, f"expected a table of symbol values, got {describe(item)}")
        return None
    given = []
    for name, value in item.items():
        if name in CASE_KEYS:
            continue
        if not isinstance(value, (bool, int, float, str)):
            r.problem(f"{key}.{name}", f"expected a number, boolean or string, got {describe(value)}")
            return None
        given.append((name, value))
    layout = r.get(item, "layout", str, key, default="contiguous")
    if layout not in LAYOUTS + ("contiguous",):
        r.problem(f"{key}.layout", f'unknown layout "{layout}" (one of contiguous, {", ".join(LAYOUTS)})')
        return None
    headline = r.get(item, "headline", bool, key, default=False)
    if headline and tier not in BENCH_TIERS:
        r.problem(f"{key}.headline", f"only {' and '.join(BENCH_TIERS)} cases can be the headline")
    value_set = r.get(item, "value_set", str, key, default="")
    if value_set and value_set not in specials:
        listed = f"the inputs list {', '.join(specials)}" if specials else "no input lists specials"
        r.problem(f"{key}.value_set", f'"{value_set}" is not in any input\'s specials ({listed})')
        return None
    return Case(tier, tuple(given), layout, headline, value_set)


def _edge(r: Reader, t, symbols: dict, constraints: tuple, specials: tuple[str, ...]) -> tuple[Case, ...]:
    if t is None:
        r.problem("cases.edge", "missing: every spec generates edge cases (0, 1, odd sizes, non-contiguous)")
        return ()
    if not isinstance(t, dict):
        r.problem("cases.edge", f"expected a table with base, vary and extra, got {describe(t)}")
        return ()
    r.keys(t, ["base", "vary", "extra"], "cases.edge", required=["base"])
    base_t = r.table(t, "base", "cases.edge", required=True)
    base = _case(r, base_t, "edge", "cases.edge.base", specials)
    if base is None:
        return ()
    generated, odd = [], {}
    for sym, values in r.table(t, "vary", "cases.edge").items():
        if sym not in base.values:
            r.problem(f"cases.edge.vary.{sym}", "varies a symbol the base case does not set")
            continue
        if not isinstance(values, list):
            r.problem(f"cases.edge.vary.{sym}", f"expected a list of sizes, got {describe(values)}")
            continue
        kind = _kind(base.values[sym])  # a symbol varies over values of its base value's kind
        for v in values:
            if _kind(v) != kind:
                want = {"bool": "booleans", "str": "strings"}.get(kind, "numbers")
                why = f" (the base case sets a {'boolean' if kind == 'bool' else 'string'})" if kind else ""
                r.problem(f"cases.edge.vary.{sym}", f"expected {want}{why}, got {describe(v)}")
                continue
            generated.append(Case("edge", tuple((k, v if k == sym else b) for k, b in base.given)))
            if isinstance(v, int) and v > 2 and v & (v - 1) and (sym not in odd or v < odd[sym]):
                odd[sym] = v
    generated = [base] + [c for c in generated if _satisfies(c, symbols, constraints)]
    generated += [Case("edge", base.given, lay) for lay in LAYOUTS]
    if odd:
        crossed = tuple((k, odd.get(k, b)) for k, b in base.given)
        generated += [c for lay in LAYOUTS if _satisfies(c := Case("edge", crossed, lay), symbols, constraints)]
    generated += [Case("edge", base.given, value_set=v) for v in specials]
    extras = r.get(t, "extra", list, "cases.edge", default=[])
    for i, item in enumerate(extras):
        c = _case(r, item, "edge", f"cases.edge.extra[{i}]", specials)
        if c is not None:
            generated.append(c)
    seen, unique = set(), []
    for c in generated:
        if c.id not in seen:
            seen.add(c.id)
            unique.append(c)
    return tuple(unique)


def _satisfies(case: Case, symbols: dict, constraints: tuple) -> bool:
    try:
        env = ex.resolve_symbols(case.values, symbols)
        return all(bool(c(env)) for c in constraints)
    except ex.ExprError:
        return True  # reported with its location by spec_check
