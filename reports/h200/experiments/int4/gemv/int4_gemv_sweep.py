"""The int4 decode GEMV experiment (int4_gemv.py here) on a GPU: right, and which launch configuration at which M.

1. Correctness of the GEMV against ``int4_matmul_ref`` (the spec's tolerance), bitwise repeatable, at M = 1 and
   at shapes with a partial last group and a ragged N.
2. A sweep of GemvConfig (block_n x split_k x num_warps x num_stages) at M = 1 and (N, K) in {(4096, 4096),
   (4096, 14336), (14336, 4096)}, against the shipped tile kernel (kernels/int4_matmul.py, autotuned) and bf16
   ``F.linear`` on the resident weight, timed with harness.timing.engine.measure (events behind a spin kernel, L2
   flushed before each sample).
3. The heuristic ``gemv_config`` at the same shapes, so its loss against the sweep's best is on record.

int4_gemv_sweep-2.log/.json are the revised M = 1 version's run (2026-12-04).
int4_gemv_sweep-1.log/.json are the first version's run (commit 1ff8b2e, M = 1 to 16; int4_gemv.py says what
changed since).

Run from the repository root on the GPU: ``python3 reports/h200/experiments/int4/gemv/int4_gemv_sweep.py --out DIR``
(writes DIR/int4_gemv_sweep.json; each case in its own try/except).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
import traceback

import torch
import triton

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import int4_gemv as gv  # noqa: E402
from int4_probe import DTYPES, SWEEP_TIMING, TIMING, dense_bytes, int4_bytes, make_inputs, median_us  # noqa: E402

from harness.correctness.numerics import mismatch  # noqa: E402
from harness.spec.load import load as load_spec  # noqa: E402
from harness.spec.model import Case  # noqa: E402
from kernels import int4_matmul as q4  # noqa: E402
from kernels.common import sm_count  # noqa: E402

NKS = ((4096, 4096), (4096, 14336), (14336, 4096))
MS = (1,)  # the first sweep (gemv/int4_gemv_sweep-1.log) measured M = 1..16: the tile kernel won from M = 2
CHECKS = ((1, 4096, 4096), (1, 5003, 4104), (1, 4096, 14336), (1, 14336, 4096), (1, 33, 136), (1, 1, 8))
GRID = dict(block_n=(16, 32, 64, 128), split_k=(2, 4, 8, 16), num_warps=(1, 2, 4), num_stages=(1,))
MAX_ACC_PER_THREAD = 128  # fp32 accumulator elements a thread holds (block_n x 16 / threads): more spills


def gemv_check(spec, m, n, k, dtype_name) -> dict:
    """The GEMV against int4_matmul_ref with the spec's tolerance, and a second call bitwise equal."""
    dtype = DTYPES[dtype_name]
    a, w, s, z = make_inputs(m, n, k, dtype)
    c = torch.full((m, n), float("nan"), dtype=dtype, device="cuda")
    gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c)
    again = torch.full_like(c, float("inf"))
    gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=again)
    ref = torch.empty_like(c)
    q4.int4_matmul_ref(a=a, w=w, scales=s, zeros=z, c=ref)
    torch.cuda.synchronize()
    tol = spec.tolerance(dtype_name, "c", Case("full", (("M", m), ("N", n), ("K", k))))
    problem = mismatch(c, ref, tol)
    return {"M": m, "N": n, "K": k, "dtype": dtype_name, "ok": problem is None, "problem": problem,
            "max_abs_err": float((c.double() - ref.double()).abs().max()),
            "deterministic": bool(torch.equal(c.view(torch.int16), again.view(torch.int16))),
            "config": str(gv.gemv_config(m, n, k, sm_count(a.device), False))}


def sweep_shape(m, n, k) -> dict:
    a, w, s, z = make_inputs(m, n, k, torch.bfloat16)
    c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    w_bf16 = q4.dequantize(w, s, z, torch.bfloat16).contiguous()
    rec = {"M": m, "N": n, "K": k, "int4_bytes": int4_bytes(m, n, k), "bf16_bytes": dense_bytes(m, n, k)}
    rec["bf16_us"], _ = median_us(lambda: torch.nn.functional.linear(a, w_bf16), TIMING)
    rec["tile_us"], _ = median_us(lambda: q4.int4_matmul(a=a, w=w, scales=s, zeros=z, c=c), TIMING)
    shipped = gv.gemv_config(m, n, k, sm_count(a.device), False)
    rec["shipped_config"] = str(shipped)
    rec["shipped_gemv_us"], _ = median_us(lambda: gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=shipped),
                                          TIMING)
    rows = []
    for bn, sk, nw, ns in itertools.product(*GRID.values()):
        cfg = gv.GemvConfig(bn, sk, nw, ns)
        if bn * 16 / (32 * nw) > MAX_ACC_PER_THREAD:
            continue
        try:
            us, _ = median_us(lambda cfg=cfg: gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=cfg),
                              SWEEP_TIMING)
            rows.append({"config": [bn, sk, nw, ns], "us": us})
        except Exception as exc:  # noqa: BLE001 - one config's failure is a row
            rows.append({"config": [bn, sk, nw, ns], "error": f"{type(exc).__name__}: {exc}"[:300]})
    ok = [r for r in rows if "us" in r]
    best = min(ok, key=lambda r: r["us"]) if ok else None
    rec["sweep"] = rows
    rec["best"] = best
    if best:
        cfg = gv.GemvConfig(*best["config"])
        rec["best_us"], _ = median_us(lambda: gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=cfg), TIMING)
    for key in ("tile_us", "shipped_gemv_us", "best_us"):
        if rec.get(key):
            rec[key.replace("_us", "_speedup")] = rec["bf16_us"] / rec[key]
    return rec


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--ms", default=",".join(map(str, MS)))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    spec = load_spec("specs/int4_matmul.toml")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "checks": [], "shapes": []}
    out["triton"] = triton.__version__
    for (m, n, k), dt in itertools.product(CHECKS, ("bf16", "fp16")):
        try:
            rec = gemv_check(spec, m, n, k, dt)
        except Exception:  # noqa: BLE001
            rec = {"M": m, "N": n, "K": k, "dtype": dt, "error": traceback.format_exc()[-1500:]}
        out["checks"].append(rec)
        print("check", json.dumps({k2: rec.get(k2) for k2 in ("M", "N", "K", "dtype", "ok", "deterministic",
                                                               "max_abs_err", "problem", "error")}), flush=True)
    for m in map(int, args.ms.split(",")):
        for n, k in NKS:
            t0 = time.perf_counter()
            try:
                rec = sweep_shape(m, n, k)
            except Exception:  # noqa: BLE001
                rec = {"M": m, "N": n, "K": k, "error": traceback.format_exc()[-1500:]}
            rec["seconds"] = time.perf_counter() - t0
            out["shapes"].append(rec)
            show = {k2: rec.get(k2) for k2 in ("M", "N", "K", "bf16_us", "tile_us", "shipped_gemv_us", "best_us",
                                                "shipped_config", "tile_speedup", "shipped_gemv_speedup",
                                                "best_speedup", "error")}
            show["best"] = (rec.get("best") or {}).get("config")
            print("shape", json.dumps(show), flush=True)
            with open(os.path.join(args.out, "int4_gemv_sweep.json"), "w") as f:
                json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
