"""Where the LayerNorm forward's time goes on the GPU, at the headline shape (16384 x 4096 bf16, bias, with and
without the statistics the backward reads).

RMSNorm's forward, one row of 4096 columns per program of 8 warps, runs at the copy's speed; LayerNorm's, the
same launch with a second row sum that waits for the first (the mean before the centred squares), does not. This
times, with the harness's engine (L2 flushed, medians), in two rounds so that drift shows:

- a copy of x's bytes, the shipped rmsnorm and layernorm forwards;
- the one-row kernel at 4, 8 and 16 warps, and with two rows per program;
- persistent programs (1, 2 or 4 per SM) looping over rows with 2-4 pipeline stages, so that a row's loads are
  in flight while the one before it is reduced;
- a diagnostic that takes both row sums at once (E[x^2] - mean^2: not shippable, it cancels when |mean| >> std),
  to see what the dependency between the sums costs.

    python reports/h200/experiments/layernorm_fwd/probe.py --out DIR [--tokens T --hidden H]
        [--variants 1x8,2x8,...] [--persistent] [--cases REGEX]

Round 1 (probe-round1.log) ran with ``--persistent``, and a one-phase diagnostic at 2 x 16 too.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

import torch
import triton
import triton.language as tl

from harness.timing.engine import TimingConfig, measure
from kernels.layernorm import layernorm, layernorm_ref
from kernels.rmsnorm import rmsnorm


@triton.jit
def _ln_fwd_rows(x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, eps, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, STATS: tl.constexpr, ONE_PHASE: tl.constexpr):
    """BLOCK_M contiguous rows of exactly BLOCK_N columns per program."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    offs = rows[:, None] * n_cols + cols[None, :]
    x = tl.load(x_ptr + offs).to(tl.float32)
    if ONE_PHASE:
        mean = tl.sum(x, axis=1) / n_cols
        var = tl.sum(x * x, axis=1) / n_cols - mean * mean
        xc = x - mean[:, None]
    else:
        mean = tl.sum(x, axis=1) / n_cols
        xc = x - mean[:, None]
        var = tl.sum(xc * xc, axis=1) / n_cols
    rstd = tl.rsqrt(var + eps)
    w = tl.load(w_ptr + cols).to(tl.float32)
    b = tl.load(b_ptr + cols).to(tl.float32)
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty))
    if STATS:
        tl.store(mean_ptr + rows, mean)
        tl.store(rstd_ptr + rows, rstd)


