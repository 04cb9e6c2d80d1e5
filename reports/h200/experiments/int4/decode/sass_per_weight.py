"""SASS instructions per weight in the main loop of the decode GEMV and of its stage variants, compiled ahead of
time (no GPU): the GEMV (kernels/int4_gemv.py), the XOR floor (int4_decode_sweep.py), the dequantisation alone and
the factored loop (gemv_stages.py), at M = 1, bf16, N = K = 4096, split 8.

Each launch is recorded on meta tensors and compiled for the target with the installed Triton (harness.aot); the
loop is the longest block closed by a backward branch in Triton's SASS listing (``asm["sass"]``, nvdisasm). Per
weight = its instructions over the weights a thread takes an iteration (BLOCK_N x BLOCK_U x 8 / threads).

From the repository root: ``python3 reports/h200/experiments/int4/decode/sass_per_weight.py --out DIR [--arch
sm_90]`` (writes DIR/sass_per_weight.txt).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys

import torch
import triton

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemv_stages import stages  # noqa: E402

from harness.aot import triton as aot  # noqa: E402
from harness.aot.launches import as_jit_function, jit_language, record_launches  # noqa: E402
from kernels import int4_gemv as gv  # noqa: E402

N = K = 4096
TILES = gv.TILES + ((32, 16, 1), (64, 16, 2), (64, 16, 1))


def _xor(a, w, s, z, c, cfg):
    from int4_decode_sweep import stream  # imported here: the sweep module needs the experiments' path set

    stream(w, torch.empty(16 * N, dtype=torch.int32, device=w.device), cfg)


VARIANTS = {
    "gemv": lambda a, w, s, z, c, cfg: gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=cfg),
    "xor floor": _xor,
    "dequant only": lambda a, w, s, z, c, cfg: stages(a, w, s, z, c, cfg, "dequant"),
    "factored": lambda a, w, s, z, c, cfg: stages(a, w, s, z, c, cfg, "factored"),
}


def tensors() -> dict:
    bf = torch.bfloat16
    return dict(a=torch.empty(1, K, dtype=bf), w=torch.empty(N, K // 2, dtype=torch.uint8),
                s=torch.empty(N, K // 128, dtype=bf), z=torch.empty(N, K // 128, dtype=torch.uint8),
                c=torch.empty(1, N, dtype=bf))  # fmt: skip


def sass(record, arch: str) -> str:
    target, options = aot._target_and_options(record, arch)
    src = aot._ast_source(as_jit_function(record.jit_fn), record)
    with aot._compile_knobs(), jit_language():
        return triton.compiler.compile(src, target=target, options=options).asm["sass"]


def main_loop(text: str) -> list[str]:
    """The instructions of the longest block that a backward branch closes."""
    lines = text.splitlines()
    labels = {line.strip()[:-1]: i for i, line in enumerate(lines) if re.fullmatch(r"\S+:", line.strip())}
    best: list[str] = []
    for i, line in enumerate(lines):
        m = re.search(r"BRA (\S+);", line)
        j = labels.get(m.group(1)) if m else None
        if j is not None and j < i:
            body = [x for x in lines[j + 1:i + 1] if "\t" in x]
            best = body if len(body) > len(best) else best
    return best


def opcode(line: str) -> str:
    words = line.split("\t", 1)[1].split()
    return (words[1] if words[0].startswith("@") else words[0]).split(".")[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--arch", default="sm_90")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = [f"triton {triton.__version__}, {args.arch}; M = 1, bf16, N = K = {N}, split 8",
            f"{'variant':13s} {'tile (block_n, block_u, warps)':31s} {'loop':>5s} {'per weight':>10s}  top opcodes"]
    for (bn, bu, nw), (name, fn) in ((t, v) for t in TILES for v in VARIANTS.items()):
        cfg = gv.GemvConfig(bn, bu, 8, nw)
        record = record_launches(lambda a, w, s, z, c, fn=fn, cfg=cfg: fn(a, w, s, z, c, cfg), tensors())[0]
        body = main_loop(sass(record, args.arch))
        per = len(body) / (bn * bu * 8 / (32 * nw))
        ops = ", ".join(f"{k} {v}" for k, v in collections.Counter(map(opcode, body)).most_common(6))
        rows.append(f"{name:13s} {str((bn, bu, nw)):31s} {len(body):5d} {per:10.2f}  {ops}")
        print(rows[-1], flush=True)
    with open(os.path.join(args.out, "sass_per_weight.txt"), "w") as f:
        f.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
