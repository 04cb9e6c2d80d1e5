#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include <atomic>

// Weight-only int4 decode GEMM on the tensor cores: c[M, N] = a[M, K] @ dequant(w)[N, K].T for M <= 16
// (kernels/int4_cuda.py says when it is used and why). Operands are swapped: w is mma.sync's A operand (16 rows
// of N a tile), a the B operand (its 8 columns are rows of a: one tile for M <= 8, two for M <= 16).
//
// No weight is ever shuffled. A thread of a warp holds, for each row of its tile's pair (lane / 4, lane / 4 + 8),
// the same four consecutive 32-bit words of w (16 bytes: lanes 4r .. 4r + 3 read one row's 64-byte group). Marlin's
// bit trick turns a word into four registers of two values, nibbles (i, i + 4), and those registers are fed to
// mma.sync as they are: the MMA's k order within a tile is a relabelling the B operand can follow, because A's
// and B's fragments give a lane the same k slots (2 (lane % 4) + {0, 1, 8, 9}). So each lane permutes its own
// activations (two prmt per register) to the weights' nibble order instead.
//
// Dequantisation as the Triton kernels do it (kernels/int4_dequant.py): lop3 puts nibbles i and i + 4 under the
// exponent of 2**E (128 in bf16, 1024 in fp16, whose ulp is 1), one fma subtracts 2**E + z exactly, one fma
// multiplies by the scale: the one rounding, as the reference rounds (q - z) * s. Products with a and their sums
// are the tensor core's, in fp32.
//
// K is split across the block's warps (warp i takes groups i, i + W, ...), whose partial tiles are summed through
// shared memory in warp order, and where N alone gives too few blocks, across blocks too (the kernel's comment
// says how): deterministic either way, in one launch, with no floating-point atomics.
//
// How a warp's next groups get to it. The register path (STAGES = 0) loads the next D groups (1 or 2) into registers:
// at most about 2 KB of w in flight a warp, so with two blocks of eight warps an SM keeps about 32 KB of its DRAM reads
// in flight, and each warp walks its groups through several dependent round trips; the kernel took the same time on an
// H100 and an H200 (Nsight Compute on the H100: 29.6% of DRAM bandwidth at 22.5% occupancy, 1 x 4096 x 4096; 0.93
// eligible warps a scheduler, 7.8 cycles between a warp's instructions, SMs active 71% of the kernel's cycles). A third
// group in registers was slower at every decode shape (its loads alone 9.76 us against 7.14), and so was a ring of
// groups a warp in shared memory filled by cp.async, 16 bytes a lane (1.4 to 2.2 times the register path's time).
// The bulk ring (STAGES = 2, 3 or 4, sm_90 on) moves the weights' loads out of the computing warps altogether: a
// ring of STAGES slots a block, each slot one stage of K (W groups: every computing warp's next group) for the
// block's RT 16 rows, filled by one producer warp whose lanes issue one cp.async.bulk a row (W 64 contiguous bytes of
// it, one instruction) and complete on the slot's mbarrier. Up to STAGES x RT x W KB of w are in flight a block from
// the first cycle (32 KB at four slots of eight warps), at no instruction cost to the warps that compute. A computing
// warp waits on the slot's full barrier, reads its group's 16-byte pieces into the register path's Stage (the same
// layout, so the dequantisation, the MMAs and the reduction are the same code), arrives on the slot's empty barrier
// and computes while the producer refills the slot. Activations, scales and zero points (small, or cached in L2:
// every block reads the same a) are loaded by the computing warps one stage ahead, in registers. A slot's rows are
// W 64 + 64 bytes apart, so the two rows eight lanes read at once fall on opposite halves of the banks.
// Measured on an H100 (reports/h100/experiments/int4-bulk/): right at all 176 checks, and no faster than the register
// path: 8.78 us at 1 x 4096 x 4096 against 8.70 (four slots of eight warps), 0.85-0.92x its speed at the 14336 shapes;
// its loads alone took 7.52 us against the register path's 7.17. The launcher keeps the register path.
//
// The preload (PRE, register path only). On an H100 the register path's loads alone took 7.23 us at 1 x 4096 x 4096
// where a loads-only kernel reading the weight as it does took 6.05 (reports/h100/experiments/read-pattern/): about
// 1.2 us goes to what each lane loads beside the weight, its rows' scales and zero points (four lanes load the same
// ones) and its activations, every group, through the same queue as the weight's loads and into registers that
// every group in flight holds (94 registers a thread: two blocks of eight warps an SM). With PRE the block first
// copies, coalesced, its rows' scales and zero points and the activations of its groups into shared memory (its
// first groups' weight loads already in flight); a warp then carries only the weight in flight and reads the rest
// from shared memory just before it computes a group. What it costs: the copy before the first group, and shared
// memory (M rows of the block's K, so the launcher refuses it where it does not fit).