@triton.jit
def _ln_fwd_persistent(x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, rstd_ptr, n_rows, n_cols, eps,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr, STATS: tl.constexpr):
    """Programs striding over blocks of BLOCK_M rows; weight and bias loaded once per program."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    w = tl.load(w_ptr + cols).to(tl.float32)
    b = tl.load(b_ptr + cols).to(tl.float32)
    for blk in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), nprog, num_stages=STAGES):
        rows = blk.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs = rows[:, None] * n_cols + cols[None, :]
        x = tl.load(x_ptr + offs).to(tl.float32)
        mean = tl.sum(x, axis=1) / n_cols
        xc = x - mean[:, None]
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
        y = xc * rstd[:, None] * w[None, :] + b[None, :]
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty))
        if STATS:
            tl.store(mean_ptr + rows, mean)
            tl.store(rstd_ptr + rows, rstd)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--cases", default="", help="a regular expression: time only the cases it finds")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="1x8,1x4,1x16,2x8,2x16,4x16",
                    help="the one-pass kernel's rows per program x warps, comma-separated")
    ap.add_argument("--persistent", action="store_true", help="also the persistent row loops (round 1)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    R, N = args.tokens, args.hidden
    x = torch.randn(R, N, device=dev, dtype=torch.bfloat16)
    w = torch.randn(N, device=dev, dtype=torch.bfloat16)
    b = torch.randn(N, device=dev, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    mean, rstd = torch.empty(R, device=dev), torch.empty(R, device=dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count

    def shipped(stats):
        kw = dict(mean=mean, rstd=rstd) if stats else {}
        return lambda: layernorm(x=x, weight=w, bias=b, out=out, eps=1e-5, has_bias=True, **kw)

    def rows(bm, warps, stats=True, one_phase=False):
        return lambda: _ln_fwd_rows[(R // bm,)](x, w, b, out, mean, rstd, R, N, 1e-5, BLOCK_M=bm, BLOCK_N=N,
                                                STATS=stats, ONE_PHASE=one_phase, num_warps=warps)

    def persistent(per_sm, bm, warps, stages, stats=True):
        grid = (min(sms * per_sm, R // bm),)
        return lambda: _ln_fwd_persistent[grid](x, w, b, out, mean, rstd, R, N, 1e-5, BLOCK_M=bm, BLOCK_N=N,
                                                STAGES=stages, STATS=stats, num_warps=warps)

    src = torch.empty(R * N, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    cases = {
        "copy (x bytes, read + write)": lambda: dst.copy_(src),
        "rmsnorm forward (shipped)": lambda: rmsnorm(x=x, weight=w, out=out, eps=1e-5),
        "layernorm forward (shipped)": shipped(False),
        "layernorm forward (shipped), stats": shipped(True),
    }
    variants = [tuple(int(v) for v in item.split("x")) for item in args.variants.split(",")]
    for bm, warps in variants:
        cases[f"rows: {bm} x {warps} warps, stats"] = rows(bm, warps)
    bm, warps = variants[0]
    cases[f"rows: {bm} x {warps} warps, no stats"] = rows(bm, warps, stats=False)
    cases[f"rows: {bm} x {warps} warps, stats, one phase (diagnostic)"] = rows(bm, warps, one_phase=True)
    for per_sm, bm, warps in ((1, 1, 16), (2, 1, 8), (4, 1, 8), (2, 1, 16), (4, 1, 4), (8, 1, 4), (2, 2, 16)):
        for stages in (2, 3, 4) if args.persistent else ():
            cases[f"persistent: {per_sm}/SM, {bm} x {warps} warps, {stages} stages, stats"] = \
                persistent(per_sm, bm, warps, stages)
    if args.cases:
        cases = {name: fn for name, fn in cases.items() if re.search(args.cases, name)}

    # each variant's output and statistics against the reference once, so that a fast wrong one shows
    ref_out = torch.empty_like(x, dtype=torch.float32)
    ref_mean, ref_rstd = torch.empty_like(mean), torch.empty_like(rstd)
    layernorm_ref(x=x, weight=w, bias=b, out=ref_out, eps=1e-5, has_bias=True, mean=ref_mean, rstd=ref_rstd)
    errors = {}
    for name, fn in cases.items():
        if not name.startswith(("rows", "persistent", "layernorm")):
            continue
        out.zero_(), mean.zero_(), rstd.zero_()
        try:
            fn()
            torch.cuda.synchronize()
        except Exception as exc:  # a config that does not compile is a finding, not the end of the probe
            errors[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
            continue
        e = (out.float() - ref_out).abs().max().item()
        text = f"max |out - ref| {e:.3g}"
        if ", stats" in name:
            text += f", max relative rstd error {(rstd - ref_rstd).abs().div(ref_rstd).max().item():.3g}"
        errors[name] = text
    tcfg = TimingConfig(timeout_s=4.0, min_time_s=0.3)
    results = []
    for rnd in range(args.rounds):
        print(f"# round {rnd + 1}", flush=True)
        for name, fn in cases.items():
            if errors.get(name, "").startswith(("Compilation", "Out", "Runtime", "Value")):
                continue
            try:
                m = measure(fn, device=dev, config=tcfg)
            except Exception as exc:
                print(f"{name:58s} FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            med = statistics.median(m.samples_us)
            q = statistics.quantiles(m.samples_us, n=10) if len(m.samples_us) > 2 else [med] * 9
            results.append(dict(round=rnd + 1, name=name, median_us=med, p10_us=q[0], p90_us=q[-1],
                                samples=len(m.samples_us), method=m.method))
            print(f"{name:58s} {med:8.2f} us (p10 {q[0]:.2f}, p90 {q[-1]:.2f}, n={len(m.samples_us)})", flush=True)
    print("# accuracy (bf16 output against the fp32 reference)")
    for name, text in errors.items():
        print(f"{name:58s} {text}")
    (args.out / "layernorm_fwd_probe.json").write_text(json.dumps(dict(
        device=torch.cuda.get_device_name(), sms=sms, triton=triton.__version__, torch=torch.__version__,
        shape=[R, N], rows=results, accuracy=errors), indent=1))


if __name__ == "__main__":
    main()
