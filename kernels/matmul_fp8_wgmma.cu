#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

// FP8 GEMM for Hopper (sm_90a) with fp32 promotion overlapped with the tensor cores:
// c[M, N] (bf16) = (a[M, K] @ b[N, K].T) * scale_a * scale_b.T, a and b e4m3, K-major.
//
// Why by hand: fp8 wgmma adds into an accumulator that keeps about 14 bits, so every 128-deep block of K is summed
// in a wgmma accumulator of its own and then added into an fp32 total. Triton waits for all of its wgmma groups
// before that add, so the tensor cores idle during every promotion. Here each consumer warpgroup holds two wgmma
// accumulator sets: block i's wgmmas are issued into one set, then `wgmma.wait_group 1` retires only block i-1's
// group and its set is added into the total while block i runs on the tensor cores.
//
// Layout: a persistent CTA per SM, 384 threads. Warpgroup 0 is the producer (one thread issues TMA into a ring of
// STAGES shared-memory stages, full/empty mbarriers per stage); warpgroups 1 and 2 are consumers sharing one
// 128 x 128 output tile, 64 rows each (wgmma m64n128k32). A stage is one 128-deep block of both operands, 128-byte
// rows under the 128B swizzle: 16 KiB of a, 16 KiB of b. Registers per consumer thread: 3 x 64 fp32 (two wgmma
// sets and the total), so the producer gives registers back (setmaxnreg) for the consumers to take.
//
// Mode picks the schedule: kOverlap (above), kStream (the same, and the blocks run as one stream across the CTA's
// tiles: the next tile's first block is issued before the current tile's last promotion and store, so the store
// runs while the tensor cores work), kSerial (wait for the block, then add: what Triton does, kept as the
// measurement of what the overlap wins) and kFast (the whole K in the wgmma accumulator, no promotion: the
// ceiling, fails the spec's accuracy bound at long K; never the launcher's default).

namespace kh_fp8_wgmma {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 128;
constexpr int kStageBytes = (kBM + kBN) * kBK;  // e4m3: one byte per element
constexpr int kThreads = 384;
constexpr int kGroupM = 8;  // tile rows per band of the persistent order, for L2 reuse of b
constexpr int kOverlap = 0, kSerial = 1, kFast = 2, kStream = 3;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y)
      : "memory");
}

// K-major operand under the 128B swizzle: rows of 128 bytes, 8-row atoms 1024 bytes apart (the stride byte offset);
// the leading byte offset is unused for swizzled K-major layouts. Stage buffers are 1024-byte aligned, so the
// swizzle phase (base offset) is 0 and a k step of 32 bytes moves only the start address.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (static_cast<uint64_t>(1024 >> 4) << 32) |
         (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

#define KH_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
                 "+f"(d[i + 6]), "+f"(d[i + 7])

// d (+)= a (64 x 32, smem) * b (128 x 32, smem).T; scale_d 0 overwrites d, so a block never zeroes its set with
// ordinary instructions (that would make ptxas serialise the wgmmas around them).
template <int ScaleD> __device__ __forceinline__ void wgmma_m64n128k32(float (&d)[64], uint64_t da, uint64_t db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, "
      "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "
      "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n}\n"
      : KH_D8(0), KH_D8(8), KH_D8(16), KH_D8(24), KH_D8(32), KH_D8(40), KH_D8(48), KH_D8(56)
      : "l"(da), "l"(db), "n"(ScaleD));
}
#undef KH_D8

// One 128-deep block: four k32 wgmmas as one group. Accumulate: keep adding into d (kFast after its first block).
template <bool Accumulate>
__device__ __forceinline__ void mma_block(float (&d)[64], uint32_t a_addr, uint32_t b_addr) {
  const uint64_t da = smem_desc(a_addr), db = smem_desc(b_addr);
  wgmma_fence();  // the set was last read by the promotion's adds
  wgmma_m64n128k32<Accumulate ? 1 : 0>(d, da, db);
#pragma unroll
  for (int k = 1; k < kBK / 32; ++k) wgmma_m64n128k32<1>(d, da + 2 * k, db + 2 * k);  // 32 bytes = 2 units of 16
  wgmma_commit();
}

