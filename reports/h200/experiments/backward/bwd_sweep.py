"""H200 sweep of the backward kernels' launch configurations (not part of the repository: build/ is ignored)."""
import itertools, json, os, sys, time
import torch, triton
from triton.testing import do_bench
from kernels.rmsnorm_bwd import NormBwdConfig, rmsnorm_bwd, rmsnorm_bwd_ref
from kernels.layernorm import layernorm_bwd, layernorm_bwd_ref
from kernels.silu_and_mul import SiluAndMulConfig, silu_and_mul_bwd, silu_and_mul_bwd_ref
from kernels.softmax import SoftmaxBwdConfig, softmax_bwd, softmax_bwd_ref

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows_out = []
which = sys.argv[1:] or ["copy", "rms", "ln", "silu", "softmax", "check"]
log = open(os.path.join(OUT, "sweep.jsonl"), "a")

def bench(fn):
    return do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3  # us

def record(kernel, shape, dt, cfg, us, nbytes):
    gbs = nbytes / us / 1e3
    row = dict(kernel=kernel, shape=shape, dtype=str(dt).split(".")[-1], cfg=str(cfg), us=round(us, 2), gbs=round(gbs, 1))
    log.write(json.dumps(row) + "\n"); log.flush()
    print(f"{kernel:8s} {str(shape):14s} {row['dtype']:9s} {us:9.2f} us {gbs:7.0f} GB/s  {cfg}", flush=True)

if "copy" in which:
    a = torch.empty(1 << 29, dtype=torch.bfloat16, device=dev); b = torch.empty_like(a)
    us = bench(lambda: b.copy_(a)); record("copy", (1 << 29,), torch.bfloat16, "", us, 2 * a.numel() * 2)
    del a, b

def norm_cfg(R, N, bm, bn, nw, pps):
    single = bn >= N
    programs = SMS * pps
    rpp = triton.cdiv(triton.cdiv(R, programs), bm) * bm
    return NormBwdConfig(block_m=bm, block_n=bn, num_warps=nw, single_pass=single, rows_per_program=rpp)

def norm_sweep(kind, shapes, dt=torch.bfloat16):
    for (R, N), grid in shapes:
        x = torch.randn(R, N, dtype=dt, device=dev); w = torch.randn(N, dtype=dt, device=dev); dy = torch.randn_like(x)
        gx = torch.empty_like(x); gw = torch.empty_like(w); gb = torch.empty_like(w)
        nbytes = 3 * x.numel() * x.element_size() + (2 if kind == "rms" else 3) * N * w.element_size()
        cfgs = [None] + [norm_cfg(R, N, *g) for g in grid]
        for cfg in cfgs:
            if kind == "rms":
                fn = lambda: rmsnorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, eps=1e-6, config=cfg)
            else:
                fn = lambda: layernorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, grad_bias=gb, eps=1e-5,
                                           has_bias=True, config=cfg)
            try:
                us = bench(fn)
            except Exception as e:
                print("FAIL", kind, R, N, cfg, type(e).__name__, str(e)[:200]); continue
            record(kind, (R, N), dt, cfg or "default", us, nbytes)
        del x, dy, gx

