#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

// Internal linkage for everything but the launcher: two modules built from this source in one process (two
// device architectures, a variant) must not share launch_config's function-local statics, which would otherwise
// be STB_GNU_UNIQUE symbols, unified across shared objects.
namespace kh_matmul {
namespace {

// ---- PTX wrappers -------------------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1 (L2 fetches the whole 128-byte line: a tile row of 32 elements is 64
// bytes, the next K tile's half); src_bytes 0 reads nothing and writes 16 zero bytes (the zfill form).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, register i receives it: lane l
// holds row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

#include "mma.cuh"

template <typename T> __device__ __forceinline__ float to_float(T v);
template <> __device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Two fp32 values rounded (to nearest even) into one 32-bit word, x in the low half: c[col], c[col + 1].
template <typename T> __device__ __forceinline__ uint32_t pack2(float x, float y);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float x, float y) {
  __half2 h = __floats2half2_rn(x, y);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float x, float y) {
  __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// 1 / (1 + exp(-t)); exp overflows to inf for t below about -88 and the result is 0, the right limit
__device__ __forceinline__ float sigmoid(float t) { return 1.0f / (1.0f + expf(-t)); }

// ---- the kernel ---------------------------------------------------------------------------------------------

struct Params {
  const void* a;     // [M, K], rows lda apart, K contiguous
  const void* b;     // [N, K], rows ldb apart, K contiguous (an nn.Linear weight)
  const void* bias;  // [N], bias_stride apart; read when epilogue >= 1
  void* c;           // [M, N], rows ldc apart, N contiguous
  int M, N, K;
  int64_t lda, ldb, ldc, bias_stride;
  int epilogue;  // 0 none, 1 bias, 2 bias + relu, 3 bias + gelu (tanh), 4 bias + silu
  int c_pairs;   // c[row, col] and c[row, col + 1] for even col can be stored as one 32-bit word
};

// Block tile BM x BN, K in steps of BK (32 or 64: a tile row is 64 or 128 bytes), WARPS_M x WARPS_N warps each
// computing a (BM / WARPS_M) x (BN / WARPS_N) tile with m16n8k16 MMAs, STAGES tiles of a and b in flight.
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_, int MIN_BLOCKS_>
struct Config {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int STAGES = STAGES_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // warp tile
  static constexpr int MT = WM / 16, NT = WN / 8;             // MMA tiles per warp
  static constexpr int KS = BK / 16;                          // k16 steps per K tile
  static constexpr int CPR = BK / 8;                          // 16-byte chunks per tile row
  static constexpr int ROW_STEP = THREADS / CPR;              // tile rows one pass of the block copies
  static constexpr int A_ITERS = BM / ROW_STEP, B_ITERS = BN / ROW_STEP;
  static constexpr int STAGE_BYTES = (BM + BN) * BK * 2;
  static constexpr int SMEM_BYTES = STAGES * STAGE_BYTES;
  static_assert(BK == 32 || BK == 64, "the swizzle is written for 64- and 128-byte tile rows");
  static_assert(WM % 16 == 0 && WN % 16 == 0 && KS % 2 == 0, "warp tile and k steps");
  static_assert(THREADS % CPR == 0 && BM % ROW_STEP == 0 && BN % ROW_STEP == 0, "copy passes");
  static_assert(ROW_STEP % 8 == 0, "a copy pass moves whole swizzle periods of 8 rows");
  static_assert(STAGES >= 2, "at least double buffering");
};

// Shared-memory tiles are rows of BK 16-bit elements, CPR 16-byte chunks. Chunk c of row r is stored at chunk
// c ^ f(r), f(r) in [0, CPR): the 8 rows an ldmatrix phase (or 8 consecutive copy chunks) touches then hit 8
// distinct 16-byte bank groups. 128-byte rows: f = r % 8. 64-byte rows (two per 128-byte line): f = (r / 2) % 4.
// f depends on r % 8 only; every row offset used below is r % 8 plus a multiple of 8.
template <int CPR> __device__ __forceinline__ int swizzle_term(int row) {
  return CPR == 8 ? (row & 7) : ((row >> 1) & 3);
}

// The copy without cp.async (any alignment, any K): ITERS chunks of 8 elements, chunk i from row src[i] (bit i
// of row_ok: the row exists) at column k0 + (the thread's chunk column, already in src[i]), whose first element
// is column kk of the matrix, to dst + i * STEP bytes; elements past the matrix are zeros. Every load is
// issued before the first 16-byte shared store.
template <int ITERS, int STEP, typename T>
__device__ __forceinline__ void copy_elements(unsigned char* dst, const T* const (&src)[ITERS], uint32_t row_ok,
                                              int k0, int kk, int K) {
  uint32_t w[ITERS][4];
#pragma unroll
  for (int i = 0; i < ITERS; ++i) {
    const unsigned short* s = reinterpret_cast<const unsigned short*>(src[i]) + k0;
    const bool ok = (row_ok >> i) & 1u;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t lo = ok && kk + 2 * e < K ? s[2 * e] : 0u;
      const uint32_t hi = ok && kk + 2 * e + 1 < K ? s[2 * e + 1] : 0u;
      w[i][e] = lo | (hi << 16);
    }
  }
#pragma unroll
  for (int i = 0; i < ITERS; ++i)
    *reinterpret_cast<uint4*>(dst + i * STEP) = make_uint4(w[i][0], w[i][1], w[i][2], w[i][3]);
}

template <typename T, class C, bool ASYNC>
__global__ void __launch_bounds__(C::THREADS, C::MIN_BLOCKS) gemm_kernel(const Params p) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int BM = C::BM, BN = C::BN, BK = C::BK, CPR = C::CPR, KS = C::KS, MT = C::MT, NT = C::NT;
  constexpr int STAGES = C::STAGES;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int M = p.M, N = p.N, K = p.K;