namespace kh_int4 {
namespace {

#include "mma.cuh"

constexpr int kGroup = 128;  // values of k per scale and zero point

template <typename T> struct Num;
template <> struct Num<__nv_bfloat16> {
  static constexpr uint32_t kMagic = 0x43004300u;  // 128.0 twice
  static constexpr uint32_t kOne = 0x3F803F80u;    // 1.0 twice
  static constexpr float kBias = 128.0f;
  static __device__ __forceinline__ uint32_t fma2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
  }
  static __device__ __forceinline__ uint16_t bits(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
};
template <> struct Num<__half> {
  static constexpr uint32_t kMagic = 0x64006400u;  // 1024.0 twice
  static constexpr uint32_t kOne = 0x3C003C00u;
  static constexpr float kBias = 1024.0f;
  static __device__ __forceinline__ uint32_t fma2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
  }
  static __device__ __forceinline__ uint16_t bits(float x) { return __half_as_ushort(__float2half_rn(x)); }
};

__device__ __forceinline__ uint32_t nibbles_under(uint32_t x, uint32_t magic) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(x), "n"(0x000F000F), "r"(magic));  // (x & m) | magic
  return r;
}

// Word x -> p[i] = ((q_i - z) s, (q_{i+4} - z) s), each rounded once. s2: the scale twice; nz2: -(2**E + z) twice.
template <typename T>
__device__ __forceinline__ void dequant(uint32_t x, uint32_t s2, uint32_t nz2, uint32_t (&p)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = Num<T>::fma2(nibbles_under(x >> (4 * i), Num<T>::kMagic), Num<T>::kOne, nz2);
    p[i] = Num<T>::fma2(v, s2, 0x80008000u);  // + -0.0: the product alone, its sign kept
  }
}

struct Params {
  const void* a;
  const uint8_t* w;
  const void* scales;
  const uint8_t* zeros;
  void* c;
  float* ws;  // split partials [splits, blocks, RT * NT * 128]
  int* cnt;   // one ticket counter a block column, zero between launches
  int M, N, K;
  int64_t lda, ldw, ss_n, ss_g, sz_n, sz_g, sc_m, sc_n;
};

// What one lane loads for one group: per row tile, its two rows' 16 bytes of w, scale and zero point; per column
// tile, its 32 values of a (its row of a, k = 128 g + 32 (lane % 4) + 0 .. 31).
template <int RT, int NT> struct Stage {
  uint4 w[RT][2];
  uint16_t s[RT][2];
  uint8_t z[RT][2];
  uint4 a[NT][4];
};

// The bulk ring's synchronisation and copies (PTX of sm_90: mbarrier transaction counts, cp.async.bulk).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(smem_addr(bar)), "r"(parity)
                 : "memory");
}
// bytes: a multiple of 16, as both addresses are
__device__ __forceinline__ void bulk_copy(unsigned char* dst, const void* src, int bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}
#endif

// A bulk ring slot's row pitch: W groups of 64 bytes, and 64 more so that rows r and r + 1 start on opposite halves
// of the 32 banks (a quarter-warp's 128 bytes are two rows' 64: no conflict). Shared memory a block takes: the
// slots, then the warps' partial tiles (W x RT x NT x 128 fp32).
__host__ __device__ __forceinline__ int bulk_pitch(int warps) { return warps * 64 + 64; }
__host__ __device__ __forceinline__ int block_smem_bytes(int warps, int row_tiles, int col_tiles, int stages) {
  return stages * row_tiles * 16 * bulk_pitch(warps) + warps * row_tiles * col_tiles * 128 * (int)sizeof(float);
}

