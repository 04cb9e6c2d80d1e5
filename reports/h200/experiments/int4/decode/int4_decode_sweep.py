"""The int4 decode GEMV (kernels/int4_gemv.py) on a GPU: right, how fast, and against which floors.

1. Every configuration swept is first checked against ``int4_matmul_ref`` with the spec's tolerance and for
   bitwise repeatability (the split-K reduction in one launch must not depend on which program finishes last);
   a configuration that fails is recorded and not timed.
2. A sweep of GemvConfig (block_n x block_u x num_warps x split_k) at M = 1 over the launcher's autotuning
   candidates, then at M = 4 over the tiles among M = 1's ten fastest, at (N, K) in {(4096, 4096),
   (4096, 14336), (14336, 4096)}, against bf16 ``F.linear`` on the resident dequantised weight and the shipped
   ``int4_matmul`` (the tile kernel), timed with harness.timing.engine.measure (events behind a spin kernel, L2
   flushed before each sample, the events' own overhead subtracted).
3. Floors measured the same way: an empty kernel, and the GEMV's own loop with its arithmetic replaced by an XOR
   of the words (the same loads, grid and split): what reading the packed weight costs at this size, here.
4. The launcher as shipped (its autotuner's pick among the same candidates) at each shape.
5. At M = 16 (the tile kernel's decode tiles, its split of K now summed in the same launch): tile against bf16.
6. ``--part prefetch`` and ``--part stages`` (both first under the default, ``all``): the XOR floor, the
   dequantisation alone and the factored loop with their loads one and two blocks ahead; gemv_stages.py's
   variants at M = 1 beside the GEMV and the XOR floor of each config, with their errors.
7. Last, the autotuned launcher at edge shapes (unaligned N and K, N = 1, M = 2 to 4), both dtypes: each new
   shape compiles and autotunes again, so these come after the timings.

Run from the repository root on the GPU: ``python3 reports/h200/experiments/int4/decode/int4_decode_sweep.py
--out DIR`` (writes DIR/int4_decode_sweep.json; each shape in its own try/except).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time
import traceback

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gemv_stages import exact, scaled_error, stages  # noqa: E402
from int4_probe import DTYPES, SWEEP_TIMING, TIMING, make_inputs, median_us  # noqa: E402

from harness.correctness.numerics import mismatch  # noqa: E402
from harness.spec.load import load as load_spec  # noqa: E402
from harness.spec.model import Case  # noqa: E402
from harness.timing.engine import measure  # noqa: E402
from kernels import int4_gemv as gv  # noqa: E402
from kernels import int4_matmul as q4  # noqa: E402

NKS = ((4096, 4096), (4096, 14336), (14336, 4096))
CHECKS = ((1, 4096, 4096), (1, 5003, 4104), (1, 4096, 14336), (1, 14336, 4096), (1, 33, 136), (1, 1, 8),
          (4, 4096, 4096), (3, 5003, 4104), (2, 33, 136))
MS = (1, 4)
SPLITS = (1, 2, 4, 8, 16)
SWEEP = dataclasses.replace(SWEEP_TIMING, launch=False)  # host time only for the chosen rows
TILES = gv.TILES  # the autotuner's candidates
# --part stages: those and two of 16 words a thread (fewer activation loads a weight: the factored loop's SASS
# per weight falls from 5.4 to 4.4 at sm_90), at the splits the sweep's fastest used
STAGE_TILES = TILES + ((32, 16, 1), (64, 16, 2))
STAGE_SPLITS = (4, 8)


@triton.jit
def _stream_kernel(w_ptr, ws_ptr, N, KU, KU_PER_SPLIT, stride_wn, BLOCK_N: tl.constexpr, BLOCK_U: tl.constexpr,
                   PREFETCH: tl.constexpr = 1):  # fmt: skip
    """The GEMV's loop (the next block's words loaded PREFETCH iterations ahead) with an XOR for its arithmetic."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_u = tl.arange(0, BLOCK_U)
    rn = (offs_n % N).to(tl.int64)
    u_lo = pid_k * KU_PER_SPLIT
    u_hi = min(KU, u_lo + KU_PER_SPLIT)
    rows = w_ptr + rn[:, None] * stride_wn
    b_next = tl.load(rows + (u_lo + offs_u)[None, :], mask=(u_lo + offs_u < u_hi)[None, :], other=0)
    if PREFETCH == 2:
        u2 = u_lo + BLOCK_U + offs_u
        b_next2 = tl.load(rows + u2[None, :], mask=(u2 < u_hi)[None, :], other=0)
    acc = tl.zeros((BLOCK_N, BLOCK_U), dtype=tl.int32)
    for u0 in range(u_lo, u_hi, BLOCK_U):
        b = b_next
        un = u0 + PREFETCH * BLOCK_U + offs_u
        if PREFETCH == 2:
            b_next = b_next2
            b_next2 = tl.load(rows + un[None, :], mask=(un < u_hi)[None, :], other=0)
        else:
            b_next = tl.load(rows + un[None, :], mask=(un < u_hi)[None, :], other=0)
        acc = acc ^ b
    tl.store(ws_ptr + pid_k * N + offs_n, tl.xor_sum(acc, axis=1), mask=offs_n < N)