// After wgmma.wait_group: ties d's registers to this point, so the compiler cannot read them before the wait
// (nothing else orders a plain read of d after the asm that waits; CUTLASS's warpgroup_fence_operand).
__device__ __forceinline__ void fence_acc(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void promote(float (&total)[64], float (&d)[64]) {
  fence_acc(d);
#pragma unroll
  for (int i = 0; i < 64; ++i) total[i] += d[i];
}

struct Ring {  // the consumer's view of the stage ring, continued across tiles
  uint32_t base, full, empty;
  int stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ uint32_t a() const { return base + stage * kStageBytes; }
  __device__ __forceinline__ uint32_t b() const { return base + stage * kStageBytes + kBM * kBK; }
};

template <int Stages> __device__ __forceinline__ void advance(int& stage, uint32_t& phase) {
  if (++stage == Stages) { stage = 0; phase ^= 1; }
}

__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int band = kGroupM * tiles_n;
  const int first = (tile / band) * kGroupM;
  const int rows = min(tiles_m - first, kGroupM);
  tm = first + (tile % band) % rows;
  tn = (tile % band) / rows;
}

// wgmma's D fragment: register 4j + 2i + e is row 16 warp + lane / 4 + 8 i, column 8 j + 2 (lane % 4) + e.
// Scaled as the reference does, (acc * scale_a) * scale_b, then one rounding to bf16. So lane q of a quad holds one
// 32-bit word of each 16-byte chunk j of its row (columns 8 j .. 8 j + 7); a 4 x 4 transpose within the quad (three
// shuffles a block of four chunks) gives lane q chunk 4 b + q whole, and the quad's four 16-byte stores cover 64
// contiguous bytes: whole sectors. Stored a word at a time, as before, every sector was written in two halves
// (Nsight Compute on an H100, 8192^3: 44% of the global sectors excessive, the stores the top LSU-throttle stalls).
__device__ __forceinline__ uint32_t pick4(const uint32_t (&v)[4], int i) {
  return i == 0 ? v[0] : i == 1 ? v[1] : i == 2 ? v[2] : v[3];
}

__device__ __forceinline__ void store_tile(const float (&total)[64], __nv_bfloat16* __restrict__ c,
                                           const float* __restrict__ scale_a, const float* __restrict__ scale_b,
                                           int tm, int tn, int cw, int warp, int lane, int64_t ldc, int64_t ssa,
                                           int64_t ssb) {
  const int q = lane % 4;
  const int row0 = tm * kBM + cw * 64 + warp * 16 + lane / 4;
  const int col0 = tn * kBN + 2 * q;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int row = row0 + 8 * i;
    const float sa = __ldg(scale_a + row * ssa);
    __nv_bfloat16* crow = c + row * ldc;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      uint32_t v[4];
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int j = 4 * b + t, col = col0 + 8 * j;
        const float x = total[4 * j + 2 * i] * sa * __ldg(scale_b + col * ssb);
        const float y = total[4 * j + 2 * i + 1] * sa * __ldg(scale_b + (col + 1) * ssb);
        const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
        v[t] = *reinterpret_cast<const uint32_t*>(&h);
      }
      // round r: lane q receives, from lane q ^ r, that lane's word of chunk 4 b + q
      uint32_t got[4];
      got[0] = pick4(v, q);
#pragma unroll
      for (int r = 1; r < 4; ++r) got[r] = __shfl_xor_sync(0xffffffffu, pick4(v, q ^ r), r);
      const uint4 chunk = make_uint4(pick4(got, q), pick4(got, q ^ 1), pick4(got, q ^ 2), pick4(got, q ^ 3));
      *reinterpret_cast<uint4*>(crow + tn * kBN + 8 * (4 * b + q)) = chunk;
    }
  }
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

