"""H200 sweep 2: back-to-back timing (launch overhead hidden), loop pipelining. build/ is git-ignored."""
import json, os, sys
import torch, triton
from kernels.rmsnorm_bwd import NormBwdConfig, rmsnorm_bwd
from kernels.layernorm import layernorm_bwd
from kernels.silu_and_mul import SiluAndMulConfig, silu_and_mul_bwd
from kernels.softmax import SoftmaxBwdConfig, softmax_bwd

OUT = os.environ.get("OUT", ".")
dev = torch.device("cuda")
SMS = torch.cuda.get_device_properties(0).multi_processor_count
log = open(os.path.join(OUT, "sweep2.jsonl"), "a")

def timeit(fn, n=20):
    fn(); torch.cuda.synchronize()
    best = float("inf")
    for _ in range(4):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(n):
            fn()
        e.record(); torch.cuda.synchronize()
        best = min(best, s.elapsed_time(e) * 1e3 / n)
    return best

def record(kernel, shape, dt, cfg, fn, nbytes):
    try:
        us = timeit(fn)
    except Exception as ex:
        print("FAIL", kernel, shape, cfg, type(ex).__name__, str(ex)[:300], flush=True); return
    gbs = nbytes / us / 1e3
    row = dict(kernel=kernel, shape=shape, dtype=str(dt).split(".")[-1], cfg=str(cfg), us=round(us, 2), gbs=round(gbs, 1))
    log.write(json.dumps(row) + "\n"); log.flush()
    print(f"{kernel:8s} {str(shape):14s} {row['dtype']:9s} {us:9.2f} us {gbs:7.0f} GB/s  {cfg}", flush=True)

a = torch.empty(1 << 29, dtype=torch.bfloat16, device=dev); b = torch.empty_like(a)
record("copy", (1 << 29,), torch.bfloat16, "", lambda: b.copy_(a), 2 * a.numel() * 2)
del a, b

def ncfg(R, N, bm, bn, nw, st, pps):
    rpp = triton.cdiv(triton.cdiv(R, SMS * pps), bm) * bm
    return NormBwdConfig(bm, bn, nw, bn >= N, rpp, st)

NORM = {
    (16384, 4096): [(1, 4096, 8, 1, 2), (1, 4096, 8, 2, 2), (1, 4096, 8, 3, 2), (2, 4096, 16, 1, 2), (2, 4096, 16, 2, 2),
                    (2, 4096, 8, 1, 2), (2, 4096, 8, 2, 2), (1, 4096, 4, 2, 2), (1, 4096, 16, 2, 2), (1, 4096, 8, 2, 4),
                    (1, 4096, 8, 2, 1), (1, 4096, 8, 2, 3), (1, 4096, 16, 1, 4)],
    (8192, 8192): [(1, 8192, 16, 1, 2), (1, 8192, 16, 2, 2), (2, 8192, 16, 2, 2), (1, 8192, 8, 2, 2), (1, 8192, 16, 2, 1)],
    (4096, 16384): [(2, 4096, 16, 1, 2), (2, 4096, 16, 2, 2), (1, 4096, 8, 2, 2), (1, 8192, 16, 2, 2), (1, 4096, 8, 3, 2),
                    (1, 4096, 16, 2, 2), (2, 2048, 8, 2, 2)],
    (64, 4096): [(1, 4096, 4, 1, 1), (1, 4096, 4, 2, 1)],
}
for kind in ("rms", "ln"):
    for (R, N), grid in NORM.items():
        dt = torch.bfloat16
        x = torch.randn(R, N, dtype=dt, device=dev); w = torch.randn(N, dtype=dt, device=dev); dy = torch.randn_like(x)
        gx, gw, gb = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
        nbytes = 3 * x.numel() * 2 + (2 if kind == "rms" else 3) * N * 2
        for cfg in [None] + [ncfg(R, N, *g) for g in grid]:
            if kind == "rms":
                fn = lambda: rmsnorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, eps=1e-6, config=cfg)
            else:
                fn = lambda: layernorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, grad_bias=gb, eps=1e-5, has_bias=True, config=cfg)
            record(kind, (R, N), dt, cfg or "default", fn, nbytes)
x = torch.randn(16384, 4096, device=dev); w = torch.randn(4096, device=dev); dy = torch.randn_like(x); gx, gw = torch.empty_like(x), torch.empty_like(w)
for cfg in (None, ncfg(16384, 4096, 1, 4096, 8, 2, 2), ncfg(16384, 4096, 1, 4096, 16, 2, 2)):
    record("rms", (16384, 4096), torch.float32, cfg or "default", lambda: rmsnorm_bwd(x=x, weight=w, grad_out=dy, grad_x=gx, grad_weight=gw, eps=1e-6, config=cfg), 3 * x.numel() * 4 + 8 * 4096)
del x, dy, gx

for (R, d) in [(8192, 14336), (64, 14336)]:
    dt = torch.bfloat16
    x = torch.randn(R, 2 * d, dtype=dt, device=dev); dy = torch.randn(R, d, dtype=dt, device=dev); gx = torch.empty_like(x)
    for cfg in [None] + [SiluAndMulConfig(*c) for c in ((2, 1024, 4), (4, 1024, 4), (8, 1024, 8), (1, 2048, 8), (2, 2048, 8), (4, 512, 4), (4, 1024, 16), (16, 1024, 16))]:
        record("silu", (R, d), dt, cfg or "default", lambda: silu_and_mul_bwd(x=x, grad_out=dy, grad_x=gx, config=cfg), (2 * x.numel() + dy.numel()) * 2)
    del x, dy, gx

SM = {(16384, 4096): [(1, 4096, 4, True), (1, 4096, 16, True), (2, 4096, 16, True), (2, 4096, 8, True)],
      (8192, 16384): [(1, 16384, 16, True), (1, 8192, 16, False), (1, 4096, 8, False)],
      (4096, 32000): [(1, 8192, 16, False), (1, 4096, 8, False), (1, 4096, 16, False), (1, 16384, 16, False)],
      (65536, 512): [(4, 512, 4, True), (8, 512, 8, True), (2, 512, 2, True)],
      (4096, 128256): [(1, 4096, 8, False)]}
for (R, C), grid in SM.items():
    dt = torch.bfloat16
    y = torch.softmax(torch.randn(R, C, device=dev), -1).to(dt); dy = torch.randn_like(y); gx = torch.empty_like(y)
    for cfg in [None] + [SoftmaxBwdConfig(*c) for c in grid]:
        record("softmax", (R, C), dt, cfg or "default", lambda: softmax_bwd(out=y, grad_out=dy, grad_x=gx, config=cfg), 3 * y.numel() * 2)
    del y, dy, gx
