"""Where the int4 decode kernel's loads lose to a plain read of the same bytes.

On an H100 (reports/h100/experiments/read-floor/) the decode kernel's loads alone (kernels/int4_gemv.cu built with
KH_INT4_FLOOR 1) took 7.15 us at 1 x 4096 x 4096, where the best plain read of the packed weight's bytes took 5.26
us. The loads differ from a plain read in four ways, and this probe varies each alone with a loads-only CUDA kernel
that reads the weight [N, K / 2] bytes exactly once and XORs what it read:

- the segment: a warp's load instruction reads S contiguous bytes of each of 512 / S rows. The decode kernel's
  lanes 4r .. 4r + 3 read 64 bytes of row r (one group's k slots, the MMA's fragment layout): S = 64. A plain read
  has S = 512 (one row's 512 bytes a warp). S = 128 and 256 lie between;
- the depth: units (1 KB a warp: two 16-byte loads a lane) a warp has in flight beside the one it consumes (the
  decode kernel: 1);
- the grid: a block per 16 rows of w, as the decode kernel's, its K split across ``splits`` blocks (1, 2, 4);
- the occupancy: free (a loads-only kernel takes few registers), or two blocks an SM, as the decode kernel's 94
  registers allow (forced here by dynamic shared memory).

Beside them: the best plain read (read_floor.py's sweep), the decode kernel's loads alone (its scales, zero points
and activations included), bf16 ``F.linear`` and the int4 launcher. Timed as the harness times kernels (events
behind a spin kernel, L2 flushed before each sample). Run from the repository root on the GPU:
``python3 reports/h200/experiments/int4/read_pattern.py --out DIR`` (writes DIR/read_pattern.json).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from dataclasses import astuple

import torch

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda"))
from int4_probe import SWEEP_TIMING, int4_bytes, make_inputs, median_us  # noqa: E402

from kernels import int4_cuda as cu  # noqa: E402
from kernels import int4_matmul as q4  # noqa: E402
from kernels.common import load_cuda_extension  # noqa: E402

SHAPES = ((4096, 4096), (4096, 14336), (14336, 4096))
SEGMENTS = (64, 128, 256, 512)
DEPTHS = (1, 2, 4)
SPLITS = (1, 2, 4)
WARPS = (4, 8)
KERNEL_LIKE = (64, 1, 1, 8, "2/SM")  # segment, depth, splits, warps, occupancy: the decode kernel's own

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <stdint.h>

// A block reads rows n0 .. n0 + 15 of w, bytes [c0, c0 + cols) of each (its split of K / 2). Unit u of the block
// (1 KB: two 16-byte loads a lane) is segment u / ROW_GROUPS, rows (u % ROW_GROUPS) * UNIT_ROWS ..; warp i takes
// units i, i + W, ..., as the decode kernel's warp i takes groups i, i + W: the block's warps read neighbouring
// segments at once. D units in flight beside the one consumed.
template <int S, int D>
__global__ void read_tiles(const uint8_t* __restrict__ w, int64_t ldw, int cols, uint32_t* __restrict__ out) {
  constexpr int L = S / 16;            // lanes a row
  constexpr int RPI = 32 / L;          // rows an instruction
  constexpr int UNIT_ROWS = 2 * RPI;   // rows a unit
  constexpr int ROW_GROUPS = 16 / UNIT_ROWS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int n0 = blockIdx.x * 16, c0 = blockIdx.y * cols;
  const int units = (cols / S) * ROW_GROUPS;
  const int r = lane / L, q = lane % L;
  auto load = [&](int u, uint4 (&b)[2]) {
    if (u < units) {
      const int64_t row = n0 + (u % ROW_GROUPS) * UNIT_ROWS + r;
      const uint8_t* p = w + row * ldw + c0 + (u / ROW_GROUPS) * S + q * 16;
      b[0] = __ldcs(reinterpret_cast<const uint4*>(p));
      b[1] = __ldcs(reinterpret_cast<const uint4*>(p + RPI * ldw));
    } else {
      b[0] = b[1] = make_uint4(0, 0, 0, 0);
    }
  };
  uint4 buf[D][2];
#pragma unroll
  for (int d = 0; d < D; ++d) load(warp + d * warps, buf[d]);
  uint32_t x = 0;
  for (int u = warp; u < units; u += D * warps) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      uint4 next[2];
      load(u + (d + D) * warps, next);
#pragma unroll
      for (int h = 0; h < 2; ++h) x ^= buf[d][h].x ^ buf[d][h].y ^ buf[d][h].z ^ buf[d][h].w;
      buf[d][0] = next[0];
      buf[d][1] = next[1];
    }
  }
  out[((int64_t)blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] = x;
}

template <int S, int D>
static const char* launch_one(const uint8_t* w, int64_t ldw, int n, int row_bytes, int splits, int warps, int smem,
                              uint32_t* out, cudaStream_t stream) {
  auto kernel = read_tiles<S, D>;
  if (smem > 48 * 1024 &&
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
    return "cudaFuncSetAttribute failed";
  kernel<<<dim3(n / 16, splits), warps * 32, smem, stream>>>(w, ldw, row_bytes / splits, out);
  return cudaGetLastError() == cudaSuccess ? nullptr : "launch failed";
}

template <int S>
static const char* launch_s(int depth, const uint8_t* w, int64_t ldw, int n, int row_bytes, int splits, int warps,
                            int smem, uint32_t* out, cudaStream_t stream) {
  switch (depth) {
    case 1: return launch_one<S, 1>(w, ldw, n, row_bytes, splits, warps, smem, out, stream);
    case 2: return launch_one<S, 2>(w, ldw, n, row_bytes, splits, warps, smem, out, stream);
    case 4: return launch_one<S, 4>(w, ldw, n, row_bytes, splits, warps, smem, out, stream);
  }
  return "depth: 1, 2 or 4";
}

extern "C" const char* kh_read_pattern_launch(int segment, int depth, const void* w, int64_t ldw, int n,
                                              int row_bytes, int splits, int warps, int smem, void* out,
                                              void* stream) {
  if (n % 16 || row_bytes % (splits * segment)) return "N a multiple of 16, each split a multiple of the segment";
  const auto* wp = static_cast<const uint8_t*>(w);
  auto* o = static_cast<uint32_t*>(out);
  auto s = static_cast<cudaStream_t>(stream);
  switch (segment) {
    case 64: return launch_s<64>(depth, wp, ldw, n, row_bytes, splits, warps, smem, o, s);
    case 128: return launch_s<128>(depth, wp, ldw, n, row_bytes, splits, warps, smem, o, s);
    case 256: return launch_s<256>(depth, wp, ldw, n, row_bytes, splits, warps, smem, o, s);
    case 512: return launch_s<512>(depth, wp, ldw, n, row_bytes, splits, warps, smem, o, s);
  }
  return "segment: 64, 128, 256 or 512";
}
"""

