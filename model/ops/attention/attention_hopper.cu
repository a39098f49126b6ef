// Hopper (sm_90a) forward of the full causal attention (attention.h), FlashAttention-3's design,
// beside the FlashAttention-2 kernels of attention.cu, whose backward it feeds: it writes out
// [T, H·Dh] bf16 and lse [B, H, S] f32 in exactly their layouts (natural-log lse).
//
// Why another kernel: attention.cu's mma.sync kernels spend most of their time re-reading the
// shared K/V tiles through ldmatrix, 16 query rows per warp (docs/attention_cuda_notes.md).
// Hopper's warpgroup MMA (wgmma) multiplies a 64-row strip held by four warps against operands
// read straight from shared memory, and its copy engine (TMA, cp.async.bulk.tensor) moves whole
// tiles with one instruction, completing on an mbarrier; together they free the SMs' issue
// slots for the softmax. Written with inline PTX, no CUTLASS, in the simplest structure that has
// those pieces, so that a GPU session can debug it in minutes:
//
//   CTA = one query tile of 128 rows of one head of one sequence: grid (B·H, ⌈S/128⌉), the
//   longest causal tiles first, as attention.cu. 3 warpgroups (384 threads):
//     warpgroup 0, the producer: gives back registers (setmaxnreg) and one thread issues TMA
//       loads: the Q tile once, then K and V tiles of 128 keys into a ring of 2 stages, each
//       stage filled when both consumers have released it (mbarriers kv_full, kv_empty).
//     warpgroups 1 and 2, the consumers: 64 query rows each. Per K/V tile:
//       S = Q·Kᵀ            wgmma m64n128k16, Q and K from shared memory (Dh/16 instructions)
//       mask                the diagonal tile when causal, keys ≥ S when not
//       online softmax      fp32, log2 domain, rows held in registers (4 lanes a row)
//       O = O·c + P·V        wgmma m64n64k16 per 64 columns of Dh, P from registers as bf16,
//                           V from shared memory (transposed: keys are its rows)
//       release the stage
//     then O / Σp and lse to global memory straight from the accumulators.
//
// Shared memory: every tile [128 rows, Dh] bf16 is stored as Dh/64 column blocks of [128, 64]
// (128 bytes a row) in the 128-byte swizzle that both TMA and wgmma know (16-byte chunk c of row
// r at c ^ (r % 8)); Q, K and V use one 3-D tensor map over qkv [B, S, (H + 2·Hkv)·Dh], so rows
// at or past S read as zeros. Dh 128: Q 32 KiB + 2 stages × (K, V) 128 KiB = 160 KiB.
//
// Not yet (docs/attention_cuda_notes.md): the two consumers do not ping-pong softmax against each
// other's GEMMs, and within a consumer the next tile's Q·Kᵀ does not overlap this tile's softmax;
// no block_causal, no Dh other than 64 and 128, no backward (the native one runs after it).
#include <cuda.h>          // CUtensorMap and its enums: types only, libcuda is not linked
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled, reached through cudart
#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "core/cuda/launch.cuh"
#include "core/cuda/stream.h"
#include "model/ops/attention/attention_backend.h"
#include "model/ops/attention/attention_hopper.h"
#include "model/ops/attention/attention_tiles.cuh"