  // Grouped rasterisation: blocks that run together share a band of 8 block rows of a and walk b's block
  // columns together, so both stay in L2 while they are used.
  constexpr int GROUP_M = 8;
  const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
  const int pid = blockIdx.x;
  const int per_group = GROUP_M * tiles_n;
  const int first_m = (pid / per_group) * GROUP_M;
  const int group_rows = min(tiles_m - first_m, GROUP_M);
  const int m0 = (first_m + (pid % per_group) % group_rows) * BM;
  const int n0 = ((pid % per_group) / group_rows) * BN;

  const T* __restrict__ a = static_cast<const T*>(p.a);
  const T* __restrict__ b = static_cast<const T*>(p.b);
  const uint32_t smem_base = smem_u32(smem);

  // ---- global -> shared copies: thread tid copies chunk column ld_col of tile rows ld_row + i * ROW_STEP
  const int ld_col = tid % CPR;
  const int ld_row = tid / CPR;
  const int ld_k = ld_col * 8;
  // byte offset in a stage of this thread's first chunk of a (b: + BM * BK * 2); the others are i * ROW_STEP
  // rows further, at the same swizzled column since ROW_STEP is a multiple of 8
  const uint32_t st_off = (uint32_t)(ld_row * CPR + (ld_col ^ swizzle_term<CPR>(ld_row))) * 16u;
  const T* a_src[C::A_ITERS];
  const T* b_src[C::B_ITERS];
  uint32_t a_ok = 0, b_ok = 0;  // bit i: row i of this thread's rows exists
#pragma unroll
  for (int i = 0; i < C::A_ITERS; ++i) {
    const int r = m0 + ld_row + i * C::ROW_STEP;
    a_ok |= (r < M ? 1u : 0u) << i;
    a_src[i] = a + (r < M ? (int64_t)r * p.lda + ld_k : 0);  // a row that does not exist points at a[0, 0]
  }
#pragma unroll
  for (int i = 0; i < C::B_ITERS; ++i) {
    const int r = n0 + ld_row + i * C::ROW_STEP;
    b_ok |= (r < N ? 1u : 0u) << i;
    b_src[i] = b + (r < N ? (int64_t)r * p.ldb + ld_k : 0);
  }