// A lane's scales, zero points and activations for group g (g < 0 or past K: zero activations, so the group adds 0)
template <int RT, int NT>
__device__ __forceinline__ bool load_meta(Stage<RT, NT>& st, const Params& p, int g, int n0, int lane) {
  const int r = lane >> 2, q = lane & 3;
  const int k0 = g * kGroup + q * 32;
  const bool k_ok = g >= 0 && k0 < p.K;  // K % 32 == 0: a lane's 32 values are all in range or all out
  const int gg = g < 0 ? 0 : g;
#pragma unroll
  for (int t = 0; t < RT; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = min(n0 + t * 16 + r + 8 * h, p.N - 1);  // a row past N reads row N - 1; never stored
      st.s[t][h] = __ldg(reinterpret_cast<const uint16_t*>(p.scales) + n * p.ss_n + gg * p.ss_g);
      st.z[t][h] = __ldg(p.zeros + n * p.sz_n + gg * p.sz_g);
    }
  }
#pragma unroll
  for (int u = 0; u < NT; ++u) {
    const int m = u * 8 + r;
    const bool ok = k_ok && m < p.M;  // B columns past M multiply by 0
    const uint4* src = reinterpret_cast<const uint4*>(reinterpret_cast<const uint16_t*>(p.a) + m * p.lda + k0);
#pragma unroll
    for (int j = 0; j < 4; ++j) st.a[u][j] = ok ? __ldg(src + j) : make_uint4(0, 0, 0, 0);
  }
  return k_ok;
}

// A lane's 16 bytes of w for each of its rows, group g (g < 0 or past K: zeros)
template <int RT, int NT>
__device__ __forceinline__ void load_w(Stage<RT, NT>& st, const Params& p, int g, int n0, int lane) {
  const int r = lane >> 2;
  const int k0 = g * kGroup + (lane & 3) * 32;
  const bool k_ok = g >= 0 && k0 < p.K;  // as load_meta's
#pragma unroll
  for (int t = 0; t < RT; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = min(n0 + t * 16 + r + 8 * h, p.N - 1);
      st.w[t][h] = k_ok ? __ldcs(reinterpret_cast<const uint4*>(p.w + n * p.ldw + k0 / 2)) : make_uint4(0, 0, 0, 0);
    }
  }
}

template <typename T, int RT, int NT>
__device__ __forceinline__ void load_stage(Stage<RT, NT>& st, const Params& p, int g, int n0, int lane) {
  load_w<RT, NT>(st, p, g, n0, lane);  // w first: the order the register path was tuned with
  load_meta<RT, NT>(st, p, g, n0, lane);
}

// The preload's shared memory (after the ring's slots and the partial tiles): each of the block's RT 16 rows' scale
// and zero point a slot, one word (scale | zero << 16), rows slots + 1 words apart (an odd pitch where slots is even:
// the eight rows a load reads at once fall in distinct banks); then M rows of activations, 128 values a slot, rows
// slots x 256 + 16 bytes apart. Slot i of split y is group (i / W) S W + y W + i % W: warp i % W's (i / W)-th.
__host__ __device__ __forceinline__ int pre_slots(int groups, int warps, int splits) {
  return (groups + splits * warps - 1) / (splits * warps) * warps;
}
__host__ __device__ __forceinline__ int pre_meta_bytes(int row_tiles, int slots) {
  return row_tiles * 16 * (slots + 1) * 4;  // a multiple of 64: the activations after it stay 16-byte aligned
}
__host__ __device__ __forceinline__ int pre_a_pitch(int slots) { return slots * 256 + 16; }
__host__ __device__ __forceinline__ int pre_bytes(int m, int row_tiles, int slots) {
  return pre_meta_bytes(row_tiles, slots) + m * pre_a_pitch(slots);
}

// The whole block copies its rows' scales and zero points and a's values for its slots into the preload's memory
// (a group past K: zeros; its w was loaded as zeros too)
template <int RT>
__device__ __forceinline__ void preload(const Params& p, unsigned char* pre, int slots, int warps, int n0, int groups) {
  const int y = blockIdx.y, sw = gridDim.y * warps;
  const auto group_of = [&](int slot) { return (slot / warps) * sw + y * warps + slot % warps; };
  uint32_t* sz = reinterpret_cast<uint32_t*>(pre);
  for (int i = threadIdx.x; i < RT * 16 * slots; i += blockDim.x) {
    const int row = i / slots, slot = i % slots;
    const int g = min(group_of(slot), groups - 1);
    const int n = min(n0 + row, p.N - 1);  // a row past N reads row N - 1; never stored
    const uint32_t s = __ldg(reinterpret_cast<const uint16_t*>(p.scales) + n * p.ss_n + g * p.ss_g);
    const uint32_t z = __ldg(p.zeros + n * p.sz_n + g * p.sz_g);
    sz[row * (slots + 1) + slot] = s | (z << 16);
  }
  unsigned char* as = pre + pre_meta_bytes(RT, slots);
  const int pieces = slots * 16;  // 16 bytes (8 values) a piece, 16 a slot
  for (int i = threadIdx.x; i < p.M * pieces; i += blockDim.x) {
    const int m = i / pieces, slot = (i % pieces) / 16, piece = i % 16;
    const int g = group_of(slot), k = g * kGroup + piece * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (g < groups && k < p.K)  // K % 32 == 0: a piece is all in range or all out
      v = __ldg(reinterpret_cast<const uint4*>(reinterpret_cast<const uint16_t*>(p.a) + m * p.lda + k));
    *reinterpret_cast<uint4*>(as + m * pre_a_pitch(slots) + slot * 256 + piece * 16) = v;
  }
}