namespace titan::model {

namespace hopper_attention {

using attention_tiles::bf16;
using attention_tiles::fast_exp2;
using attention_tiles::kLn2;
using attention_tiles::kLog2e;
using attention_tiles::pack_bf16;
using attention_tiles::smem_addr;

// Tile sizes and the shared-memory plan, in one place.
template <int kHeadDim>
struct HopperConfig {
  static constexpr int kRows = 128;     // query rows of a CTA
  static constexpr int kConsumers = 2;  // warpgroups of 64 rows
  static constexpr int kBlockN = 128;   // keys of a K/V tile
  static constexpr int kStages = 2;     // K/V ring depth
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kSwizzleCols = 64;  // bf16 columns of a 128-byte swizzled row
  static constexpr int kColBlocks = kHeadDim / kSwizzleCols;
  static constexpr int kTileBytes = kRows * kHeadDim * 2;  // one Q, K or V tile
  static constexpr int kColBlockBytes = kRows * 128;       // one [128, 64] block of a tile
  static constexpr int kBarriers = 1 + 2 * kStages;        // q_full, kv_full[], kv_empty[]
  // 1 KiB of slack: the swizzled tiles need 1024-byte alignment, the dynamic base gives 16.
  static constexpr int kSmem = 1024 + kTileBytes * (1 + 2 * kStages) + 8 * kBarriers;
  // Registers a thread keeps after setmaxnreg: the producer's few, the consumers' many (O and
  // S accumulators are Dh/2 + 64 fp32 each); 128·(24 + 2·240) ≤ 64 K registers of an SM.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static_assert(kHeadDim % kSwizzleCols == 0 && kBlockN == kRows);
};

struct HopperParams {
  bf16* out;   // [T, H·Dh]
  float* lse;  // [B, H, S]
  int seq_len, n_heads, n_kv_heads, group;
  int64_t out_row;   // H·Dh
  float scale_log2;  // log2e / sqrt(Dh)
};

// ---- PTX: mbarriers, TMA, wgmma, setmaxnreg (sm_90a) -------------------------------------------

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the copy engine before any TMA completes on them.
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Arrives once and expects `bytes` more from TMA before the phase completes.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Waits until the phase of parity `parity` has completed. A fresh barrier is in phase 0, so
// waiting on parity 1 returns at once: how the producer's first pass over the ring starts.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// One box [1, 128 rows, 64 columns] of the 3-D tensor map at (column, row, sequence) into
// shared memory, swizzled as the map says, completing `bytes` on the barrier.
__device__ __forceinline__ void tma_load_box(uint32_t dst, const CUtensorMap* map, int col, int row,
                                             int seq, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(seq), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_wait_all() {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Keeps the compiler from moving reads or writes of an accumulator across the asynchronous
// wgmma region (it sees the asm's operands as written at issue, not at wait_group).
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// A shared-memory matrix descriptor for the 128-byte swizzle: start address, leading and stride
// byte offsets (each >> 4 into 14 bits), layout 1 = 128B in bits 62-63.
//   K-major (Q, K: the contraction Dh runs along the 128-byte rows): stride = 1024 bytes between
//     groups of 8 rows; leading unused (the 16-element k step stays inside one row).
//   MN-major (V: keys down the rows, Dh along them; one 64-column block of Dh per instruction):
//     stride = 1024 bytes between groups of 8 keys; leading unused (N = 64 is one row).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t leading, uint32_t stride) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(leading >> 4) << 16) | (static_cast<uint64_t>(stride >> 4) << 32) |
         (uint64_t{1} << 62);
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// Accumulator layout of wgmma m64nN (f32), per thread of the warpgroup: warp w, lane l,
// g = l / 4, t = l % 4; for i < N/8: d[4i], d[4i+1] = (row 16w + g, columns 8i + 2t, +1),
// d[4i+2], d[4i+3] = (row 16w + g + 8, the same columns). The A operand from registers, m64k16,
// is per warp the mma.sync m16n8k16 A fragment; so columns 16k..16k+15 of the accumulator,
// rounded to bf16 in pairs, are the A operand of k step k (attention_tiles::acc_to_a).

// d[64, 128] = a[64, 16]·b[16, 128] (+ d when accumulate), a and b in shared memory, K-major.
__device__ __forceinline__ void wgmma_ss_m64n128(float (&d)[64], uint64_t a_desc, uint64_t b_desc,
                                                 int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
      "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
      "%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(a_desc), "l"(b_desc), "r"(accumulate));
}

// d[64, 64] += a[64, 16]·b[16, 64], a in registers, b in shared memory, MN-major (transposed).
__device__ __forceinline__ void wgmma_rs_m64n64(float (&d)[32], const uint32_t (&a)[4],
                                                uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
      "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
      "%27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1));
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// ---- the kernel --------------------------------------------------------------------------------

// grid (B·H, ⌈S / 128⌉), 384 threads, HopperConfig::kSmem bytes of dynamic shared memory.
template <int kHeadDim, bool kCausal>
__global__ void __launch_bounds__(HopperConfig<kHeadDim>::kThreads, 1)
    attention_hopper_forward_kernel(const __grid_constant__ CUtensorMap qkv_map,
                                    const HopperParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using C = HopperConfig<kHeadDim>;
  constexpr int BN = C::kBlockN;

  // [Q][K stage 0, 1][V stage 0, 1][barriers], tiles 1024-byte aligned.
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t q_tile = (raw + 1023) & ~1023u;
  const uint32_t k_tiles = q_tile + C::kTileBytes;
  const uint32_t v_tiles = k_tiles + C::kStages * C::kTileBytes;
  const uint32_t q_full = v_tiles + C::kStages * C::kTileBytes;
  const uint32_t kv_full = q_full + 8;                 // [kStages]
  const uint32_t kv_empty = kv_full + 8 * C::kStages;  // [kStages]

  const int S = p.seq_len;
  const int m_block = gridDim.y - 1 - blockIdx.y;  // longest causal tiles first
  const int h = blockIdx.x % p.n_heads, b = blockIdx.x / p.n_heads, g = h / p.group;
  const int m0 = m_block * C::kRows;
  // The K/V tiles some row of this tile sees: causal, keys ≤ the last valid row.
  const int kv_end = kCausal ? min(m0 + C::kRows, S) : S;
  const int n_tiles = (kv_end + BN - 1) / BN;
  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(kv_full + 8 * s, 1);
      mbar_init(kv_empty + 8 * s, 128 * C::kConsumers);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    // Producer. One thread issues every copy; the other 127 only give their registers back.
    setmaxnreg_dec<C::kProducerRegs>();
    if (threadIdx.x == 0) {
      const int q_col = h * kHeadDim, k_col = (p.n_heads + g) * kHeadDim;
      const int v_col = (p.n_heads + p.n_kv_heads + g) * kHeadDim;
      mbar_arrive_expect_tx(q_full, C::kTileBytes);
#pragma unroll
      for (int c = 0; c < C::kColBlocks; ++c) {
        tma_load_box(q_tile + c * C::kColBlockBytes, &qkv_map, q_col + c * C::kSwizzleCols, m0, b,
                     q_full);
      }
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % C::kStages;
        const uint32_t phase = (j / C::kStages) & 1;
        mbar_wait(kv_empty + 8 * s, phase ^ 1);  // both consumers are done with its last tile
        const uint32_t full = kv_full + 8 * s;
        mbar_arrive_expect_tx(full, 2 * C::kTileBytes);
#pragma unroll
        for (int c = 0; c < C::kColBlocks; ++c) {
          const int col = c * C::kSwizzleCols;
          tma_load_box(k_tiles + s * C::kTileBytes + c * C::kColBlockBytes, &qkv_map, k_col + col,
                       j * BN, b, full);
          tma_load_box(v_tiles + s * C::kTileBytes + c * C::kColBlockBytes, &qkv_map, v_col + col,
                       j * BN, b, full);
        }
      }
    }
    return;
  }

  // Consumer `cw`: query rows m0 + 64·cw .. + 63; this thread rows `row` and `row + 8`.
  setmaxnreg_inc<C::kConsumerRegs>();
  const int cw = warpgroup - 1;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int row_lo = m0 + 64 * cw;
  const int row = row_lo + 16 * warp + lane / 4;
  const int col_in_tile = 2 * (lane % 4);  // first of this thread's two columns of every 8

  float o[C::kColBlocks][32];  // O's 64-column blocks, each a wgmma m64n64 accumulator
#pragma unroll
  for (int c = 0; c < C::kColBlocks; ++c) {
#pragma unroll
    for (int i = 0; i < 32; ++i) o[c][i] = 0.f;
  }
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 domain, scaled
  float row_sum[2] = {0.f, 0.f};              // this thread's share of the row's Σ p

  mbar_wait(q_full, 0);
  for (int j = 0; j < n_tiles; ++j) {
    const int s = j % C::kStages;
    mbar_wait(kv_full + 8 * s, (j / C::kStages) & 1);
    const uint32_t k_tile = k_tiles + s * C::kTileBytes, v_tile = v_tiles + s * C::kTileBytes;

    // sc = Q·Kᵀ: [64 rows, 128 keys], k steps of 16 along Dh (4 per 128-byte row block).
    float sc[BN / 2];  // written whole by the first k step (scale-d 0): nothing to fence before
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const uint32_t at = (kk / 4) * C::kColBlockBytes + (kk % 4) * 32;
      wgmma_ss_m64n128(sc, smem_desc(q_tile + at + 64 * 128 * cw, 16, 1024),
                       smem_desc(k_tile + at, 16, 1024), kk > 0);
    }
    wgmma_commit();
    wgmma_wait_all();
    fence_operands(sc);

    // Causal: mask keys after the query on the tiles that reach past this warpgroup's first row
    // (keys at or past S are then after every valid query too). Unmasked: keys at or past S.
    const int n0 = j * BN;
    if (kCausal ? n0 + BN - 1 > row_lo : n0 + BN > S) {
#pragma unroll
      for (int i = 0; i < BN / 8; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kv = n0 + 8 * i + col_in_tile + (e & 1);
          const int q = row + (e >= 2 ? 8 : 0);
          if (kCausal ? kv > q : kv >= S) sc[4 * i + e] = -INFINITY;
        }
      }
    }

    // Online softmax in the log2 domain, as attention.cu: the row max over the 4 lanes of a row
    // (raw scores; scale > 0 keeps the order), then p = 2^(s·scale·log2e − max) in one FFMA.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(sc[4 * i], sc[4 * i + 1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(sc[4 * i + 2], sc[4 * i + 3]));
    }
    float shift[2], correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      const float new_max = fmaxf(row_max[r], tile_max[r] * p.scale_log2);
      shift[r] = new_max == -INFINITY ? 0.f : new_max;  // a row with nothing seen yet
      correction[r] = fast_exp2(row_max[r] - shift[r]);
      row_max[r] = new_max;
      row_sum[r] *= correction[r];
    }
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sc[4 * i + e] = fast_exp2(fmaf(sc[4 * i + e], p.scale_log2, -shift[e >> 1]));
        row_sum[e >> 1] += sc[4 * i + e];
      }
    }