  // Tile kt of a and b into stage `stage`; elements past M, N or K are zeros.
  auto load_tile = [&](int kt, int stage) {
    const int k0 = kt * BK;
    if constexpr (ASYNC) {
      const uint32_t dst = smem_base + (uint32_t)(stage * C::STAGE_BYTES) + st_off;
      // K % 8 == 0: a chunk is wholly inside K or wholly past it
      const bool k_ok = k0 + ld_k < K;
#pragma unroll
      for (int i = 0; i < C::A_ITERS; ++i) {
        const bool ok = k_ok && ((a_ok >> i) & 1u);
        cp_async_16(dst + i * C::ROW_STEP * BK * 2, ok ? (const void*)(a_src[i] + k0) : (const void*)a, ok ? 16 : 0);
      }
#pragma unroll
      for (int i = 0; i < C::B_ITERS; ++i) {
        const bool ok = k_ok && ((b_ok >> i) & 1u);
        cp_async_16(dst + BM * BK * 2 + i * C::ROW_STEP * BK * 2, ok ? (const void*)(b_src[i] + k0) : (const void*)b,
                    ok ? 16 : 0);
      }
    } else {
      constexpr int STEP = C::ROW_STEP * BK * 2;
      unsigned char* st = smem + stage * C::STAGE_BYTES + st_off;
      copy_elements<C::A_ITERS, STEP>(st, a_src, a_ok, k0, k0 + ld_k, K);
      copy_elements<C::B_ITERS, STEP>(st + BM * BK * 2, b_src, b_ok, k0, k0 + ld_k, K);
    }
  };

  // ---- shared -> registers (ldmatrix) offsets
  const int warp_m = warp / C::WARPS_N, warp_n = warp % C::WARPS_N;
  const int wm0 = warp_m * C::WM, wn0 = warp_n * C::WN;
  // a: lane l addresses row l % 16 of an m16 tile, k chunk l / 16 (matrices: rows 0-7 k0-7, rows 8-15 k0-7,
  // rows 0-7 k8-15, rows 8-15 k8-15 = the a0..a3 registers of the MMA's A fragment)
  const int a_row = wm0 + (lane & 15);
  const uint32_t a_ld_row = (uint32_t)(a_row * CPR) * 16u;
  const int a_x = (lane >> 4) ^ swizzle_term<CPR>(a_row);
  // b ([N, K] rows, k contiguous = the MMA's column-major B): lane l addresses n row (l % 8) + 8 (l / 16) of
  // a pair of n8 tiles, k chunk (l / 8) % 2 (matrices: n0-7 k0-7, n0-7 k8-15, n8-15 k0-7, n8-15 k8-15 = b0, b1
  // of the first n8 tile, then b0, b1 of the second)
  const int b_row = wn0 + (lane & 7) + ((lane >> 4) << 3);
  const uint32_t b_ld_row = (uint32_t)(BM * BK * 2) + (uint32_t)(b_row * CPR) * 16u;
  const int b_x = ((lane >> 3) & 1) ^ swizzle_term<CPR>(b_row);

  uint32_t af[2][MT][4];
  uint32_t bf[2][NT][2];
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.0f;

  // k16 step ks of the tile in `stage` into fragment buffer `buf`; the chunk of step ks is (2 ks) ^ x
  auto load_frags = [&](int buf, int stage, int ks) {
    const uint32_t base = smem_base + (uint32_t)(stage * C::STAGE_BYTES);
    const uint32_t a_addr = base + a_ld_row + (uint32_t)(((2 * ks) ^ a_x) * 16);
#pragma unroll
    for (int i = 0; i < MT; ++i) ldmatrix_x4(af[buf][i], a_addr + i * 16 * CPR * 16);
    const uint32_t b_addr = base + b_ld_row + (uint32_t)(((2 * ks) ^ b_x) * 16);
#pragma unroll
    for (int j = 0; j < NT / 2; ++j) {
      uint32_t r[4];
      ldmatrix_x4(r, b_addr + j * 16 * CPR * 16);
      bf[buf][2 * j][0] = r[0];
      bf[buf][2 * j][1] = r[1];
      bf[buf][2 * j + 1][0] = r[2];
      bf[buf][2 * j + 1][1] = r[3];
    }
  };

  const int ktiles = (K + BK - 1) / BK;
  // prologue: tiles 0 .. STAGES - 2 in flight, one commit group each (empty groups past the last tile keep
  // the count uniform: at every wait, tile t is group t)
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < ktiles) load_tile(s, s);
    cp_async_commit();
  }
  if (ktiles > 0) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    load_frags(0, 0, 0);
  }
  int read_stage = 0, write_stage = STAGES - 1;