@triton.jit
def _empty_kernel(x_ptr):
    pass


def stream(w, ws, cfg: gv.GemvConfig, prefetch: int = 1) -> None:
    n, k = w.shape[0], w.shape[1] * 2
    ku = k // 8
    per = triton.cdiv(triton.cdiv(k, 128), cfg.split_k) * 16
    wu = w.view(torch.int32)
    _stream_kernel[(triton.cdiv(n, cfg.block_n), triton.cdiv(ku, per))](
        wu, ws, n, ku, per, wu.stride(0), BLOCK_N=cfg.block_n, BLOCK_U=cfg.block_u, PREFETCH=prefetch,
        num_warps=cfg.num_warps)


def check(spec, a, w, s, z, ref, cfg, dtype_name) -> str | None:
    """None when the config's output matches the reference within the spec's tolerance and repeats bitwise."""
    m, k = a.shape
    n = w.shape[0]
    c = torch.full((m, n), float("nan"), dtype=a.dtype, device="cuda")
    gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=cfg)
    again = torch.full_like(c, float("inf"))
    gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=again, config=cfg)
    torch.cuda.synchronize()
    tol = spec.tolerance(dtype_name, "c", Case("full", (("M", m), ("N", n), ("K", k))))
    problem = mismatch(c, ref, tol)
    if problem is not None:
        return f"wrong: {problem}"
    if not torch.equal(c.view(torch.int16), again.view(torch.int16)):
        return "not bitwise repeatable"
    return None


def reference(a, w, s, z):
    ref = torch.empty((a.shape[0], w.shape[0]), dtype=a.dtype, device="cuda")
    q4.int4_matmul_ref(a=a, w=w, scales=s, zeros=z, c=ref)
    return ref


def launch_of(fn) -> dict | None:
    r = measure(fn, device="cuda", config=TIMING)
    return None if r.launch is None else {k: getattr(r.launch, k) for k in r.launch.__dataclass_fields__}