#pragma unroll
    for (int c = 0; c < C::kColBlocks; ++c) {
#pragma unroll
      for (int i = 0; i < 32; ++i) o[c][i] *= correction[(i >> 1) & 1];
    }

    // P as bf16 A operands, one per 16 keys.
    uint32_t pa[BN / 16][4];
#pragma unroll
    for (int k = 0; k < BN / 16; ++k) {
      pa[k][0] = pack_bf16(sc[8 * k], sc[8 * k + 1]);
      pa[k][1] = pack_bf16(sc[8 * k + 2], sc[8 * k + 3]);
      pa[k][2] = pack_bf16(sc[8 * k + 4], sc[8 * k + 5]);
      pa[k][3] = pack_bf16(sc[8 * k + 6], sc[8 * k + 7]);
    }

    // o += P·V per 64-column block of Dh: k steps of 16 keys, 2 groups of 8 rows (2 KiB) each.
    // The rescaled accumulators are fenced before wgmma.fence, CUTLASS's order
    // (warpgroup_fence_operand, then warpgroup_arrive): the fence orders the registers' writes
    // before the wgmma reads them only if the compiler has emitted those writes before it.
#pragma unroll
    for (int c = 0; c < C::kColBlocks; ++c) fence_operands(o[c]);
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < C::kColBlocks; ++c) {
#pragma unroll
      for (int k = 0; k < BN / 16; ++k) {
        wgmma_rs_m64n64(o[c], pa[k],
                        smem_desc(v_tile + c * C::kColBlockBytes + k * 2048, 16, 1024));
      }
    }
    wgmma_commit();
    wgmma_wait_all();