#pragma unroll 1
  for (int kt = 0; kt < ktiles; ++kt) {
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      if (ks == KS - 1) {
        // tile kt + 1 has landed (STAGES - 2 younger groups may still be in flight), and every warp is past
        // its reads of tile kt - 1's stage, which the copy issued at ks == 0 below overwrites
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        read_stage = read_stage + 1 == STAGES ? 0 : read_stage + 1;
      }
      // the next step's fragments (the next tile's first at the last step) load while this step's MMAs run
      if (ks < KS - 1 || kt + 1 < ktiles) load_frags((ks + 1) & 1, read_stage, (ks + 1) % KS);
      if (ks == 0) {
        if (kt + STAGES - 1 < ktiles) load_tile(kt + STAGES - 1, write_stage);
        cp_async_commit();
        write_stage = write_stage + 1 == STAGES ? 0 : write_stage + 1;
      }
#pragma unroll
      for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int jj = (i & 1) ? NT - 1 - j : j;  // serpentine: consecutive MMAs share a fragment
          Mma<T>::run(acc[i][jj], af[ks & 1][i], bf[ks & 1][jj][0], bf[ks & 1][jj][1]);
        }
    }
  }
  cp_async_wait<0>();

  // ---- epilogue: bias and activation in fp32, one rounding to T, masked stores
  // lane l holds rows l / 4 and l / 4 + 8, columns 2 (l % 4) and 2 (l % 4) + 1 of each m16 x n8 tile
  T* __restrict__ c = static_cast<T*>(p.c);
  const T* __restrict__ bias = static_cast<const T*>(p.bias);
  const int epi = p.epilogue;
  const int row0 = m0 + wm0 + (lane >> 2);
  const int col0 = n0 + wn0 + 2 * (lane & 3);
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = col0 + j * 8;
    float b0 = 0.0f, b1 = 0.0f;
    if (epi >= 1) {
      if (col < N) b0 = to_float(bias[(int64_t)col * p.bias_stride]);
      if (col + 1 < N) b1 = to_float(bias[(int64_t)(col + 1) * p.bias_stride]);
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + i * 16 + h * 8;
        float x = acc[i][j][2 * h] + b0;
        float y = acc[i][j][2 * h + 1] + b1;
        if (epi == 2) {
          x = x < 0.0f ? 0.0f : x;
          y = y < 0.0f ? 0.0f : y;
        } else if (epi == 3) {
          // gelu, tanh approximation: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
          x = x * sigmoid(1.5957691216057308f * (x + 0.044715f * x * x * x));
          y = y * sigmoid(1.5957691216057308f * (y + 0.044715f * y * y * y));
        } else if (epi == 4) {
          x = x * sigmoid(x);
          y = y * sigmoid(y);
        }
        if (row < M) {
          T* dst = c + (int64_t)row * p.ldc + col;
          if (p.c_pairs && col + 1 < N) {
            *reinterpret_cast<uint32_t*>(dst) = pack2<T>(x, y);
          } else {
            if (col < N) dst[0] = from_float<T>(x);
            if (col + 1 < N) dst[1] = from_float<T>(y);
          }
        }
      }
    }
  }
}

// Configs, by the index the launcher's `config` takes. Timed on an H200 (bf16, cp.async path), each forced: 1 was
// faster than 0 at 4096^3 and 4096 x 14336 x 4096, about even at 8192^3 and slower at 4096 x 4096 x 14336;
// 2 was the fastest at 128 x 14336 x 4096 and 3 at 16 x 14336 x 4096.
using ConfigLarge = Config<128, 256, 32, 2, 4, 4, 1>;     // 0: 8 warps of 64 x 64, 96 KiB
using ConfigLargeDual = Config<128, 128, 32, 2, 2, 4, 2>; // 1: 4 warps of 64 x 64, 64 KiB, two blocks per SM
using ConfigMedium = Config<128, 128, 32, 2, 4, 4, 1>;    // 2: 8 warps of 64 x 32, 64 KiB
using ConfigSmall = Config<64, 64, 64, 2, 2, 4, 2>;       // 3: 4 warps of 32 x 32, 64 KiB