// load_meta's values for group g, in slot ``slot`` of the preload, read from shared memory
template <int RT, int NT>
__device__ __forceinline__ void load_meta_pre(Stage<RT, NT>& st, const Params& p, const unsigned char* pre, int slots,
                                              int g, int groups, int slot, int lane) {
  const int r = lane >> 2, q = lane & 3;
  const bool k_ok = g < groups && g * kGroup + q * 32 < p.K;
  const uint32_t* sz = reinterpret_cast<const uint32_t*>(pre);
#pragma unroll
  for (int t = 0; t < RT; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t v = k_ok ? sz[(t * 16 + r + 8 * h) * (slots + 1) + slot] : 0u;
      st.s[t][h] = (uint16_t)(v & 0xFFFFu);
      st.z[t][h] = (uint8_t)(v >> 16);
    }
  }
  const unsigned char* as = pre + pre_meta_bytes(RT, slots) + slot * 256 + q * 64;
#pragma unroll
  for (int u = 0; u < NT; ++u) {
    const int m = u * 8 + r;
    const bool ok = k_ok && m < p.M;  // B columns past M multiply by 0
    const uint4* src = reinterpret_cast<const uint4*>(as + m * pre_a_pitch(slots));
#pragma unroll
    for (int j = 0; j < 4; ++j) st.a[u][j] = ok ? src[j] : make_uint4(0, 0, 0, 0);
  }
}

#if defined(KH_INT4_FLOOR)
// A probe's floors (reports/h200/experiments/int4/cuda/int4_cuda_probe.py compiles this source again with
// KH_INT4_FLOOR defined; the backend never does): the same loads, grid and reduction with the work per group
// replaced. 1: every loaded word XORed into one accumulator (the loads alone). 2: the dequantisation kept, its
// registers XORed in instead of multiplied (the loads and the dequantisation, no MMA). The result is garbage.
template <typename T, int RT, int NT>
__device__ __forceinline__ void mma_stage(float (&acc)[RT][NT][4], const Stage<RT, NT>& st) {
  uint32_t x = 0;
#pragma unroll
  for (int t = 0; t < RT; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 w = st.w[t][h];
      x ^= ((uint32_t)st.s[t][h] << 8) ^ st.z[t][h];
      if (KH_INT4_FLOOR == 1) {
        x ^= w.x ^ w.y ^ w.z ^ w.w;
      } else {
        const uint32_t s2 = (uint32_t)st.s[t][h] * 0x10001u;
        const uint32_t nz2 = (uint32_t)Num<T>::bits(-(Num<T>::kBias + (float)st.z[t][h])) * 0x10001u;
        const uint32_t* ws = reinterpret_cast<const uint32_t*>(&w);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t p[4];
          dequant<T>(ws[j], s2, nz2, p);
          x ^= p[0] ^ p[1] ^ p[2] ^ p[3];
        }
      }
    }
  }
#pragma unroll
  for (int u = 0; u < NT; ++u)
#pragma unroll
    for (int j = 0; j < 4; ++j) x ^= st.a[u][j].x ^ st.a[u][j].y ^ st.a[u][j].z ^ st.a[u][j].w;
  acc[0][0][0] += __uint_as_float(x & 0x007FFFFFu);  // a subnormal: no inf or NaN in the partial sums
}
#else
// B fragments for word j of the weights: values k = 8j + {0, 4}, {1, 5} (first MMA) and {2, 6}, {3, 7} (second),
// as the dequantised pairs hold them
__device__ __forceinline__ void b_frags(const uint4 v, uint32_t (&b)[4]) {
  b[0] = __byte_perm(v.x, v.z, 0x5410);
  b[1] = __byte_perm(v.x, v.z, 0x7632);
  b[2] = __byte_perm(v.y, v.w, 0x5410);
  b[3] = __byte_perm(v.y, v.w, 0x7632);
}