#pragma unroll
    for (int c = 0; c < C::kColBlocks; ++c) fence_operands(o[c]);
    mbar_arrive(kv_empty + 8 * s);  // this thread is done with the stage's K and V
  }

  // o / Σp and lse = ln(2^max · Σp), for the rows below S.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int q = row + 8 * r;
    if (q >= S) continue;
    const float inv = 1.f / row_sum[r];
    bf16* out_row =
        p.out + (static_cast<int64_t>(b) * S + q) * p.out_row + h * kHeadDim + col_in_tile;
#pragma unroll
    for (int c = 0; c < C::kColBlocks; ++c) {
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        *reinterpret_cast<uint32_t*>(out_row + 64 * c + 8 * i) =
            pack_bf16(o[c][4 * i + 2 * r] * inv, o[c][4 * i + 2 * r + 1] * inv);
      }
    }
    if (lane % 4 == 0) {
      p.lse[(static_cast<int64_t>(b) * p.n_heads + h) * S + q] =
          (row_max[r] + __log2f(row_sum[r])) * kLn2;
    }
  }
#else
  // Built without sm_90a: attention_forward_hopper refuses before any launch.
  __trap();
#endif
}

// ---- host --------------------------------------------------------------------------------------

// cuTensorMapEncodeTiled from the driver, through cudart: the project does not link libcuda.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    TT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                   cudaEnableDefault, &found));
    TT_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
             "attention on Hopper: the CUDA driver has no cuTensorMapEncodeTiled (query result ",
             static_cast<int>(found),
             "); update the driver to one for CUDA 12 or later, or use "
             "model.attention_backend native");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// qkv [B·S, row] viewed as [B][S][row] bf16 (row = (H + 2·Hkv)·Dh), boxes of [1][128][64] in the