__device__ __forceinline__ void cluster_sync() {  // every thread of both CTAs, converged or not
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}

// the same barrier's address in the peer CTA of the cluster, arrived on from here. The arrive's default semantics
// (release at CTA scope), as CUTLASS's ClusterBarrier::arrive: what it orders is this warp's reads of the stage,
// finished at wgmma.wait_group, before the peer's multicast overwrites it. `.release.cluster` compiled to a
// fence per arrival: under Nsight Compute on an H100 the pair's top stall was a memory barrier, 48% of its cycles
// (reports/h100/README.md, fp8-ncu).
__device__ __forceinline__ void mbar_arrive_peer(uint32_t bar, uint32_t peer) {
  asm volatile(
      "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(peer)
      : "memory");
}

// rows of b to both CTAs of the cluster, at the same offset and barrier in each
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, uint32_t bar, int x,
                                                      int y, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;\n"
      ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y), "h"(mask)
      : "memory");
}

// Clusters. A 128 x 128 tile asks L2 for 32 KiB a 128-deep block, 128 FLOP a byte: at the fp8 rate more than L2
// delivers to every SM at once. Cluster 2: two CTAs take vertically adjacent tiles (same columns of b) and each
// loads half of b's 128 rows, multicast into both: b's reads from L2 are halved. Cluster 4: a 2 x 2 square of
// tiles; rank r takes row rm = r % 2 and column rn = r / 2 of it, loads half of its a tile's rows multicast to its
// row peer (rank r ^ 2, the same rows of a) and half of its b tile's rows multicast to its column peer (rank r ^ 1):
// both reads halved. A stage is written by the loads of every CTA that shares an operand with it, so it is free
// only once the consumers of all of them have released it: each consumer warp arrives on its own empty barrier and
// on each peer's.
template <int Stages, int Mode, int Cluster>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    __nv_bfloat16* __restrict__ c, const float* __restrict__ scale_a,
                    const float* __restrict__ scale_b, int M, int N, int K, int64_t ldc, int64_t ssa, int64_t ssb) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // a build for another target than sm_90a (wgmma, setmaxnreg) carries no kernel