// One word of a row tile's two rows (lo: lane / 4, hi: lane / 4 + 8), its four registers of pairs each, into every
// column tile: two MMAs of k 16 each.
template <typename T, int NT>
__device__ __forceinline__ void mma_word(float (&acc)[NT][4], const uint32_t (&lo)[4], const uint32_t (&hi)[4],
                                         const uint32_t (&b)[NT][4]) {
  const uint32_t a0[4] = {lo[0], hi[0], lo[1], hi[1]};
  const uint32_t a1[4] = {lo[2], hi[2], lo[3], hi[3]};
#pragma unroll
  for (int u = 0; u < NT; ++u) {
    Mma<T>::run(acc[u], a0, b[u][0], b[u][1]);
    Mma<T>::run(acc[u], a1, b[u][2], b[u][3]);
  }
}

template <typename T, int RT, int NT>
__device__ __forceinline__ void mma_stage(float (&acc)[RT][NT][4], const Stage<RT, NT>& st) {
  uint32_t s2[RT][2], nz2[RT][2];
#pragma unroll
  for (int t = 0; t < RT; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      s2[t][h] = (uint32_t)st.s[t][h] * 0x10001u;
      const uint16_t nz = Num<T>::bits(-(Num<T>::kBias + (float)st.z[t][h]));  // exact
      nz2[t][h] = (uint32_t)nz * 0x10001u;
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t b[NT][4];
#pragma unroll
    for (int u = 0; u < NT; ++u) b_frags(st.a[u][j], b[u]);
#pragma unroll
    for (int t = 0; t < RT; ++t) {
      uint32_t lo[4], hi[4];  // rows lane / 4 and lane / 4 + 8
      const uint32_t* wl = reinterpret_cast<const uint32_t*>(&st.w[t][0]);
      const uint32_t* wh = reinterpret_cast<const uint32_t*>(&st.w[t][1]);
      dequant<T>(wl[j], s2[t][0], nz2[t][0], lo);
      dequant<T>(wh[j], s2[t][1], nz2[t][1], hi);
      mma_word<T, NT>(acc[t], lo, hi, b);
    }
  }
}

#endif  // KH_INT4_FLOOR

