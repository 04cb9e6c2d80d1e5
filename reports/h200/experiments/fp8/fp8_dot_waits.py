"""Can tl.dot overlap the fp8 promotion's add with the next wgmma? Compiled for sm_90 without a GPU (any machine
with Triton: ``python3 reports/h200/experiments/fp8/fp8_dot_waits.py``), this prints, for three ways of writing
the promoted loop, the order of the loop's wgmma issues, waits and fp32 adds in the TTGIR, and the PTX's
``wgmma.wait_group`` counts. An add can overlap a wgmma only where a wait leaves a group pending (N > 0).

- ``inline``: ``acc += tl.dot(a, b.T)`` (kernels/matmul_fp8.py's persistent kernel);
- ``lagged``: this block's product added one iteration later, so the add has no dependence on the wgmma in flight;
- ``halves``: two dots over the halves of the N tile, each added into its own accumulator after both are issued.
"""

from __future__ import annotations

import re

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def _promoted(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, FORM: tl.constexpr):
    om = tl.arange(0, BM)
    on = tl.arange(0, BN // 2)
    ok = tl.arange(0, BK)
    a_p = a_ptr + om[:, None] * K + ok[None, :]
    b1_p = b_ptr + on[:, None] * K + ok[None, :]
    b2_p = b1_p + (BN // 2) * K
    acc1 = tl.zeros((BM, BN // 2), dtype=tl.float32)
    acc2 = tl.zeros((BM, BN // 2), dtype=tl.float32)
    prev1 = tl.zeros((BM, BN // 2), dtype=tl.float32)
    prev2 = tl.zeros((BM, BN // 2), dtype=tl.float32)
    for ki in range(0, K // BK):
        a = tl.load(a_p + ki * BK)
        b1 = tl.load(b1_p + ki * BK)
        b2 = tl.load(b2_p + ki * BK)
        if FORM == 0:  # inline
            acc1 += tl.dot(a, b1.T)
            acc2 += tl.dot(a, b2.T)
        elif FORM == 1:  # lagged
            t1 = tl.dot(a, b1.T)
            t2 = tl.dot(a, b2.T)
            acc1 += prev1
            acc2 += prev2
            prev1 = t1
            prev2 = t2
        else:  # halves
            t1 = tl.dot(a, b1.T)
            t2 = tl.dot(a, b2.T)
            acc1 += t1
            acc2 += t2
    acc1 += prev1
    acc2 += prev2
    tl.store(c_ptr + om[:, None] * BN + on[None, :], acc1.to(tl.bfloat16))
    tl.store(c_ptr + om[:, None] * BN + BN // 2 + on[None, :], acc2.to(tl.bfloat16))


def main() -> None:
    print(f"triton {triton.__version__}, sm_90, 128 x 256 x 128 tile, fp8 e4m3, 8 warps, 3 stages")
    signature = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16", "K": "i32", "BM": "constexpr",
                 "BN": "constexpr", "BK": "constexpr", "FORM": "constexpr"}
    for form, name in enumerate(("inline", "lagged", "halves")):
        src = ASTSource(_promoted, signature, constexprs={"BM": 128, "BN": 256, "BK": 128, "FORM": form})
        kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3})
        ttgir, ptx = kernel.asm["ttgir"], kernel.asm["ptx"]
        start = ttgir.find("scf.for")
        loop = ttgir[start:ttgir.find("scf.yield", start)]
        order = [("wait " + m.group(1)) if m.group(1) else ("issue" if m.group(0).startswith("ttng") else "add")
                 for m in re.finditer(r"ttng\.warp_group_dot_wait[^\n]*?pendings = (\d+)|ttng\.warp_group_dot |"
                                      r"arith\.addf", loop)][:8]
        waits = re.findall(r"wgmma\.wait_group\.sync\.aligned (\d+)", ptx)
        print(f"{name}: loop {' -> '.join(order)}; PTX wgmma {ptx.count('wgmma.mma_async')}, wait_group {waits}")


if __name__ == "__main__":
    main()