BINDING_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

#include <stdexcept>
#include <string>

extern "C" const char* kh_read_pattern_launch(int segment, int depth, const void* w, int64_t ldw, int n,
                                              int row_bytes, int splits, int warps, int smem, void* out,
                                              void* stream);

void read_pattern(torch::Tensor w, torch::Tensor out, int64_t segment, int64_t depth, int64_t splits, int64_t warps,
                  int64_t smem) {
  const char* err = kh_read_pattern_launch(static_cast<int>(segment), static_cast<int>(depth), w.data_ptr(),
                                           w.stride(0), static_cast<int>(w.size(0)), static_cast<int>(w.size(1)),
                                           static_cast<int>(splits), static_cast<int>(warps), static_cast<int>(smem),
                                           out.data_ptr(), at::cuda::getCurrentCUDAStream().stream());
  if (err != nullptr) throw std::runtime_error(std::string("read_pattern: ") + err);
}
"""


def module():
    return load_cuda_extension("kh_read_pattern", BINDING_SRC, CUDA_SRC, ["read_pattern"],
                               torch.cuda.get_device_capability())


def two_blocks_smem() -> int:
    """Dynamic shared memory that leaves room for two blocks an SM, not three (the decode kernel's occupancy)."""
    per_sm = torch.cuda.get_device_properties(0).shared_memory_per_multiprocessor
    return per_sm // 3 + 1024


def check(mod, w: torch.Tensor) -> str | None:
    """Every variant reads every byte once: the XOR of its outputs is the XOR of w's words."""
    want = _xor_all(w.view(torch.int32))
    out = torch.zeros(w.shape[0] // 16 * max(SPLITS) * 256, dtype=torch.int32, device=w.device)
    for s, d, sp in itertools.product(SEGMENTS, DEPTHS, SPLITS):
        if not fits(w.shape[1], s, sp):
            continue
        out.zero_()
        mod.read_pattern(w, out, s, d, sp, 8, 0)
        if _xor_all(out) != want:
            return f"segment {s} depth {d} splits {sp}: not every byte read once"
    return None


def fits(row_bytes: int, segment: int, splits: int) -> bool:
    return row_bytes % (segment * splits) == 0


def _xor_all(t: torch.Tensor) -> int:
    v = t.flatten().to(torch.int64) & 0xFFFFFFFF
    while v.numel() > 1:
        if v.numel() % 2:
            v = torch.cat([v, v.new_zeros(1)])
        v = v[0::2] ^ v[1::2]
    return int(v[0])


def time_shape(mod, n: int, k: int) -> dict:
    from read_floor import read_floor

    a, w, s, z = make_inputs(1, n, k, torch.bfloat16)
    c = torch.empty((1, n), dtype=torch.bfloat16, device="cuda")
    w_bf16 = q4.dequantize(w, s, z, torch.bfloat16).contiguous()
    rec = {"N": n, "K": k, "rows": []}
    rec["bf16_us"], _ = median_us(lambda: torch.nn.functional.linear(a, w_bf16))
    rec["int4_us"], _ = median_us(lambda: cu.int4_matmul_cuda(a=a, w=w, scales=s, zeros=z, c=c))
    rec["plain_read"] = read_floor(int4_bytes(1, n, k) - (k + n) * 2)
    try:
        from int4_cuda_probe import floor_module

        from kernels.splitk import unused

        cfg = cu.CudaGemvConfig.for_shape(1, n, k)
        ws, cnt = unused(a.device)
        fm = floor_module(1)
        rec["kernel_loads_us"], _ = median_us(lambda: fm.int4_gemv(c, a, w, s, z, ws, cnt, *astuple(cfg)),
                                              SWEEP_TIMING)
    except Exception as exc:  # noqa: BLE001 - the anchor is optional; the sweep below stands alone
        rec["kernel_loads_error"] = f"{type(exc).__name__}: {exc}"
    out = torch.empty(n // 16 * max(SPLITS) * max(WARPS) * 32, dtype=torch.int32, device="cuda")
    smem2 = two_blocks_smem()
    for seg, depth, splits, warps, occ in itertools.product(SEGMENTS, DEPTHS, SPLITS, WARPS, ("free", "2/SM")):
        if not fits(k // 2, seg, splits):
            continue
        smem = smem2 if occ == "2/SM" else 0
        args = (w, out, seg, depth, splits, warps, smem)
        t, _ = median_us(lambda args=args: mod.read_pattern(*args), SWEEP_TIMING)
        rec["rows"].append({"segment": seg, "depth": depth, "splits": splits, "warps": warps, "occupancy": occ,
                            "us": t})
    return rec


def summary(rec: dict) -> list[str]:
    rows = rec["rows"]
    plain = rec["plain_read"]["us"]
    lines = [f"N={rec['N']} K={rec['K']}: bf16 F.linear {rec['bf16_us']:.2f} us, int4 launcher {rec['int4_us']:.2f} us"
             f" ({rec['bf16_us'] / rec['int4_us']:.2f}x), plain read {plain:.2f} us, decode kernel's loads alone "
             f"{rec.get('kernel_loads_us', float('nan')):.2f} us"]
    like = [r for r in rows if (r["segment"], r["depth"], r["splits"], r["warps"], r["occupancy"]) == KERNEL_LIKE]
    if like:
        lines.append(f"  as the decode kernel reads (S 64, depth 1, splits 1, 8 warps, 2 blocks/SM): "
                     f"{like[0]['us']:.2f} us")
    for key in ("segment", "depth", "splits", "warps", "occupancy"):
        best = {}
        for r in rows:
            if r["us"] < best.get(r[key], (float("inf"),))[0]:
                best[r[key]] = (r["us"], r)
        lines.append(f"  best by {key}: " + ", ".join(f"{v}: {b[0]:.2f}" for v, b in best.items()))
    for r in sorted(rows, key=lambda r: r["us"])[:5]:
        lines.append(f"  {r['us']:.2f} us ({r['us'] / plain:.2f}x the plain read): S {r['segment']}, depth "
                     f"{r['depth']}, splits {r['splits']}, {r['warps']} warps, occupancy {r['occupancy']}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    mod = module()
    w = torch.randint(0, 256, (256, 2048), dtype=torch.uint8, device="cuda")
    problem = check(mod, w)
    print(f"check (every byte read once, 256 x 2048 bytes): {problem or 'ok'}", flush=True)
    if problem:
        return 1
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "shapes": []}
    for n, k in SHAPES:
        rec = time_shape(mod, n, k)
        res["shapes"].append(rec)
        print("\n".join(summary(rec)), flush=True)
        with open(os.path.join(args.out, "read_pattern.json"), "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
