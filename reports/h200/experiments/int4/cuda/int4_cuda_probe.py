"""The CUDA int4 decode kernel (kernels/int4_gemv.cu, launched by kernels/int4_cuda.py) on a GPU: right, then
how fast against bf16 and the Triton kernels.

1. Every configuration (warps, row tiles, splits of K across blocks, loads in flight: in registers, or through
   the bulk ring of 2, 3 or 4 stages a block in shared memory, filled by a producer warp with cp.async.bulk; with
   ``--configs``, the preload too: scales, zero points and activations copied to shared memory first) at every
   checked shape, both dtypes, against ``int4_matmul_ref`` with the spec's tolerance, and bitwise repeatable; a
   configuration that fails is recorded and never timed. A ring or preload that does not fit the device's shared
   memory per block is skipped, recorded as such.
2. At M in {1, 4, 16} and (N, K) in {(4096, 4096), (4096, 14336), (14336, 4096)}, bf16: each configuration, the
   launcher's own choice, the shipped Triton launcher (``int4_matmul``: the GEMV at M = 1, the tile kernel
   above) and bf16 ``F.linear`` on the resident dequantised weight, timed with harness.timing.engine.measure
   (events behind a spin kernel, L2 flushed before each sample); the ratios are bf16's median over ours. The
   fastest ring configuration is reported beside the launcher's own choice (which never takes a ring yet).

3. The floors of the launcher's configuration and of the fastest unsplit ring at each timed shape up to 8 rows:
   the same source compiled again with ``KH_INT4_FLOOR`` (kernels/int4_gemv.cu), its loads, grid and reduction
   kept and the work per group replaced, 1: the loaded words XORed together (the loads alone), 2: the
   dequantisation kept, XORed instead of multiplied (no MMA). The kernel's time over the floors says what the
   loads cost and what the arithmetic adds.
4. ``--floors``: 1 to 3 for the launcher's own configurations at M = 1 alone (its checks at every shape, then
   its time and floors at the three decode shapes), without the sweep.
5. ``--call M,N,K``: three calls of the launcher's own choice (or of ``--config W,RT,S,D,ST``) at one shape and
   nothing else, for Nsight Compute to profile the third (bench/gpu_session.sh int4-cuda runs it under
   ``ncu --clock-control none``: where the warps stall, the occupancy and the DRAM throughput reached).

Run from the repository root on the GPU: ``python3 reports/h200/experiments/int4/cuda/int4_cuda_probe.py --out
DIR`` (writes DIR/int4_cuda_probe.json).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import traceback
from dataclasses import astuple

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from int4_probe import DTYPES, SWEEP_TIMING, make_inputs, median_us  # noqa: E402

from harness.correctness.numerics import mismatch  # noqa: E402
from harness.spec.load import load as load_spec  # noqa: E402
from harness.spec.model import Case  # noqa: E402
from kernels import int4_cuda as cu  # noqa: E402
from kernels import int4_matmul as q4  # noqa: E402
from kernels.common import load_cuda_extension  # noqa: E402
from kernels.splitk import unused  # noqa: E402

NKS = ((4096, 4096), (4096, 14336), (14336, 4096))
MS = (1, 4, 16)
# unaligned N, a partial last group (K % 128 = 32, 96), one row, nine rows (two column tiles), a short K
CHECKS = ((1, 4096, 4096), (1, 5003, 4128), (16, 4096, 4096), (9, 333, 4192), (3, 1, 32), (1, 17, 96),
          (8, 4096, 14336), (1, 14336, 4096))
# one row tile at every split and depth; two row tiles (the activations' loads shared) at depth 1
REGISTER_CONFIGS = tuple(cu.CudaGemvConfig(w, 1, s, d) for w in (4, 8) for s in (1, 2, 4, 8) for d in (1, 2)) + tuple(
    cu.CudaGemvConfig(8, 2, s, 1) for s in (1, 2, 4))
# the bulk ring at one row tile: 2, 3 or 4 stages in flight at 4 and 8 warps; splits of 2 at eight warps (the
# tickets' path with the ring), two row tiles (32 rows a stage, a producer lane each); 9 configurations, 144 checks
RING_CONFIGS = tuple(cu.CudaGemvConfig(w, 1, 1, 1, st) for w in (4, 8) for st in (2, 3, 4)) + (
    cu.CudaGemvConfig(8, 1, 2, 1, 2), cu.CudaGemvConfig(8, 1, 2, 1, 4), cu.CudaGemvConfig(8, 2, 1, 1, 2))
CONFIGS = REGISTER_CONFIGS + RING_CONFIGS


def fits(cfg, m, k) -> bool:
    """Whether the launcher takes ``cfg`` at ``m`` rows and depth ``k`` on this device (its ring or preload in the
    shared memory a block may opt into)."""
    return cfg.smem_bytes(m, k) <= torch.cuda.get_device_properties(0).shared_memory_per_block_optin


def check(spec, m, n, k, dtype_name, cfg) -> str | None:
    a, w, s, z = make_inputs(m, n, k, DTYPES[dtype_name], seed=m * 7 + n + k)
    ref = torch.empty((m, n), dtype=a.dtype, device="cuda")
    q4.int4_matmul_ref(a=a, w=w, scales=s, zeros=z, c=ref)

    def run(c):
        cu.int4_matmul_cuda(a=a, w=w, scales=s, zeros=z, c=c, config=cfg)

    c = torch.full((m, n), float("nan"), dtype=a.dtype, device="cuda")
    run(c)
    again = torch.full_like(c, float("inf"))
    run(again)
    torch.cuda.synchronize()
    problem = mismatch(c, ref, spec.tolerance(dtype_name, "c", Case("full", (("M", m), ("N", n), ("K", k)))))
    if problem is not None:
        return f"wrong: {problem}"
    if not torch.equal(c.view(torch.int16), again.view(torch.int16)):
        return "not bitwise repeatable"
    return None


@functools.cache
def variant_module(name: str, macro: str):
    """The kernel's source built again with ``#define macro`` (a module of its own name)."""
    return load_cuda_extension(f"kh_int4_gemv_{name}", cu._BINDING_SRC, f"#define {macro}\n" + cu.CUDA_SRC,
                               ["int4_gemv"], torch.cuda.get_device_capability())