template <typename T, class C, bool ASYNC> cudaError_t launch_config(const Params& p, cudaStream_t stream) {
  const int64_t tiles = (int64_t)((p.M + C::BM - 1) / C::BM) * ((p.N + C::BN - 1) / C::BN);
  if (tiles > 2147483647) return cudaErrorInvalidValue;
  auto kernel = gemm_kernel<T, C, ASYNC>;
  // the opt-in above 48 KiB of dynamic shared memory, once per device (setting it twice is harmless)
  static bool configured[64] = {};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  if (device < 0 || device >= 64 || !configured[device]) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM_BYTES);
    if (err != cudaSuccess) return err;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    if (err != cudaSuccess) return err;
    if (device >= 0 && device < 64) configured[device] = true;
  }
  kernel<<<(unsigned)tiles, C::THREADS, C::SMEM_BYTES, stream>>>(p);
  return cudaGetLastError();
}

// config -1 picks by shape: 0 for long K (its larger tile reuses more per k step), else 1 while its tiles cover
// every SM, 2 while at least half of the SMs get a tile and M fills most of its rows, else 3. The element-by-
// element copy (not ASYNC) runs 2 for 0 and 1: with 64 x 64 warp tiles its staging registers spill.
template <typename T, bool ASYNC>
cudaError_t launch_path(const Params& p, int config, int num_sms, cudaStream_t s) {
  if (config < 0) {
    const auto tiles = [&](int bm, int bn) { return (int64_t)((p.M + bm - 1) / bm) * ((p.N + bn - 1) / bn); };
    config = p.K >= 8192 && tiles(ConfigLarge::BM, ConfigLarge::BN) >= num_sms             ? 0
             : tiles(ConfigLargeDual::BM, ConfigLargeDual::BN) >= num_sms                   ? 1
             : p.M >= 64 && 2 * tiles(ConfigMedium::BM, ConfigMedium::BN) >= num_sms ? 2
                                                                                     : 3;
  }
  if constexpr (ASYNC) {
    if (config == 0) return launch_config<T, ConfigLarge, true>(p, s);
    if (config == 1) return launch_config<T, ConfigLargeDual, true>(p, s);
  }
  return config <= 2 ? launch_config<T, ConfigMedium, ASYNC>(p, s) : launch_config<T, ConfigSmall, ASYNC>(p, s);
}

template <typename T> cudaError_t launch(Params p, int config, int num_sms, cudaStream_t s) {
  // cp.async copies 16 bytes (8 elements): K, both row strides and both base pointers must allow it. A single
  // row's stride is never used.
  const bool fast = p.K % 8 == 0 && (p.M == 1 || p.lda % 8 == 0) && (p.N == 1 || p.ldb % 8 == 0) &&
                    ((uintptr_t)p.a | (uintptr_t)p.b) % 16 == 0;
  p.c_pairs = (p.M == 1 || p.ldc % 2 == 0) && (uintptr_t)p.c % 4 == 0;
  return fast ? launch_path<T, true>(p, config, num_sms, s) : launch_path<T, false>(p, config, num_sms, s);
}

}  // namespace
}  // namespace kh_matmul

// dtype: 1 half, 2 bfloat16. a [M, K], b [N, K], c [M, N] have contiguous rows. Returns null or an error message.
extern "C" const char* kh_matmul_launch(int dtype, void* c, const void* a, const void* b, const void* bias,
                                        int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc,
                                        int64_t bias_stride, int epilogue, int config, int num_sms, void* stream) {
  if (M <= 0 || N <= 0) return nullptr;
  if (M >= 2147483647 - 256 || N >= 2147483647 - 256 || K >= 2147483647 - 256 || K < 0)
    return "M, N and K must be below 2**31 - 257";
  if (epilogue < 0 || epilogue > 4) return "epilogue must be 0..4";
  if (config < -1 || config > 3) return "config must be -1 (by shape) or 0..3";
  kh_matmul::Params p;
  p.a = a;
  p.b = b;
  p.bias = bias;
  p.c = c;
  p.M = (int)M;
  p.N = (int)N;
  p.K = (int)K;
  p.lda = lda;
  p.ldb = ldb;
  p.ldc = ldc;
  p.bias_stride = bias_stride;
  p.epilogue = epilogue;
  p.c_pairs = 0;
  const cudaStream_t s = (cudaStream_t)stream;
  const int sms = num_sms > 0 ? num_sms : 1;
  cudaError_t err;
  switch (dtype) {
    case 1: err = kh_matmul::launch<__half>(p, config, sms, s); break;
    case 2: err = kh_matmul::launch<__nv_bfloat16>(p, config, sms, s); break;
    default: return "unsupported dtype code";
  }
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