// Block: W computing warps on RT tiles of 16 rows of w; with S splits (gridDim.y), warp i of split y takes groups
// y W + i, y W + i + S W, ..., the next D groups' loads in flight while it computes one (STAGES = 0), or the bulk
// ring's stages y, y + S, ... of W groups each, warp i group i of each (the same groups), with one more warp, the
// producer, filling the ring. The computing warps' partial tiles are summed in shared memory (dynamic, after the ring's
// slots: W tiles of RT * NT * 128 fp32; the preload's memory follows them) in warp order. With S > 1 each split then
// writes its tile to the workspace and takes a ticket; the split drawing the last one sums the S tiles in split order,
// writes c and resets the counter (as kernels/splitk.py does for the Triton kernels): deterministic, one launch. At
// most 8 computing warps: the register cap of a larger block made the 2 x 2 tile spill. Minimum blocks an SM 0,
// ptxas's own choice: an explicit 1 made it take up to 50% more registers.
template <typename T, int RT, int NT, int D, int STAGES, bool PRE>
__global__ void __launch_bounds__(STAGES > 0 ? 288 : 256, 0) int4_gemv_mma(Params p) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ int last;
  constexpr int kTile = RT * NT * 128;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x >> 5) - (STAGES > 0);
  const int n0 = blockIdx.x * RT * 16;
  const int groups = (p.K + kGroup - 1) / kGroup;
  const int first = blockIdx.y * warps + warp, stride = gridDim.y * warps;
  float* part = reinterpret_cast<float*>(smem + STAGES * RT * 16 * bulk_pitch(warps));
  float acc[RT][NT][4] = {};
  if constexpr (STAGES == 0) {
    Stage<RT, NT> st[D];
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int g = first + d * stride;
      if constexpr (PRE)
        load_w<RT, NT>(st[d], p, g < groups ? g : -1, n0, lane);
      else
        load_stage<T, RT, NT>(st[d], p, g < groups ? g : -1, n0, lane);
    }
    // the preload after the first groups' weight loads are issued: its copy runs while they are in flight
    unsigned char* pre = reinterpret_cast<unsigned char*>(part + warps * kTile);
    const int slots = PRE ? pre_slots(groups, warps, gridDim.y) : 0;
    if constexpr (PRE) {
      preload<RT>(p, pre, slots, warps, n0, groups);
      __syncthreads();
    }
    int slot = warp;  // the preload's slot of the group computed next: the warp's t-th group is slot t W + warp
    for (int g = first; g < groups; g += D * stride) {
#pragma unroll
      for (int d = 0; d < D; ++d) {
        // a group past the end was loaded as zeros (w and a): its MMAs add nothing
        const int ahead = g + (d + D) * stride;
        Stage<RT, NT> next;
        if constexpr (PRE) {
          load_w<RT, NT>(next, p, ahead < groups ? ahead : -1, n0, lane);
          load_meta_pre<RT, NT>(st[d], p, pre, slots, g + d * stride, groups, slot, lane);
          slot += warps;
        } else {
          load_stage<T, RT, NT>(next, p, ahead < groups ? ahead : -1, n0, lane);
        }
        mma_stage<T, RT, NT>(acc, st[d]);
        st[d] = next;
      }
    }
  } else {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    // Fill t of this split (its stage j = y + t S) goes to slot t % STAGES: the full barrier's phase t / STAGES
    // completes when the slot's bytes have landed, the empty barrier's when every computing warp has read it.
    __shared__ __align__(8) uint64_t full[STAGES], empty[STAGES];
    const int stages = (groups + warps - 1) / warps, pitch = bulk_pitch(warps), slot = RT * 16 * pitch;
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) {
        mbar_init(&full[i], 1);
        mbar_init(&empty[i], warps);
      }
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    if (warp == warps) {  // the producer: lane r copies row n0 + r of each stage
      int t = 0;
      for (int j = blockIdx.y; j < stages; j += gridDim.y, ++t) {
        const int i = t % STAGES;
        if (t >= STAGES) mbar_wait(&empty[i], (t / STAGES - 1) & 1);
        const int k0 = j * warps * kGroup;
        const int bytes = min(warps * kGroup, p.K - k0) / 2;  // K % 32 == 0: a multiple of 16
        if (lane == 0) mbar_expect_tx(&full[i], bytes * RT * 16);
        __syncwarp();
        if (lane < RT * 16) {
          const int n = min(n0 + lane, p.N - 1);  // a row past N copies row N - 1; never stored
          bulk_copy(smem + i * slot + lane * pitch, p.w + (int64_t)n * p.ldw + k0 / 2, bytes, &full[i]);
        }
      }
    } else {
      const int r = lane >> 2, q = lane & 3;
      Stage<RT, NT> cur;
      bool ok = load_meta<RT, NT>(cur, p, first < groups ? first : -1, n0, lane);
      int t = 0;
      for (int j = blockIdx.y; j < stages; j += gridDim.y, ++t) {
        const int i = t % STAGES;
        const int ahead = first + (t + 1) * stride;
        Stage<RT, NT> next;
        const bool next_ok = load_meta<RT, NT>(next, p, ahead < groups ? ahead : -1, n0, lane);
        mbar_wait(&full[i], (t / STAGES) & 1);
        const unsigned char* row = smem + i * slot + r * pitch + warp * 64 + q * 16;
#pragma unroll
        for (int tt = 0; tt < RT; ++tt)
#pragma unroll
          for (int h = 0; h < 2; ++h)  // past K the slot holds stale bytes: zeros instead, as the register path's
            cur.w[tt][h] =
                ok ? *reinterpret_cast<const uint4*>(row + (tt * 16 + 8 * h) * pitch) : make_uint4(0, 0, 0, 0);
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[i]);
        mma_stage<T, RT, NT>(acc, cur);
        cur = next;
        ok = next_ok;
      }
    }
#else
    __trap();  // the launcher refuses the bulk ring below sm_90
