"""The catalogue of generated checks: one row per check (name, what it catches, waivable, order).

It lives with the spec language because a spec's ``[waive]`` keys are check names. The implementations in
:mod:`harness.correctness` register against these rows (``@check("poison")``), the runner runs them in the
rows' order and skips a waivable one a spec waives, and docs/checks.md's table is :func:`markdown_table`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckInfo:
    name: str
    catches: str     # one line of markdown: docs/checks.md's "what it catches" cell
    waivable: bool
    order: int       # the runner's order: a check that names a cause precisely runs before those seeing effects


CHECKS: tuple[CheckInfo, ...] = (
    CheckInfo("guards", "a write outside a tensor: each tensor sits between guard bands and a non-contiguous "
                        "view's padding holds a pad pattern; after every call both must be unchanged (the message "
                        "names the tensor and the first offset written)", False, 10),
    CheckInfo("zero-size", "a crash on 0-size inputs (the error, in one line); a Triton launch with an empty grid is "
                           "harmless and only noted, and a write outside a tensor is the guards' to catch",
              True, 20),
    CheckInfo("layout", "non-contiguous inputs (padded rows, strided, transposed) that give another result than "
                        "their contiguous copies; a layout the spec does not list must raise a clear error instead",
              True, 30),
    CheckInfo("poison", "output elements never written: an element is unwritten only if it still holds the "
                        "poison of the first run and the other poison of the second run (floats: NaNs with "
                        "payloads; integers: sentinels), so no value a kernel writes is mistaken for one",
              False, 40),
    CheckInfo("nan_inf", "NaN or Inf where the reference has none, or at other positions than the reference",
              True, 50),
    CheckInfo("numerics", "results off the reference, compared in fp64 (integers in int64): elementwise "
                          "`|got - ref| <= atol + rtol * |ref|` (with the tolerance's mismatch budget) and, for "
                          "floats, per row `||got - ref|| <= norm_rtol * ||ref||`, which fails at any magnitude",
              False, 60),
    CheckInfo("inputs", "inputs not declared `inplace` that are not bitwise unchanged", True, 70),
    CheckInfo("determinism", "two runs on the same inputs that are not bitwise equal", True, 80),
    CheckInfo("stale", "a result that does not follow its inputs: the kernel runs twice on the same buffers with "
                       "new values written into the inputs in place between the calls and its outputs poisoned "
                       "again; the second result must match the second reference (result replay, a cache keyed "
                       "by data pointer, outputs written on the first call only). An input declared "
                       "`static = true` (a model's weight) keeps its values here, in stream and graph and in the "
                       "bench's timed re-check, so a kernel may cache what it derives from it", False, 90),
    CheckInfo("stream", "work that is not on the caller's stream (GPU only): the call runs on a fresh stream "
                        "whose inputs are written behind a spin, and the outputs are read after synchronizing "
                        "that stream only, never the device", False, 100),
    CheckInfo("graph", "a launcher that cannot live in a CUDA graph (GPU only): the call is captured, new input "
                       "values are copied into the captured buffers and the graph replayed; a host sync, work on "
                       "another stream or a result cached on the host fails, with why in one line", True, 105),
)
# Checks of the kernel as a PyTorch op: not run on every case by the runner but as their own test items per
# backend x dtype (harness.plugin.op_items), on the spec's smallest cases. Waivable like the rows above.
OP_CHECKS: tuple[CheckInfo, ...] = (
    CheckInfo("opcheck", "a kernel that is not a correct PyTorch op (its own item per backend x dtype, "
                         "`rmsnorm[triton-bf16-opcheck]`): torch.library.opcheck's test_schema (an input written "
                         "that the spec does not declare `inplace`), test_autograd_registration, test_faketensor "
                         "(a fake whose outputs differ from the real ones) and test_aot_dispatch_dynamic",
              True, 110),
    CheckInfo("compile", "a kernel that breaks under `torch.compile(fullgraph=True)` (its own item per backend, "
                         "`rmsnorm[triton-fp32-compile]`): a graph break, a result other than eager's (bitwise "
                         "unless determinism is waived), or more than one compiled frame for three sizes of a "
                         "dynamic dimension", True, 120),
)
BY_NAME = {c.name: c for c in CHECKS}
WAIVABLE = tuple(c.name for c in CHECKS + OP_CHECKS if c.waivable)


def markdown_table() -> str:
    """docs/checks.md's check table, in run order, the op items' checks last."""
    lines = ["| check | what it catches | waivable |", "|---|---|---|"]
    for c in sorted(CHECKS + OP_CHECKS, key=lambda c: c.order):
        catches = c.catches.replace("|", "\\|")  # a pipe, even in a code span, would end the cell
        lines.append(f"| {c.name} | {catches} | {'yes' if c.waivable else 'no'} |")
    return "\n".join(lines)