def sweep_shape(spec, m, n, k, tiles) -> dict:
    a, w, s, z = make_inputs(m, n, k, torch.bfloat16)
    ref = reference(a, w, s, z)
    c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    ws = torch.empty(16 * n, dtype=torch.int32, device="cuda")
    w_bf16 = q4.dequantize(w, s, z, torch.bfloat16).contiguous()
    rec = {"M": m, "N": n, "K": k}
    rec["bf16_us"], _ = median_us(lambda: torch.nn.functional.linear(a, w_bf16), TIMING)
    # words=True: the tile kernel (int4_matmul sends a launch with no experiment argument to the GEMV)
    rec["tile_us"], _ = median_us(lambda: q4.int4_matmul(a=a, w=w, scales=s, zeros=z, c=c, words=True), TIMING)
    x = torch.empty(1, device="cuda")
    rec["empty_kernel_us"], _ = median_us(lambda: _empty_kernel[(1,)](x), TIMING)
    rows, floors = [], []
    for (bn, bu, nw), split in itertools.product(tiles, SPLITS):
        cfg = gv.GemvConfig(bn, bu, split, nw)
        row = {"config": [bn, bu, split, nw]}
        try:
            row["problem"] = check(spec, a, w, s, z, ref, cfg, "bf16")
            if row["problem"] is None:
                row["us"], _ = median_us(lambda cfg=cfg: gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=cfg),
                                         SWEEP)  # fmt: skip
            if m == 1:  # the floor does not depend on M
                row["stream_us"], _ = median_us(lambda cfg=cfg: stream(w, ws, cfg), SWEEP)
        except Exception as exc:  # noqa: BLE001 - one config's failure is a row
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rows.append(row)
    ok = [r for r in rows if "us" in r]
    rec["sweep"] = rows
    rec["wrong"] = [r for r in rows if r.get("problem") or r.get("error")]
    if ok:
        best = min(ok, key=lambda r: r["us"])
        cfg = gv.GemvConfig(*best["config"])
        rec["best"] = best["config"]
        rec["best_us"], rec["best_timing"] = median_us(
            lambda: gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=cfg), TIMING)
        rec["best_launch"] = launch_of(lambda: gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=cfg))
    floors = [r for r in rows if "stream_us" in r]
    if floors:
        fl = min(floors, key=lambda r: r["stream_us"])
        cfg = gv.GemvConfig(*fl["config"])
        rec["stream_floor"] = fl["config"]
        rec["stream_floor_us"], _ = median_us(lambda: stream(w, ws, cfg), TIMING)
    rec["shipped_us"], _ = median_us(lambda: gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c), TIMING)
    best_cfg = getattr(gv._gemv_autotuned, "best_config", None)
    rec["shipped_config"] = str(best_cfg)
    rec["bf16_launch"] = launch_of(lambda: torch.nn.functional.linear(a, w_bf16))
    for key in ("tile_us", "best_us", "shipped_us", "stream_floor_us"):
        if rec.get(key):
            rec[key.replace("_us", "_speedup")] = rec["bf16_us"] / rec[key]
    return rec