#endif
  }
  if (warp < warps) {
    float* mine = part + warp * kTile;
#pragma unroll
    for (int t = 0; t < RT; ++t)
#pragma unroll
      for (int u = 0; u < NT; ++u)
#pragma unroll
        for (int i = 0; i < 4; ++i) mine[(t * NT + u) * 128 + lane * 4 + i] = acc[t][u][i];
  }
  __syncthreads();
  // one output a thread: row R of tile t, column C of tile u, held by lane (R % 8) * 4 + C / 2 in register
  // (R / 8) * 2 + C % 2 of every warp
  const int splits = gridDim.y;
  float* tiles = p.ws + (size_t)blockIdx.x * kTile;
  const size_t split_stride = (size_t)gridDim.x * kTile;
  for (int o = threadIdx.x; o < kTile; o += blockDim.x) {
    const int tu = o / 128, R = (o % 128) / 8, C = o % 8;
    const int n = n0 + (tu / NT) * 16 + R, m = (tu % NT) * 8 + C;
    if (n >= p.N || m >= p.M) continue;
    const int slot = tu * 128 + ((R % 8) * 4 + C / 2) * 4 + (R / 8) * 2 + C % 2;
    float sum = 0.0f;
    for (int i = 0; i < warps; ++i) sum += part[i * kTile + slot];
    if (splits == 1)
      reinterpret_cast<uint16_t*>(p.c)[m * p.sc_m + n * p.sc_n] = Num<T>::bits(sum);
    else
      tiles[blockIdx.y * split_stride + o] = sum;
  }
  if (splits == 1) return;
  __threadfence();  // this split's tile visible to whichever split draws the last ticket
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(p.cnt + blockIdx.x, 1) == splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int o = threadIdx.x; o < kTile; o += blockDim.x) {
    const int tu = o / 128, R = (o % 128) / 8, C = o % 8;
    const int n = n0 + (tu / NT) * 16 + R, m = (tu % NT) * 8 + C;
    if (n >= p.N || m >= p.M) continue;
    float sum = 0.0f;
    for (int y = 0; y < splits; ++y) sum += __ldcg(tiles + y * split_stride + o);
    reinterpret_cast<uint16_t*>(p.c)[m * p.sc_m + n * p.sc_n] = Num<T>::bits(sum);
  }
  if (threadIdx.x == 0) p.cnt[blockIdx.x] = 0;  // the next launch draws from 0 again
}

// Shared memory above 48 KB needs the kernel's opt-in, once a device and size: the largest size granted so far is kept
// (devices beyond the table ask every launch).
template <typename T, int RT, int NT, int D, int S, bool PRE>
cudaError_t launch(const Params& p, int warps, int splits, cudaStream_t stream) {
  static std::atomic<int> granted[64];
  const dim3 grid((p.N + RT * 16 - 1) / (RT * 16), splits);
  const int groups = (p.K + kGroup - 1) / kGroup;
  const int smem = block_smem_bytes(warps, RT, NT, S) + (PRE ? pre_bytes(p.M, RT, pre_slots(groups, warps, splits)) : 0);
  if (smem > 48 * 1024) {
    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return err;
    if (dev >= 64 || granted[dev].load(std::memory_order_relaxed) < smem) {
      err = cudaFuncSetAttribute(int4_gemv_mma<T, RT, NT, D, S, PRE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 smem);
      if (err != cudaSuccess) return err;
      if (dev < 64) {
        int seen = granted[dev].load(std::memory_order_relaxed);
        while (seen < smem && !granted[dev].compare_exchange_weak(seen, smem)) {
        }
      }
    }
  }
  int4_gemv_mma<T, RT, NT, D, S, PRE><<<grid, (warps + (S > 0)) * 32, smem, stream>>>(p);  // + the ring's producer
  return cudaGetLastError();
}

template <typename T, int D, int S, bool PRE = false>
cudaError_t by_tiles(const Params& p, int warps, int row_tiles, int splits, cudaStream_t s) {
  const bool two = p.M > 8;
  if (row_tiles == 1)
    return two ? launch<T, 1, 2, D, S, PRE>(p, warps, splits, s) : launch<T, 1, 1, D, S, PRE>(p, warps, splits, s);
  return two ? launch<T, 2, 2, D, S, PRE>(p, warps, splits, s) : launch<T, 2, 1, D, S, PRE>(p, warps, splits, s);
}

