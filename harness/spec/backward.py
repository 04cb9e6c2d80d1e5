"""``[backward]``: what of a kernel is differentiable, read and validated like the rest of a spec (pure: no
import of the code it names; :mod:`harness.spec.bind` resolves and checks those later).

```toml
[backward]
inputs = ["x", "weight"]                  # the inputs that get gradients
grad_outputs = "random"                   # or "loss" (model.GRAD_OUTPUTS)
saved = ["x", "weight"]                   # what a standalone backward takes of the forward: inputs or outputs

[backward.backends.triton]                # a forward backend's backward
autograd = "kernels.rmsnorm_bwd:RMSNormFunction"
args = ["x", "weight", "eps"]
kernel = "kernels.rmsnorm_bwd:rmsnorm_bwd"

[backward.backends.liger]                 # or: the forward's impl (a backend's or a peer's) is itself
differentiable = true                     # differentiable, called as the forward is

[backward.tolerance.weight.bf16]          # one gradient's bound at one dtype
rtol = 2e-2
reason = "..."

[backward.roofline]                       # the backward's own traffic, read like [roofline]
read_bytes = "bytes_x + bytes_weight + bytes_grad_out"
write_bytes = "bytes_grad_x + bytes_grad_weight"
flops = "11 * numel_x"
target = 0.8
```

``[backward.roofline]`` sees the forward's symbols plus ``numel_`` / ``bytes_`` of each grad output
(``grad_<output>``) and each gradient (``grad_<input>``): the tensors a backward reads and writes. A benchmark's
bwd rows take their % of roofline from it, its full rows from it plus the forward's ``[roofline]``.
"""

from __future__ import annotations

import re

from harness.spec.model import FLOAT_DTYPES, GRAD_OUTPUTS, Backward, BackwardImpl, Roofline, Tensor
from harness.spec.roofline import read_roofline
from harness.spec.schema import Reader, describe, did_you_mean
from harness.spec.tolerance import read_tolerance


def grad_name(tensor: str) -> str:
    """The keyword a standalone backward gets a tensor's gradient by: ``grad_<name>``."""
    return f"grad_{tensor}"


def read_backward(r: Reader, t, tensors: list[Tensor], params, backends, dtypes, peers=None) -> Backward | None:
    if not isinstance(t, dict):
        r.problem("backward", f"expected a table, got {describe(t)}")
        return None
    r.keys(t, ["inputs", "grad_outputs", "saved", "backends", "tolerance", "roofline"], "backward",
           required=["inputs", "backends"])
    by_name = {x.name: x for x in tensors}
    inputs = r.str_list(t, "inputs", "backward")
    candidates = [x.name for x in tensors if not x.output]
    for i, name in enumerate(inputs):
        x = by_name.get(name)
        if x is None or x.output:
            r.problem(f"backward.inputs[{i}]", f'no input "{name}"{did_you_mean(name, candidates)}')
        elif x.fixed_dtype and x.fixed_dtype not in FLOAT_DTYPES:
            r.problem(f"backward.inputs[{i}]", f'"{name}" is {x.fixed_dtype}: only a floating-point input has a '
                                               "gradient")
        elif x.inplace:
            r.problem(f"backward.inputs[{i}]", f'"{name}" is inplace: the gradient of an input the forward '
                                               "overwrites is not defined here")
    if "inputs" in t and not inputs:
        r.problem("backward.inputs", "lists no input: name the inputs that get gradients")
    if any(x.inplace for x in tensors):
        r.problem("backward", "a kernel with inplace inputs cannot declare a backward: the harness compares the "
                              "gradients of [outputs] only")
    if not any(x.output and x.grad for x in tensors) and any(x.output for x in tensors):
        r.problem("backward", "every output is grad = false: no gradient flows back to an input")
    grad_outputs = r.get(t, "grad_outputs", str, "backward", default="random")
    if grad_outputs not in GRAD_OUTPUTS:
        r.problem("backward.grad_outputs", f'unknown way "{grad_outputs}"{did_you_mean(grad_outputs, GRAD_OUTPUTS)} '
                                           f'(one of {", ".join(GRAD_OUTPUTS)})')
    saved = r.str_list(t, "saved", "backward")
    for i, name in enumerate(saved):
        if name not in by_name:
            r.problem(f"backward.saved[{i}]", f'no input or output "{name}"{did_you_mean(name, list(by_name))}')
    impls = {}
    for name, b in r.table(t, "backends", "backward").items():
        key = f"backward.backends.{name}"
        if not isinstance(b, dict):
            r.problem(key, f"expected a table, got {describe(b)}")
            continue
        peer = (peers or {}).get(name)
        if name not in backends and peer is None:
            r.problem(key, f'no backend "{name}"{did_you_mean(name, list(backends) + list(peers or ()))}: a '
                           "backward belongs to a forward backend (its arch, requires and layouts) or a peer")
        elif peer is not None and set(b) != {"differentiable"}:
            r.problem(key, f'"{name}" is a peer: its backward is its impl\'s autograd (differentiable = true) and '
                           "nothing else; a peer is timed, not tested")
        impl = backends[name].impl if name in backends else peer.impl if peer is not None else None
        impls[name] = _impl(r, key, name, b, tensors, params, bool(saved), impl)
    tolerances = {}
    for name, per_dtype in r.table(t, "tolerance", "backward").items():
        key = f"backward.tolerance.{name}"
        if name not in inputs:
            r.problem(key, f'"{name}" is not in backward.inputs: only a gradient the harness compares has a '
                           f"tolerance{did_you_mean(name, inputs)}")
            continue
        if not isinstance(per_dtype, dict):
            r.problem(key, f"expected a table of dtypes (backward.tolerance.{name}.bf16), got {describe(per_dtype)}")
            continue
        for d, tol in per_dtype.items():
            if d not in dtypes:
                r.problem(f"{key}.{d}", f'not a dtype of this kernel: "{d}"{did_you_mean(d, dtypes)} (one of '
                                        f'{", ".join(dtypes)})')
            elif not isinstance(tol, dict):
                r.problem(f"{key}.{d}", f"expected a table, got {describe(tol)}")
            else:
                tolerances[(name, d)] = read_tolerance(r, f"{key}.{d}", tol, d)
    roofline = _roofline(r, t["roofline"], tensors, inputs) if "roofline" in t else None
    return Backward(inputs, grad_outputs, saved, impls, tolerances, roofline)