def floor_module(level: int):
    return variant_module(f"floor{level}", f"KH_INT4_FLOOR {level}")


FLOORS = True  # --quick turns the floors off


def floors(rec, name, cfg, c, a, w, s, z):
    """rec[name + "_loads_us"], rec[name + "_dequant_us"]: ``cfg`` with its work per group replaced."""
    if not FLOORS:
        return
    ws, cnt = unused(a.device)
    for level, what in ((1, "loads"), (2, "dequant")):
        module = floor_module(level)
        rec[f"{name}_{what}_us"], _ = median_us(lambda module=module: module.int4_gemv(
            c, a, w, s, z, ws, cnt, *astuple(cfg)), SWEEP_TIMING)


def time_shape(m, n, k, bad: set) -> dict:
    a, w, s, z = make_inputs(m, n, k, torch.bfloat16)
    c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    w_bf16 = q4.dequantize(w, s, z, torch.bfloat16).contiguous()
    rec = {"M": m, "N": n, "K": k, "rows": []}
    rec["bf16_us"], _ = median_us(lambda: torch.nn.functional.linear(a, w_bf16))
    rec["triton_us"], _ = median_us(lambda: q4.int4_matmul(a=a, w=w, scales=s, zeros=z, c=c))
    rec["cuda_us"], info = median_us(lambda: cu.int4_matmul_cuda(a=a, w=w, scales=s, zeros=z, c=c))
    cfg = cu.CudaGemvConfig.for_shape(m, n, k)
    rec["cuda_config"] = str(cfg)
    rec["cuda_info"] = info
    if m <= cu.ROUTE_MAX_M and cfg.splits == 1:
        floors(rec, "floor", cfg, c, a, w, s, z)
    for cfg in CONFIGS:
        if str(cfg) in bad or not fits(cfg, m, k):
            continue
        t, _ = median_us(lambda cfg=cfg: cu.int4_matmul_cuda(a=a, w=w, scales=s, zeros=z, c=c, config=cfg),
                         SWEEP_TIMING)
        rec["rows"].append({"config": str(cfg), "us": t, "x_bf16": rec["bf16_us"] / t, "stages": cfg.stages})
    rec["rows"].sort(key=lambda r: r["us"])
    rings = [r for r in rec["rows"] if r["stages"]]
    if rings:
        rec["ring_us"], rec["ring_config"] = rings[0]["us"], rings[0]["config"]
        best = next(x for x in RING_CONFIGS if str(x) == rec["ring_config"])
        if m <= cu.ROUTE_MAX_M and best.splits == 1:
            floors(rec, "ring_floor", best, c, a, w, s, z)
    print(f"M={m} N={n} K={k}: bf16 {rec['bf16_us']:.2f} us, triton {rec['triton_us']:.2f} "
          f"({rec['bf16_us'] / rec['triton_us']:.2f}x), cuda {rec['cuda_us']:.2f} "
          f"({rec['bf16_us'] / rec['cuda_us']:.2f}x, {rec['cuda_config']})", flush=True)
    if "floor_loads_us" in rec:
        print(f"  floors of the launcher's: loads alone {rec['floor_loads_us']:.2f} us, loads and dequantisation "
              f"{rec['floor_dequant_us']:.2f} us", flush=True)
    if "ring_us" in rec:
        print(f"  best ring {rec['ring_config']}: {rec['ring_us']:.2f} us = {rec['bf16_us'] / rec['ring_us']:.2f}x "
              f"bf16, {rec['cuda_us'] / rec['ring_us']:.2f}x the launcher's", flush=True)
    if "ring_floor_loads_us" in rec:
        print(f"  floors of the best ring: loads alone {rec['ring_floor_loads_us']:.2f} us, loads and "
              f"dequantisation {rec['ring_floor_dequant_us']:.2f} us", flush=True)
    for r in rec["rows"][:3]:
        print(f"  top {r['config']}: {r['us']:.2f} us = {r['x_bf16']:.2f}x bf16", flush=True)
    return rec


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--call", help="M,N,K: only three calls at this shape (for a profiler)")
    p.add_argument("--config", help="with --call, W,RT,S,D,ST (warps, row tiles, splits, depth, stages) instead "
                   "of the launcher's choice")
    p.add_argument("--quick", action="store_true", help="the ring configurations and the launcher's register ones "
                   "alone, at M = 1 and 4, no floors (each floor is one more build of the source)")
    p.add_argument("--configs", help="W,RT,S,D,ST[,PRE];...: these configurations (with the launcher's own) instead "
                   "of the sweep's, checked at every shape and timed at M = 1 and 4 (or --ms)")
    p.add_argument("--with-floors", action="store_true", help="with --quick, the floors all the same (two more "
                   "builds): the launcher's and the fastest ring's")
    p.add_argument("--ms", help="M,...: the rows timed instead of the mode's own (the sweep's 1, 4, 16; 1 and 4 with "
                   "--configs or --quick; 1 with --floors)")
    p.add_argument("--floors", action="store_true", help="the launcher's own configurations at M = 1 alone, "
                   "checked, timed and their floors timed: what bounds the decode shapes, in about a minute")
    args = p.parse_args()
    global CONFIGS, MS, FLOORS
    if args.floors:
        CONFIGS = tuple(dict.fromkeys(cu.CudaGemvConfig.for_shape(1, n, k) for n, k in NKS))
        MS = (1,)
    if args.configs:
        CONFIGS = tuple(cu.CudaGemvConfig(*map(int, c.split(","))) for c in args.configs.split(";")) + tuple(
            dict.fromkeys(cu.CudaGemvConfig.for_shape(1, n, k) for n, k in NKS))
        MS, FLOORS = (1, 4), args.with_floors
    if args.quick:
        CONFIGS = tuple(c for c in CONFIGS if c.stages or (c.warps, c.row_tiles, c.splits) == (8, 1, 1))
        MS, FLOORS = (1, 4), args.with_floors
    if args.ms:
        MS = tuple(int(m) for m in args.ms.split(","))
    if args.call:
        m, n, k = map(int, args.call.split(","))
        cfg = cu.CudaGemvConfig(*map(int, args.config.split(","))) if args.config else None
        a, w, s, z = make_inputs(m, n, k, torch.bfloat16)
        c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        for _ in range(3):
            cu.int4_matmul_cuda(a=a, w=w, scales=s, zeros=z, c=c, config=cfg)
        torch.cuda.synchronize()
        return 0
    if not args.out:
        p.error("--out is required unless --call is given")
    os.makedirs(args.out, exist_ok=True)
    spec = load_spec("specs/int4_matmul.toml")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "checks": [], "shapes": [],
           "errors": []}  # fmt: skip
    start = time.time()
    cu.build_cuda()
    print(f"built in {time.time() - start:.1f} s", flush=True)
    bad = set()
    for (m, n, k), dtype_name, cfg in ((s, d, c) for s in CHECKS for d in DTYPES for c in CONFIGS):
        if not fits(cfg, m, k):
            out["checks"].append({"M": m, "N": n, "K": k, "dtype": dtype_name, "config": str(cfg), "problem": None,
                                  "skipped": f"{cfg.smem_bytes(m, k)} bytes of shared memory a block"})
            continue
        try:
            problem = check(spec, m, n, k, dtype_name, cfg)
        except Exception as exc:  # noqa: BLE001 - one configuration's failure is a row
            problem = f"{type(exc).__name__}: {exc}"[:400]
            traceback.print_exc()
        out["checks"].append({"M": m, "N": n, "K": k, "dtype": dtype_name, "config": str(cfg), "problem": problem})
        if problem is not None:
            bad.add(str(cfg))
            print(f"check M={m} N={n} K={k} {dtype_name} {cfg}: {problem}", flush=True)
    skipped = sum("skipped" in c for c in out["checks"])
    print(f"checks: {len(out['checks']) - skipped} run, {sum(c['problem'] is not None for c in out['checks'])} "
          f"failed, {skipped} skipped (the ring or preload above the shared memory per block)", flush=True)


    def save():  # after every step: a run cut short by its time limit keeps what it measured
        with open(os.path.join(args.out, "int4_cuda_probe.json"), "w") as f:
            json.dump(out, f, indent=1)

    save()
    for m in MS:
        for n, k in NKS:
            try:
                out["shapes"].append(time_shape(m, n, k, bad))
            except Exception as exc:  # noqa: BLE001
                out["errors"].append({"M": m, "N": n, "K": k, "error": traceback.format_exc()[-800:]})
                print(f"M={m} N={n} K={k}: {type(exc).__name__}: {exc}", flush=True)
            save()
    return 1 if bad or out["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