// depth counts only without a ring (the launcher has checked it is 1 with one), and so does the preload
template <typename T>
cudaError_t dispatch(const Params& p, int warps, int row_tiles, int splits, int depth, int stages, int pre,
                     cudaStream_t s) {
  switch (stages) {
    case 2: return by_tiles<T, 1, 2>(p, warps, row_tiles, splits, s);
    case 3: return by_tiles<T, 1, 3>(p, warps, row_tiles, splits, s);
    case 4: return by_tiles<T, 1, 4>(p, warps, row_tiles, splits, s);
    default:
      if (pre)
        return depth == 1 ? by_tiles<T, 1, 0, true>(p, warps, row_tiles, splits, s)
                          : by_tiles<T, 2, 0, true>(p, warps, row_tiles, splits, s);
      return depth == 1 ? by_tiles<T, 1, 0>(p, warps, row_tiles, splits, s)
                        : by_tiles<T, 2, 0>(p, warps, row_tiles, splits, s);
  }
}

}  // namespace
}  // namespace kh_int4

// The launcher (kernels/int4_cuda.py checks shapes, dtypes, strides and alignments first). dtype: 1 fp16, 2 bf16.
// stages: 0 for the register path (depth 1 or 2 groups in flight), else the bulk ring's slots (2, 3 or 4; depth 1;
// sm_90 on). pre: 1 for the preload (the register path only).
// Returns nullptr, or what went wrong.
extern "C" const char* kh_int4_gemv_launch(int dtype, void* c, const void* a, const void* w, const void* scales,
                                           const void* zeros, void* ws, void* cnt, int64_t M, int64_t N, int64_t K, int64_t lda,
                                           int64_t ldw, int64_t ss_n, int64_t ss_g, int64_t sz_n, int64_t sz_g,
                                           int64_t sc_m, int64_t sc_n, int warps, int row_tiles, int splits,
                                           int depth, int stages, int pre, void* stream) {
  if (M < 1 || M > 16) return "M must be 1 to 16";
  if (N < 1 || K < 32 || K % 32 != 0 || N > 2147483647 - 64 || K > 2147483647 - 256)
    return "N must be positive, K a positive multiple of 32, both below 2**31 - 256";
  if (warps != 1 && warps != 2 && warps != 4 && warps != 8) return "warps must be 1, 2, 4 or 8";
  if (row_tiles != 1 && row_tiles != 2) return "row_tiles must be 1 or 2";
  if (splits < 1 || splits > 64) return "splits must be 1 to 64";
  if (depth != 1 && depth != 2) return "depth must be 1 or 2";
  if (stages != 0 && stages != 2 && stages != 3 && stages != 4) return "stages must be 0, 2, 3 or 4";
  if (stages != 0 && depth != 1) return "depth must be 1 with a ring (stages > 0)";
  if (pre != 0 && pre != 1) return "pre must be 0 or 1";
  if (pre && stages != 0) return "the preload (pre) is the register path's: stages must be 0";
  if (stages != 0 || pre) {
    int dev = 0, cap = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&cap, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
      return "could not read the device's compute capability and shared memory per block";
    if (stages != 0 && major < 9)
      return "the bulk ring (stages > 0) needs sm_90 or later: cp.async.bulk and mbarrier transactions";
    const int col_tiles = M > 8 ? 2 : 1;
    const int groups = (int)((K + kh_int4::kGroup - 1) / kh_int4::kGroup);
    const int extra = pre ? kh_int4::pre_bytes((int)M, row_tiles, kh_int4::pre_slots(groups, warps, splits)) : 0;
    // + `last` and the ring's two barriers a slot
    if (kh_int4::block_smem_bytes(warps, row_tiles, col_tiles, stages) + extra + 16 + 16 * stages > cap)
      return stages ? "the bulk ring does not fit the device's shared memory per block: stages x row_tiles x 16 x "
                      "(warps x 64 + 64) bytes, and the partial tiles"
                    : "the preload does not fit the device's shared memory per block: M rows of the block's share "
                      "of K in activations, its rows' scales and zero points, and the partial tiles";
  }
  kh_int4::Params p{a, static_cast<const uint8_t*>(w), scales, static_cast<const uint8_t*>(zeros), c,
                    static_cast<float*>(ws), static_cast<int*>(cnt), (int)M, (int)N, (int)K, lda, ldw, ss_n, ss_g, sz_n, sz_g, sc_m, sc_n};
  const cudaStream_t s = (cudaStream_t)stream;
  cudaError_t err;
  switch (dtype) {
    case 1: err = kh_int4::dispatch<__half>(p, warps, row_tiles, splits, depth, stages, pre, s); break;
    case 2: err = kh_int4::dispatch<__nv_bfloat16>(p, warps, row_tiles, splits, depth, stages, pre, s); break;
    default: return "unsupported dtype code";
  }
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