#else
  static_assert(Cluster == 1 || Cluster == 2 || Cluster == 4, "clusters of 1, 2 or 2 x 2 CTAs");
  constexpr int CM = Cluster == 1 ? 1 : 2, CN = Cluster == 4 ? 2 : 1;  // tiles of a cluster along M and N
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  // the 128B swizzle pattern repeats every 1024 bytes: stages start on that boundary
  const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem_raw + (base - smem_addr(smem_raw)) + Stages * kStageBytes);
  const uint32_t full = smem_addr(bars), empty = full + 8 * Stages;

  const int wg = threadIdx.x / 128;
  const uint32_t rank = Cluster == 1 ? 0 : cluster_rank();
  const int rm = rank % CM, rn = rank / CM;
  // work units: CM x CN adjacent tiles, one per CTA of a cluster
  const int units_m = M / (kBM * CM), units_n = N / (kBN * CN), units = units_m * units_n, kblocks = K / kBK;
  const int first_unit = blockIdx.x / Cluster, unit_step = gridDim.x / Cluster;

  if (threadIdx.x == 0) {
    for (int s = 0; s < Stages; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, 8 * (CM + CN - 1));  // one arrival per consumer warp of this CTA and its peers
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if constexpr (Cluster == 1) __syncthreads();
  else cluster_sync();  // the peer's barriers exist before any arrival or multicast reaches them

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_a)) : "memory");
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&map_b)) : "memory");
      int stage = 0;
      uint32_t phase = 0;
      for (int unit = first_unit; unit < units; unit += unit_step) {
        int um, un;
        tile_coords(unit, units_m, units_n, um, un);
        const int tm = um * CM + rm, tn = un * CN + rn;
        for (int kb = 0; kb < kblocks; ++kb) {
          // a fresh barrier counts its (virtual) previous phase complete: the first round does not wait
          mbar_wait(empty + 8 * stage, phase ^ 1);
          const uint32_t a = base + stage * kStageBytes, bar = full + 8 * stage;
          mbar_expect_tx(bar, kStageBytes);  // all of a's and b's rows, whoever loads them
          if constexpr (CN == 1) {
            tma_load_2d(a, &map_a, bar, kb * kBK, tm * kBM);
          } else {  // half of a's rows, to this CTA and its row peer
            constexpr int half = kBM / 2;
            tma_load_2d_multicast(a + rn * half * kBK, &map_a, bar, kb * kBK, tm * kBM + rn * half,
                                  static_cast<uint16_t>((1u << rm) | (1u << (rm + CM))));
          }
          if constexpr (CM == 1) {
            tma_load_2d(a + kBM * kBK, &map_b, bar, kb * kBK, tn * kBN);
          } else {  // half of b's rows, to this CTA and its column peer
            constexpr int half = kBN / 2;
            tma_load_2d_multicast(a + kBM * kBK + rm * half * kBK, &map_b, bar, kb * kBK, tn * kBN + rm * half,
                                  static_cast<uint16_t>(0x3u << (rn * CM)));
          }
          advance<Stages>(stage, phase);
        }
      }
    }
    if constexpr (Cluster > 1) cluster_sync();
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  const int cw = wg - 1;  // this consumer's 64 rows of the tile
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const bool releaser = lane == 0;
  const uint32_t a_off = cw * 64 * kBK;
  Ring r{base, full, empty};
  float total[64], acc0[64], acc1[64];

  // waits for the current stage, issues its block into d, and steps the ring; returns the stage it used
  auto issue = [&](float(&d)[64], bool accumulate) {
    mbar_wait(r.full + 8 * r.stage, r.phase);
    if (accumulate) mma_block<true>(d, r.a() + a_off, r.b());
    else mma_block<false>(d, r.a() + a_off, r.b());
    const int used = r.stage;
    advance<Stages>(r.stage, r.phase);
    return used;
  };
  auto release = [&](int stage) {
    if (releaser) {
      mbar_arrive(r.empty + 8 * stage);
      if constexpr (CM == 2) mbar_arrive_peer(r.empty + 8 * stage, rank ^ 1);  // column peer: same b
      if constexpr (CN == 2) mbar_arrive_peer(r.empty + 8 * stage, rank ^ 2);  // row peer: same a
    }
  };

  if constexpr (Mode == kStream) {
    // One stream of blocks across this CTA's tiles: the first block of the next tile is issued before the last
    // one of the current tile is promoted, so the tile's store runs while the tensor cores work.
    const int mine = first_unit < units ? (units - first_unit + unit_step - 1) / unit_step : 0;
    const int blocks = mine * kblocks;
    int unit = first_unit, kb = 0;  // the tile and block retired next
    auto retire = [&](float(&d)[64], int stage) {
      promote(total, d);
      release(stage);
      if (++kb == kblocks) {
        int um, un;
        tile_coords(unit, units_m, units_n, um, un);
        store_tile(total, c, scale_a, scale_b, um * CM + rm, un * CN + rn, cw, warp, lane, ldc, ssa, ssb);
#pragma unroll
        for (int i = 0; i < 64; ++i) total[i] = 0.f;
        kb = 0;
        unit += unit_step;
      }
    };
    if (blocks > 0) {
#pragma unroll
      for (int i = 0; i < 64; ++i) total[i] = 0.f;
      int prev = issue(acc0, false);
      for (int g = 1;; ++g) {
        if (g == blocks) { wgmma_wait<0>(); retire(acc0, prev); break; }
        int cur = issue(acc1, false);
        wgmma_wait<1>();
        retire(acc0, prev);
        prev = cur;
        if (++g == blocks) { wgmma_wait<0>(); retire(acc1, prev); break; }
        cur = issue(acc0, false);
        wgmma_wait<1>();
        retire(acc1, prev);
        prev = cur;
      }
    }
  } else {
  for (int unit = first_unit; unit < units; unit += unit_step) {
    int um, un;
    tile_coords(unit, units_m, units_n, um, un);
    const int tm = um * CM + rm, tn = un * CN + rn;
    if constexpr (Mode != kFast) {
#pragma unroll
      for (int i = 0; i < 64; ++i) total[i] = 0.f;
    }

    if constexpr (Mode == kOverlap) {
      int prev = issue(acc0, false);
      for (int kb = 1;; ++kb) {
        if (kb == kblocks) { wgmma_wait<0>(); promote(total, acc0); release(prev); break; }
        int cur = issue(acc1, false);
        wgmma_wait<1>();  // block kb-1 (acc0) done, block kb (acc1) still on the tensor cores
        promote(total, acc0);
        release(prev);
        prev = cur;
        if (++kb == kblocks) { wgmma_wait<0>(); promote(total, acc1); release(prev); break; }
        cur = issue(acc0, false);
        wgmma_wait<1>();
        promote(total, acc1);
        release(prev);
        prev = cur;
      }
    } else if constexpr (Mode == kSerial) {
      for (int kb = 0; kb < kblocks; ++kb) {
        const int used = issue(acc0, false);
        wgmma_wait<0>();
        promote(total, acc0);
        release(used);
      }
    } else {
      int prev = issue(total, false);
      for (int kb = 1; kb < kblocks; ++kb) {
        const int cur = issue(total, true);
        wgmma_wait<1>();
        release(prev);
        prev = cur;
      }
      wgmma_wait<0>();
      fence_acc(total);
      release(prev);
    }

    store_tile(total, c, scale_a, scale_b, tm, tn, cw, warp, lane, ldc, ssa, ssb);
  }
  }
  // the peers may still arrive on this CTA's barriers until their last stage is released
  if constexpr (Cluster > 1) cluster_sync();