// 128-byte swizzle; rows past S of a sequence read as zeros.
CUtensorMap qkv_tensor_map(const Tensor& qkv, const AttentionShape& a) {
  const uint64_t row = static_cast<uint64_t>((a.n_heads + 2 * a.n_kv_heads) * a.head_dim);
  const cuuint64_t dims[3] = {row, static_cast<cuuint64_t>(a.seq_len),
                              static_cast<cuuint64_t>(a.batch)};
  const cuuint64_t strides[2] = {row * 2, row * 2 * static_cast<uint64_t>(a.seq_len)};  // bytes
  const cuuint32_t box[3] = {64, 128, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map{};
  const CUresult r = tensor_map_encoder()(
      &map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(qkv.raw_data()), dims, strides,
      box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  TT_CHECK(r == CUDA_SUCCESS, "attention on Hopper: cuTensorMapEncodeTiled refused qkv ", qkv,
           " (B ", a.batch, ", S ", a.seq_len, ", row ", row, " elements) with CUresult ",
           static_cast<int>(r), "; use model.attention_backend native");
  return map;
}

template <int kHeadDim, bool kCausal>
void launch_forward(const CUtensorMap& map, const HopperParams& p, const AttentionShape& a) {
  using C = HopperConfig<kHeadDim>;
  auto kernel = attention_hopper_forward_kernel<kHeadDim, kCausal>;
  attention_tiles::allow_smem(kernel, C::kSmem);
  const dim3 grid(static_cast<unsigned>(a.batch * a.n_heads),
                  static_cast<unsigned>((a.seq_len + C::kRows - 1) / C::kRows));
  kernel<<<grid, C::kThreads, C::kSmem, cuda::current_stream()>>>(map, p);
  cuda::launch_check();
}

}  // namespace hopper_attention

bool hopper_attention_compiled() {
#if TITAN_HOPPER_ATTENTION
  return true;
#else
  return false;
#endif
}

namespace {

// What `device` lacks for the kernel, from its attributes: empty when it runs it.
std::string device_lacks(int device) {
  int major = 0, minor = 0, optin = 0;
  TT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  TT_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major != 9) {
    return detail::concat("a Hopper GPU (compute capability 9.x), and cuda:", device, " is ", major,
                          ".", minor);
  }
  TT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (optin < hopper_attention::HopperConfig<128>::kSmem) {
    return detail::concat(hopper_attention::HopperConfig<128>::kSmem / 1024,
                          " KiB of shared memory per block, and cuda:", device, " offers ",
                          optin / 1024);
  }
  return {};
}

}  // namespace