class _Nested(Reader):
    """A reader whose problems name their keys under ``prefix``: the forward's [roofline] reader, reused for
    [backward.roofline], names its keys ``roofline.*``."""

    def __init__(self, outer: Reader, prefix: str):
        super().__init__(outer.path)
        self.problems, self.prefix = outer.problems, prefix

    def problem(self, key: str, message: str) -> None:
        super().problem(f"{self.prefix}.{key}" if key else self.prefix, message)


_TENSOR_SYMBOL = re.compile(r"^(?:numel|bytes)_(.+)$")


def _roofline(r: Reader, t, tensors: list[Tensor], inputs) -> Roofline | None:
    if not isinstance(t, dict):
        r.problem("backward.roofline", f"expected a table, got {describe(t)}")
        return None
    roof = read_roofline(_Nested(r, "backward"), t)
    if roof is None:
        return None
    # A tensor symbol must name a tensor the backward has; the case's own symbols are checked when evaluated
    # (this reader is not handed them).
    known = [x.name for x in tensors] + [grad_name(x.name) for x in tensors if x.output and x.grad]
    known += [grad_name(n) for n in inputs]
    for key, e in (("read_bytes", roof.read_bytes), ("write_bytes", roof.write_bytes), ("bytes", roof.bytes),
                   ("flops", roof.flops)):
        if e is None or (key == "bytes" and roof.read_bytes is not None):
            continue
        for name in sorted(e.names):
            m = _TENSOR_SYMBOL.match(name)
            if m and m.group(1) not in known:
                r.problem(f"backward.roofline.{key}", f"undefined symbol '{name}': no tensor \"{m.group(1)}\""
                                                      f"{did_you_mean(m.group(1), known)}")
    return roof


def _impl(r: Reader, key: str, name: str, b: dict, tensors, params, has_saved: bool, forward_impl) -> BackwardImpl:
    r.keys(b, ["differentiable", "autograd", "args", "kernel"], key)
    paths = {}
    for k in ("autograd", "kernel"):
        value = r.get(b, k, str, key, default=None)
        if value is not None and (value.count(":") != 1 or not all(value.split(":"))):
            r.problem(f"{key}.{k}", f'expected "package.module:attribute", got "{value}"')
        paths[k] = value
    keywords = r.get(b, "differentiable", bool, key, default=False)
    if keywords:
        for k in ("autograd", "args"):
            if k in b:
                r.problem(f"{key}.{k}", "has no place beside differentiable = true: the forward's impl is the "
                                        "differentiable callable, called as the forward is")
        paths["autograd"] = forward_impl
    # a mistyped flag, or an unknown backend (said above), is its own problem
    said = ("differentiable" in b and not isinstance(b["differentiable"], bool)) or (keywords and not forward_impl)
    if not paths["autograd"] and not paths["kernel"] and not said:
        r.problem(key, "give differentiable = true (the forward's impl returns outputs with a grad_fn), autograd "
                       "(a differentiable callable), kernel (a standalone backward) or both")
    if paths["kernel"] and not has_saved:
        r.problem("backward.saved", f"required with {key}.kernel: the forward's tensors the backward takes")
    known = [x.name for x in tensors if not x.output] + list(params)
    args = r.str_list(b, "args", key, default=tuple(known))
    if "args" in b and not paths["autograd"]:
        r.problem(f"{key}.args", "has no effect without autograd")
    for i, a in enumerate(args):
        if a not in known:
            r.problem(f"{key}.args[{i}]", f'no input or param "{a}"{did_you_mean(a, known)}')
    return BackwardImpl(name, paths["autograd"], () if keywords else tuple(args), paths["kernel"], keywords)