def stage_shape(spec, n, k) -> dict:
    """At M = 1: the GEMV, its dequantisation alone and the factored variant (gemv_stages.py) over STAGE_TILES x
    STAGE_SPLITS, each against the XOR floor of the same config; then the error of the GEMV and of
    the factored variant against the contract's reference (the spec's tolerance) and against fp64 (scaled)."""
    a, w, s, z = make_inputs(1, n, k, torch.bfloat16)
    ref = reference(a, w, s, z)
    ex = exact(a, w, s, z)
    c = torch.empty((1, n), dtype=torch.bfloat16, device="cuda")
    ws = torch.empty(16 * n, dtype=torch.int32, device="cuda")
    rec = {"M": 1, "N": n, "K": k, "rows": []}
    w_bf16 = q4.dequantize(w, s, z, torch.bfloat16).contiguous()
    rec["bf16_us"], _ = median_us(lambda: torch.nn.functional.linear(a, w_bf16), TIMING)
    tol = spec.tolerance("bf16", "c", Case("full", (("M", 1), ("N", n), ("K", k))))
    for (bn, bu, nw), split in itertools.product(STAGE_TILES, STAGE_SPLITS):
        cfg = gv.GemvConfig(bn, bu, split, nw)
        row = {"config": [bn, bu, split, nw]}
        try:
            row["gemv_us"], _ = median_us(lambda cfg=cfg: gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=cfg),
                                          SWEEP)  # fmt: skip
            row["xor_us"], _ = median_us(lambda cfg=cfg: stream(w, ws, cfg), SWEEP)
            for mode in ("dequant", "factored"):
                row[f"{mode}_us"], _ = median_us(lambda mode=mode, cfg=cfg: stages(a, w, s, z, c, cfg, mode),
                                                 SWEEP)  # fmt: skip
            c.fill_(float("nan"))
            stages(a, w, s, z, c, cfg, "factored")
            row["factored_problem"] = mismatch(c, ref, tol)
            row["factored_scaled_err"] = scaled_error(c, ex, a, w, s, z)
            gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=cfg)
            row["gemv_scaled_err"] = scaled_error(c, ex, a, w, s, z)
        except Exception as exc:  # noqa: BLE001 - one config's failure is a row
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rec["rows"].append(row)
        print("  stage", json.dumps(row), flush=True)
    for key in ("gemv_us", "xor_us", "dequant_us", "factored_us"):
        done = [r for r in rec["rows"] if key in r]
        if done:
            best = min(done, key=lambda r: r[key])
            rec[f"best_{key}"] = [best[key], best["config"]]
            rec[f"best_{key.replace('_us', '')}_speedup"] = rec["bf16_us"] / best[key]
    return rec


PREFETCH_CONFIGS = ((32, 16, 8, 2), (64, 16, 8, 4))
PREFETCH_SHAPES = ((4096, 4096), (4096, 14336))


def prefetch_shape(n, k) -> dict:
    """At M = 1: the XOR floor, the dequantisation alone and the factored loop with their loads one and two
    iterations ahead, beside the GEMV (one ahead), per config: whether more loads in flight close the gap."""
    a, w, s, z = make_inputs(1, n, k, torch.bfloat16)
    ex = exact(a, w, s, z)
    c = torch.empty((1, n), dtype=torch.bfloat16, device="cuda")
    ws = torch.empty(16 * n, dtype=torch.int32, device="cuda")
    w_bf16 = q4.dequantize(w, s, z, torch.bfloat16).contiguous()
    rec = {"M": 1, "N": n, "K": k, "rows": []}
    rec["bf16_us"], _ = median_us(lambda: torch.nn.functional.linear(a, w_bf16), TIMING)
    for bn, bu, split, nw in PREFETCH_CONFIGS:
        cfg = gv.GemvConfig(bn, bu, split, nw)
        row = {"config": [bn, bu, split, nw]}
        try:
            row["gemv_us"], _ = median_us(lambda cfg=cfg: gv.int4_gemv(a=a, w=w, scales=s, zeros=z, c=c, config=cfg),
                                          SWEEP)  # fmt: skip
            for depth in (1, 2):
                row[f"xor{depth}_us"], _ = median_us(lambda cfg=cfg, d=depth: stream(w, ws, cfg, d), SWEEP)
                for mode in ("dequant", "factored"):
                    row[f"{mode}{depth}_us"], _ = median_us(
                        lambda cfg=cfg, d=depth, mode=mode: stages(a, w, s, z, c, cfg, mode, d), SWEEP)
                c.fill_(float("nan"))
                stages(a, w, s, z, c, cfg, "factored", depth)
                row[f"factored{depth}_scaled_err"] = scaled_error(c, ex, a, w, s, z)
        except Exception as exc:  # noqa: BLE001 - one config's failure is a row
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        rec["rows"].append(row)
        print("  prefetch", json.dumps(row), flush=True)
    return rec