std::string hopper_attention_device_refusal() {
  if (!hopper_attention_compiled()) {
    return "this build has no sm_90a code (TITAN_CUDA_ARCHITECTURES lacks 90a)";
  }
  // Asked before any device is known to exist (a test on a machine without one): no throw.
  int count = 0, device = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0 ||
      cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();  // the failed query's error, not the next call's
    return "a Hopper GPU (compute capability 9.x), and this machine has no usable CUDA device";
  }
  // Every forward asks (attention_forward_hopper): each device's answer is read once.
  static std::mutex mutex;
  static std::map<int, std::string> lacks;
  std::lock_guard lock(mutex);
  auto known = lacks.find(device);
  if (known == lacks.end()) known = lacks.emplace(device, device_lacks(device)).first;
  return known->second;
}

void attention_forward_hopper(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                              const AttentionShape& shape, bool causal) {
  const char* op = "attention_forward on Hopper";
  attention_tiles::check_cuda_operand(op, qkv, "qkv");
  attention_tiles::check_cuda_operand(op, out, "out");
  attention_tiles::check_cuda_operand(op, lse, "lse");
  const std::string refusal = hopper_attention_refusal(shape);
  TT_CHECK(refusal.empty(), op, ": B ", shape.batch, ", S ", shape.seq_len, ", H ", shape.n_heads,
           ", Hkv ", shape.n_kv_heads, ", Dh ", shape.head_dim,
           " is a shape it cannot run; the Hopper kernel takes ", refusal);
  const std::string device_refusal = hopper_attention_device_refusal();
  TT_CHECK(device_refusal.empty(), op, ": the Hopper kernel needs ", device_refusal,
           "; use model.attention_backend native");
  TT_CHECK(qkv.device().index == cuda::current_device(), op, ": tensors on ", qkv.device(),
           " but the current CUDA device is ", cuda::current_device(),
           "; call titan::cuda::set_device first");
  if (shape.batch == 0 || shape.seq_len == 0) return;

  hopper_attention::HopperParams p{};
  p.out = cuda::device_ptr<attention_tiles::bf16>(out);
  p.lse = cuda::device_ptr<float>(lse);
  p.seq_len = static_cast<int>(shape.seq_len);
  p.n_heads = static_cast<int>(shape.n_heads);
  p.n_kv_heads = static_cast<int>(shape.n_kv_heads);
  p.group = static_cast<int>(shape.n_heads / shape.n_kv_heads);
  p.out_row = shape.n_heads * shape.head_dim;
  p.scale_log2 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.head_dim))) *
                 attention_tiles::kLog2e;
  const CUtensorMap map = hopper_attention::qkv_tensor_map(qkv, shape);
  using hopper_attention::launch_forward;
  if (shape.head_dim == 64) {
    causal ? launch_forward<64, true>(map, p, shape) : launch_forward<64, false>(map, p, shape);
  } else {
    causal ? launch_forward<128, true>(map, p, shape) : launch_forward<128, false>(map, p, shape);
  }
}

}  // namespace titan::model
