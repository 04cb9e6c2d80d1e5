"""H200 check of the final backward defaults: correctness against fp64 references, determinism, timings (back-to-back
launches, as sweep 2). build/ is git-ignored."""
import json, os
import torch, triton
from kernels.rmsnorm_bwd import NormBwdConfig, rmsnorm_bwd, rmsnorm_bwd_ref
from kernels.layernorm import layernorm_bwd, layernorm_bwd_ref
from kernels.silu_and_mul import silu_and_mul_bwd, silu_and_mul_bwd_ref
from kernels.softmax import softmax_bwd, softmax_bwd_ref

OUT = os.environ.get("OUT", "."); dev = torch.device("cuda")
SMS = torch.cuda.get_device_properties(0).multi_processor_count
log = open(os.path.join(OUT, "sweep3.jsonl"), "a")
torch.manual_seed(0)

def timeit(fn, n=20):
    fn(); torch.cuda.synchronize(); best = float("inf")
    for _ in range(4):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            fn()
        e.record(); torch.cuda.synchronize(); best = min(best, s.elapsed_time(e) * 1e3 / n)
    return best

def record(kernel, shape, dt, cfg, fn, nbytes):
    us = timeit(fn); gbs = nbytes / us / 1e3
    log.write(json.dumps(dict(kernel=kernel, shape=shape, dtype=str(dt), cfg=str(cfg), us=round(us, 2), gbs=round(gbs, 1))) + "\n"); log.flush()
    print(f"{kernel:8s} {str(shape):14s} {str(dt)[6:]:9s} {us:9.2f} us {gbs:7.0f} GB/s  {cfg}", flush=True)

def rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()

a = torch.empty(1 << 29, dtype=torch.bfloat16, device=dev); b = torch.empty_like(a)
record("copy", (1 << 29,), torch.bfloat16, "", lambda: b.copy_(a), 2 * a.numel() * 2); del a, b

# correctness and determinism, each kernel, two dtypes, the paths
for dt in (torch.float32, torch.bfloat16):
    for R, N in [(4099, 4096), (77, 5125), (1000, 8192), (33, 16411)]:
        x = torch.randn(R, N, dtype=dt, device=dev) + 3; w = torch.randn(N, dtype=dt, device=dev); dy = torch.randn_like(x)
        r64 = [torch.empty(t.shape, dtype=torch.float64, device=dev) for t in (x, w, w)]
        runs = []
        for _ in range(2):
            outs = [torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)]
            layernorm_bwd(x=x, weight=w, grad_out=dy, grad_x=outs[0], grad_weight=outs[1], grad_bias=outs[2], eps=1e-5, has_bias=True)
            runs.append(outs)
        layernorm_bwd_ref(x=x.double(), weight=w.double(), grad_out=dy.double(), grad_x=r64[0], grad_weight=r64[1], grad_bias=r64[2], eps=1e-5, has_bias=True)
        print("check ln ", str(dt)[6:], R, N, [f"{rel(g, r):.2e}" for g, r in zip(runs[0], r64)], "det", all(torch.equal(p, q) for p, q in zip(*runs)))
        runs = []
        for _ in range(2):
            outs = [torch.empty_like(x), torch.empty_like(w)]
            rmsnorm_bwd(x=x, weight=w, grad_out=dy, grad_x=outs[0], grad_weight=outs[1], eps=1e-6); runs.append(outs)
        rmsnorm_bwd_ref(x=x.double(), weight=w.double(), grad_out=dy.double(), grad_x=r64[0], grad_weight=r64[1], eps=1e-6)
        print("check rms", str(dt)[6:], R, N, [f"{rel(g, r):.2e}" for g, r in zip(runs[0], r64)], "det", all(torch.equal(p, q) for p, q in zip(*runs)))
    x = torch.randn(77, 6000, dtype=dt, device=dev); dy = torch.randn(77, 3000, dtype=dt, device=dev); gx = torch.empty_like(x)
    rx = torch.empty(x.shape, dtype=torch.float64, device=dev)
    silu_and_mul_bwd(x=x, grad_out=dy, grad_x=gx); silu_and_mul_bwd_ref(x=x.double(), grad_out=dy.double(), grad_x=rx)
    print("check silu", str(dt)[6:], f"{rel(gx, rx):.2e}")
    for R, C in [(77, 4096), (5, 40000), (3, 16384)]:
        y = torch.softmax(3 * torch.randn(R, C, device=dev), -1).to(dt); dy = torch.randn_like(y); gx = torch.empty_like(y)
        rx = torch.empty(y.shape, dtype=torch.float64, device=dev)
        softmax_bwd(out=y, grad_out=dy, grad_x=gx); softmax_bwd_ref(out=y.double(), grad_out=dy.double(), grad_x=rx)
        err = ((gx.double() - rx).norm(dim=1) / rx.norm(dim=1)).max().item()
        print("check softmax", str(dt)[6:], R, C, f"worst row {err:.2e}")

def ncfg(R, N, bm, bn, nw, st, pps):
    return NormBwdConfig(bm, bn, nw, bn >= N, triton.cdiv(triton.cdiv(R, SMS * pps), bm) * bm, st)

for kind in ("rms", "ln"):
    for (R, N), alts in [((16384, 4096), []), ((8192, 8192), [(1, 8192, 16, 2, 1), (1, 8192, 32, 1, 1), (1, 8192, 32, 2, 2)]),
                         ((4096, 16384), []), ((32768, 4096), []), ((7001, 8192), [])]:
        for dt in ((torch.bfloat16, torch.float32) if N == 4096 and R == 16384 else (torch.bfloat16,)):
            x = torch.randn(R, N, dtype=dt, device=dev); w = torch.randn(N, dtype=dt, device=dev); dy = torch.randn_like(x)
            gx, gw, gb = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
            nbytes = 3 * x.numel() * x.element_size() + (2 if kind == "rms" else 3) * N * x.element_size()
            for cfg in [None] + [ncfg(R, N, *a) for a in alts]:
                if kind == "rms":
                    fn = lambda: rmsnorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, eps=1e-6, config=cfg)
                else:
                    fn = lambda: layernorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, grad_bias=gb, eps=1e-5, has_bias=True, config=cfg)
                record(kind, (R, N), dt, cfg or "default", fn, nbytes)
            del x, dy, gx
for (R, d) in [(8192, 14336), (4096, 28672)]:
    x = torch.randn(R, 2 * d, dtype=torch.bfloat16, device=dev); dy = torch.randn(R, d, dtype=torch.bfloat16, device=dev); gx = torch.empty_like(x)
    record("silu", (R, d), torch.bfloat16, "default", lambda: silu_and_mul_bwd(x=x, grad_out=dy, grad_x=gx), (2 * x.numel() + dy.numel()) * 2)
    del x, dy, gx
for (R, C) in [(16384, 4096), (4096, 32000), (4096, 128256), (1024, 262144), (65536, 512)]:
    for dt in ((torch.bfloat16, torch.float32) if C in (4096, 32000) else (torch.bfloat16,)):
        y = torch.softmax(torch.randn(R, C, device=dev), -1).to(dt); dy = torch.randn_like(y); gx = torch.empty_like(y)
        record("softmax", (R, C), dt, "default", lambda: softmax_bwd(out=y, grad_out=dy, grad_x=gx), 3 * y.numel() * y.element_size())
        del y, dy, gx