#endif
}

typedef CUresult (*EncodeTiled)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_fn() {  // the driver's entry point through the runtime: no link against libcuda
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess)
      p = nullptr;
#else
    if (cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &q) != cudaSuccess) p = nullptr;
#endif
    return q == cudaDriverEntryPointSuccess ? reinterpret_cast<EncodeTiled>(p) : nullptr;
  }();
  return fn;
}

// rows x k bytes with row stride ld bytes, read in boxes of box_rows x 128 (one 128-byte swizzled row each)
bool make_map(CUtensorMap* map, const void* ptr, int64_t rows, int64_t k, int64_t ld, uint32_t box_rows) {
  const EncodeTiled encode = encode_fn();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld)};
  const cuuint32_t box[2] = {kBK, box_rows};
  const cuuint32_t elem[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(ptr), dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

struct Args {
  CUtensorMap ma, mb;
  __nv_bfloat16* c;
  const float *sa, *sb;
  int M, N, K;
  int64_t ldc, ssa, ssb;
  int num_sms;
  cudaStream_t stream;
};

template <int Stages, int Mode, int Cluster>
cudaError_t launch(const Args& p) {
  constexpr int smem = Stages * kStageBytes + 1024 + 16 * Stages;  // alignment slack, then the barriers
  auto kernel = fp8_gemm_kernel<Stages, Mode, Cluster>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return err;
  constexpr int CM = Cluster == 1 ? 1 : 2, CN = Cluster == 4 ? 2 : 1;
  const int units = (p.M / (kBM * CM)) * (p.N / (kBN * CN));
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = p.stream;
  int slots = p.num_sms;  // CTAs (Cluster 1) or clusters resident at once
  if constexpr (Cluster > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = Cluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cfg.gridDim = dim3(Cluster * (p.num_sms / Cluster));
    // not every SM may take part in a cluster (GPCs of odd size): ask how many fit
    slots = p.num_sms / Cluster;
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, kernel, &cfg) == cudaSuccess && fit > 0 && fit < slots) slots = fit;
  }
  cfg.gridDim = dim3(Cluster * (units < slots ? units : slots));
  return cudaLaunchKernelEx(&cfg, kernel, p.ma, p.mb, p.c, p.sa, p.sb, p.M, p.N, p.K, p.ldc, p.ssa, p.ssb);
}