def tile_against_bf16(m, n, k) -> dict:
    a, w, s, z = make_inputs(m, n, k, torch.bfloat16)
    c = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    w_bf16 = q4.dequantize(w, s, z, torch.bfloat16).contiguous()
    rec = {"M": m, "N": n, "K": k}
    rec["bf16_us"], _ = median_us(lambda: torch.nn.functional.linear(a, w_bf16), TIMING)
    rec["tile_us"], _ = median_us(lambda: q4.int4_matmul(a=a, w=w, scales=s, zeros=z, c=c), TIMING)
    rec["tile_speedup"] = rec["bf16_us"] / rec["tile_us"]
    return rec


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--part", choices=("prefetch", "stages", "sweep", "all"), default="all",
                   help="prefetch: loads one or two blocks ahead; stages: gemv_stages.py's variants at M = 1 (both "
                        "first under all); sweep: the rest")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    spec = load_spec("specs/int4_matmul.toml")
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "checks": [], "shapes": []}
    path = os.path.join(args.out, "int4_decode_sweep.json")

    def save() -> None:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)

    out["prefetch"] = []
    for n, k in PREFETCH_SHAPES if args.part in ("prefetch", "all") else ():
        try:
            rec = prefetch_shape(n, k)
        except Exception:  # noqa: BLE001
            rec = {"M": 1, "N": n, "K": k, "error": traceback.format_exc()[-1500:]}
        out["prefetch"].append(rec)
        save()
    if args.part == "prefetch":
        return 0
    out["stages"] = []
    for n, k in NKS if args.part in ("stages", "all") else ():
        try:
            rec = stage_shape(spec, n, k)
        except Exception:  # noqa: BLE001
            rec = {"M": 1, "N": n, "K": k, "error": traceback.format_exc()[-1500:]}
        out["stages"].append(rec)
        print("stages", json.dumps({k2: v for k2, v in rec.items() if k2 != "rows"}), flush=True)
        save()
    if args.part == "stages":
        return 0
    top_of = {}  # (N, K) -> the fastest configs at M = 1: the candidates M = 4 is swept over
    for m, (n, k) in itertools.product(MS, NKS):
        t0 = time.perf_counter()
        tiles = TILES if m == 1 else top_of.get((n, k), TILES)
        try:
            rec = sweep_shape(spec, m, n, k, tiles)
        except Exception:  # noqa: BLE001
            rec = {"M": m, "N": n, "K": k, "error": traceback.format_exc()[-1500:]}
        rec["seconds"] = time.perf_counter() - t0
        out["shapes"].append(rec)
        show = {k2: v for k2, v in rec.items() if k2 not in ("sweep", "best_timing")}
        print("shape", json.dumps(show), flush=True)
        top = sorted((r for r in rec.get("sweep", []) if "us" in r), key=lambda r: r["us"])[:10]
        for r in top:
            print(f"  top M={m} N={n} K={k}: {r['us']:7.2f} us  stream {r.get('stream_us', 0):6.2f}  {r['config']}",
                  flush=True)
        if m == 1 and top:
            top_of[(n, k)] = tuple(sorted({(r["config"][0], r["config"][1], r["config"][3]) for r in top}))
        save()
    for n, k in NKS:
        try:
            rec = tile_against_bf16(16, n, k)
        except Exception:  # noqa: BLE001
            rec = {"M": 16, "N": n, "K": k, "error": traceback.format_exc()[-1500:]}
        out["shapes"].append(rec)
        print("shape", json.dumps(rec), flush=True)
        save()
    # Last, the autotuned launcher at edge shapes: each new shape specialises (and autotunes) again.
    for (m, n, k), dt in itertools.product(CHECKS, DTYPES):
        try:
            a, w, s, z = make_inputs(m, n, k, DTYPES[dt])
            rec = {"problem": check(spec, a, w, s, z, reference(a, w, s, z), None, dt)}
        except Exception:  # noqa: BLE001
            rec = {"error": traceback.format_exc()[-1500:]}
        rec.update({"M": m, "N": n, "K": k, "dtype": dt, "config": "autotuned"})
        out["checks"].append(rec)
        print("check", json.dumps(rec), flush=True)
        save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