single4k = [(bm, 4096, nw, pps) for bm in (1, 2, 4) for nw in (4, 8, 16) for pps in (1, 2, 4) if bm * 4096 // (32 * nw) <= 64]
single8k = [(bm, 8192, nw, pps) for bm in (1, 2) for nw in (8, 16) for pps in (1, 2, 4) if bm * 8192 // (32 * nw) <= 64]
long16k = [(bm, bn, nw, pps) for bm, bn in ((1, 2048), (1, 4096), (2, 2048), (1, 8192), (2, 4096)) for nw in (8, 16)
           for pps in (1, 2, 4) if bm * bn // (32 * nw) <= 32]
NORM_SHAPES = [((16384, 4096), single4k), ((8192, 8192), single8k), ((4096, 16384), long16k), ((64, 4096), [(1, 4096, 8, 1), (1, 4096, 16, 1), (1, 4096, 4, 1)])]
if "rms" in which:
    norm_sweep("rms", NORM_SHAPES)
    norm_sweep("rms", [((16384, 4096), []), ((32768, 4096), [])], torch.float32)
if "ln" in which:
    norm_sweep("ln", NORM_SHAPES)

if "silu" in which:
    for (R, d) in [(8192, 14336), (4096, 28672), (64, 14336)]:
        dt = torch.bfloat16
        x = torch.randn(R, 2 * d, dtype=dt, device=dev); dy = torch.randn(R, d, dtype=dt, device=dev); gx = torch.empty_like(x)
        nbytes = (2 * x.numel() + dy.numel()) * 2
        cfgs = [None] + [SiluAndMulConfig(bm, bn, nw) for bm, bn in ((4, 1024), (8, 1024), (2, 1024), (1, 1024), (2, 2048), (4, 2048), (8, 512), (16, 256))
                         for nw in (4, 8, 16) if bm * bn // (32 * nw) <= 32 and bm * bn // (32 * nw) >= 4]
        for cfg in cfgs:
            us = bench(lambda: silu_and_mul_bwd(x=x, grad_out=dy, grad_x=gx, config=cfg))
            record("silu", (R, d), dt, cfg or "default", us, nbytes)
        del x, dy, gx

if "softmax" in which:
    for (R, C) in [(16384, 4096), (4096, 32000), (4096, 128256), (1024, 262144), (65536, 512), (8192, 16384)]:
        dt = torch.bfloat16
        y = torch.softmax(torch.randn(R, C, device=dev), -1).to(dt); dy = torch.randn_like(y); gx = torch.empty_like(y)
        nbytes = 3 * y.numel() * 2
        if C <= 16384:
            n = triton.next_power_of_2(C)
            grid = [SoftmaxBwdConfig(bm, n, nw, True) for bm in (1, 2, 4) for nw in (4, 8, 16) if 4 <= bm * n // (32 * nw) <= 64]
        else:
            grid = []
        grid += [SoftmaxBwdConfig(1, bn, nw, False) for bn in (2048, 4096, 8192, 16384) for nw in (4, 8, 16) if 4 <= bn // (32 * nw) <= 32]
        for cfg in [None] + grid:
            us = bench(lambda: softmax_bwd(out=y, grad_out=dy, grad_x=gx, config=cfg))
            record("softmax", (R, C), dt, cfg or "default", us, nbytes)
        del y, dy, gx

if "check" in which:
    torch.manual_seed(0)
    def rel(a, b):
        return ((a.double() - b.double()).norm() / b.double().norm()).item()
    for dt in (torch.float32, torch.bfloat16):
        R, N = 4099, 4096
        x = torch.randn(R, N, dtype=dt, device=dev); w = torch.randn(N, dtype=dt, device=dev); dy = torch.randn_like(x)
        outs = []
        for _ in range(2):
            gx = torch.empty_like(x); gw = torch.empty_like(w); gb = torch.empty_like(w)
            layernorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, grad_bias=gb, eps=1e-5, has_bias=True)
            outs.append((gx, gw, gb))
        rx, rw, rb = (torch.empty(t.shape, dtype=torch.float64, device=dev) for t in (x, w, w))
        layernorm_bwd_ref(x=x.double(), weight=w.double(), grad_out=dy.double(), grad_x=rx, grad_weight=rw, grad_bias=rb, eps=1e-5, has_bias=True)
        same = all(torch.equal(a, b) for a, b in zip(*outs))
        print("check ln", dt, rel(outs[0][0], rx), rel(outs[0][1], rw), rel(outs[0][2], rb), "deterministic", same)
        outs = []
        for _ in range(2):
            gx = torch.empty_like(x); gw = torch.empty_like(w)
            rmsnorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, eps=1e-6)
            outs.append((gx, gw))
        rmsnorm_bwd_ref(x=x.double(), weight=w.double(), grad_out=dy.double(), grad_x=rx, grad_weight=rw, eps=1e-6)
        same = all(torch.equal(a, b) for a, b in zip(*outs))
        print("check rms", dt, rel(outs[0][0], rx), rel(outs[0][1], rw), "deterministic", same)
        for R, N in [(3, 16411), (4097, 12000)]:
            x = torch.randn(R, N, dtype=dt, device=dev) + 5; w = torch.randn(N, dtype=dt, device=dev); dy = torch.randn_like(x)
            gx = torch.empty_like(x); gw = torch.empty_like(w); gb = torch.empty_like(w)
            rx, rw, rb = (torch.empty(t.shape, dtype=torch.float64, device=dev) for t in (x, w, w))
            layernorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, grad_bias=gb, eps=1e-5, has_bias=True)
            layernorm_bwd_ref(x=x.double(), weight=w.double(), grad_out=dy.double(), grad_x=rx, grad_weight=rw, grad_bias=rb, eps=1e-5, has_bias=True)
            print("check ln long", R, N, dt, rel(gx, rx), rel(gw, rw), rel(gb, rb))
            rmsnorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, eps=1e-6)
            rmsnorm_bwd_ref(x=x.double(), weight=w.double(), grad_out=dy.double(), grad_x=rx, grad_weight=rw, eps=1e-6)
            print("check rms long", R, N, dt, rel(gx, rx), rel(gw, rw))
        x = torch.randn(77, 2 * 3000, dtype=dt, device=dev); dy = torch.randn(77, 3000, dtype=dt, device=dev); gx = torch.empty_like(x)
        rx = torch.empty(x.shape, dtype=torch.float64, device=dev)
        silu_and_mul_bwd(x=x, grad_out=dy, grad_x=gx); silu_and_mul_bwd_ref(x=x.double(), grad_out=dy.double(), grad_x=rx)
        print("check silu", dt, rel(gx, rx))
        for R, C in [(77, 4096), (5, 40000)]:
            y = torch.softmax(torch.randn(R, C, device=dev), -1).to(dt); dy = torch.randn_like(y); gx = torch.empty_like(y)
            rx = torch.empty(y.shape, dtype=torch.float64, device=dev)
            softmax_bwd(out=y, grad_out=dy, grad_x=gx); softmax_bwd_ref(out=y.double(), grad_out=dy.double(), grad_x=rx)
            print("check softmax", R, C, dt, rel(gx, rx))