template <int Mode, int Cluster>
cudaError_t by_stages(int stages, const Args& p) {
  switch (stages) {
    case 4: return launch<4, Mode, Cluster>(p);
    case 5: return launch<5, Mode, Cluster>(p);
    case 6: return launch<6, Mode, Cluster>(p);
    default: return cudaErrorInvalidValue;
  }
}

template <int Mode>
cudaError_t by_cluster(int stages, int cluster, const Args& p) {
  return cluster == 4 ? by_stages<Mode, 4>(stages, p)
         : cluster == 2 ? by_stages<Mode, 2>(stages, p)
                        : by_stages<Mode, 1>(stages, p);
}

}  // namespace
}  // namespace kh_fp8_wgmma

// Checks what the kernel relies on (the Python launcher checks them first, with the reasons); a null return is
// success, anything else the error's text. mode: 0 overlapped promotion, 1 serial promotion, 2 no promotion,
// 3 overlapped promotion and the tile's store overlapped with the next tile's first block;
// cluster: 1, 2 (b multicast to a pair of CTAs; M a multiple of 256) or 4 (a 2 x 2 square of tiles, a and b
// multicast to pairs; M and N multiples of 256).
extern "C" const char* kh_fp8_wgmma_launch(void* c, const void* a, const void* b, const float* scale_a,
                                           const float* scale_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                                           int64_t ldb, int64_t ldc, int64_t ssa, int64_t ssb, int stages,
                                           int mode, int cluster, int num_sms, void* stream) {
  using namespace kh_fp8_wgmma;
  if (M <= 0 || N <= 0 || K <= 0 || M % kBM || N % kBN || K % kBK) return "M, N and K must be multiples of 128";
  if (M > (1 << 30) || N > (1 << 30) || K > (1 << 30)) return "M, N and K must be below 2**30";
  if (lda % 16 || ldb % 16 || ldc % 8) return "row strides must be 16-byte aligned";
  if (reinterpret_cast<uintptr_t>(a) % 16 || reinterpret_cast<uintptr_t>(b) % 16 ||
      reinterpret_cast<uintptr_t>(c) % 16)
    return "a, b and c must be 16-byte aligned";
  if (stages < 4 || stages > 6) return "stages must be 4, 5 or 6";
  if (mode < 0 || mode > 3) return "mode must be 0, 1, 2 or 3";
  if (cluster != 1 && cluster != 2 && cluster != 4) return "cluster must be 1, 2 or 4";
  const int cm = cluster == 1 ? 1 : 2, cn = cluster == 4 ? 2 : 1;
  if (M % (kBM * cm) || N % (kBN * cn)) return "clusters of 2 need M a multiple of 256, of 4 M and N too";
  if (num_sms < cluster) return "num_sms must be at least the cluster size";
  Args p;
  if (!make_map(&p.ma, a, M, K, lda, kBM / cn) || !make_map(&p.mb, b, N, K, ldb, kBN / cm))
    return "cuTensorMapEncodeTiled failed (or the driver lacks it)";
  p.c = static_cast<__nv_bfloat16*>(c);
  p.sa = scale_a;
  p.sb = scale_b;
  p.M = static_cast<int>(M);
  p.N = static_cast<int>(N);
  p.K = static_cast<int>(K);
  p.ldc = ldc;
  p.ssa = ssa;
  p.ssb = ssb;
  p.num_sms = num_sms;
  p.stream = static_cast<cudaStream_t>(stream);
  const cudaError_t err = mode == kOverlap ? by_cluster<kOverlap>(stages, cluster, p)
                          : mode == kSerial ? by_cluster<kSerial>(stages, cluster, p)
                          : mode == kFast   ? by_cluster<kFast>(stages, cluster, p)
                                            : by_cluster<kStream>(stages, cluster, p);
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
