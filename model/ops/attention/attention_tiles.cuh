// The pieces the CUDA attention kernels share (attention.cu, the full causal attention, and
// attention_block.cu, attention over one K/V block of context parallelism): PTX wrappers for
// cp.async, ldmatrix, mma.sync m16n8k16 and sm_90's bulk reductions, the operand addressing of
// ldmatrix, the tile sizes per head dim, the global -> shared row loader, and the launchers'
// host checks. Included only from .cu files; nothing here is a kernel.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "core/cuda/launch.cuh"
#include "core/cuda/stream.h"
#include "core/tensor.h"

namespace titan::model::attention_tiles {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX wrappers ------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// Four 8x8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i, and register i of
// every lane receives (row lane/4, cols 2·(lane%4)+{0,1}) of matrix i (.trans: the transpose).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c[16x8] += a[16x16] · b[16x8]. Per lane (g = lane/4, t = lane%4):
//   a: a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   b: b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   c: c0,c1 (g, 2t..2t+1)  c2,c3 (g+8, 2t..2t+1)
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x on the SFU (ex2.approx.ftz: 2 ulp, -inf -> 0), without exp2f's range handling.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

#if __CUDA_ARCH__ >= 900
// Bulk reduction (sm_90): global[dst .. dst + bytes) += shared[src ..] as f32, asynchronously
// in L2, one instruction for a whole row instead of one atomic per element. Both addresses
// 16-byte aligned, bytes a multiple of 16; the issuing thread waits for it with the bulk
// group below.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, const float* src, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
      "r"(smem_addr(src)), "r"(bytes)
      : "memory");
}
__device__ __forceinline__ void bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// The shared-memory source of every committed bulk operation may be overwritten.
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// Every committed bulk operation has completed.
__device__ __forceinline__ void bulk_wait() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#endif

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<uint32_t*>(&v);
}

// Two accumulator tiles of 16x8 (columns 16k..16k+15 of a 16-row strip) as the A operand of
// the next product: the C layout of n-tiles 2k, 2k+1 is exactly the A layout of k-step k.
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&lo)[4],
                                         const float (&hi)[4]) {
  a[0] = pack_bf16(lo[0], lo[1]);
  a[1] = pack_bf16(lo[2], lo[3]);
  a[2] = pack_bf16(hi[0], hi[1]);
  a[3] = pack_bf16(hi[2], hi[3]);
}

// Shared-memory operand addresses of one lane for ldmatrix_x4, in a tile with row stride
// `stride` (elements). `r0` / `c0` pick the 16x16 block.
//   a_operand: the 16x16 block as the A fragment (rows = M, cols = K).
//   b_pair:    rows = N, cols = K (stored like K in Q·Kᵀ): registers {0,1} are the B fragment
//              of n-tile r0..r0+7, {2,3} of r0+8..r0+15.
//   b_pair_trans (with .trans): rows = K, cols = N (stored like V in P·V): registers {0,1} are
//              the B fragment of n-tile c0..c0+7, {2,3} of c0+8..c0+15.
//   a_operand_trans (with .trans): rows = K, cols = M (the tile stores Aᵀ).
__device__ __forceinline__ int a_operand(int lane, int r0, int c0, int stride) {
  return (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * stride + c0 + (lane >> 4) * 8;
}
__device__ __forceinline__ int b_pair(int lane, int r0, int c0, int stride) {
  return (r0 + (lane & 7) + (lane >> 4) * 8) * stride + c0 + ((lane >> 3) & 1) * 8;
}
__device__ __forceinline__ int b_pair_trans(int lane, int r0, int c0, int stride) {
  return (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * stride + c0 + (lane >> 4) * 8;
}
__device__ __forceinline__ int a_operand_trans(int lane, int r0, int c0, int stride) {
  return (r0 + (lane & 7) + (lane >> 4) * 8) * stride + c0 + ((lane >> 3) & 1) * 8;
}

// ---- configuration -----------------------------------------------------------------------------

// Tile sizes per head dim, in one place. Every warp owns 16 rows of the tile it works on.
template <int kHeadDim>
struct AttentionConfig {
  static constexpr int kStride = kHeadDim + 8;  // padded smem row of a bf16 tile (elements)

  // Forward: a query tile of kFwdRows, kv tiles of kFwdBlockN.
  static constexpr int kFwdWarps = 8;
  static constexpr int kFwdThreads = 32 * kFwdWarps;
  static constexpr int kFwdRows = 16 * kFwdWarps;
  static constexpr int kFwdBlockN = 128;
  // Q + double-buffered K, V.
  static constexpr int kFwdSmem = (kFwdRows + 4 * kFwdBlockN) * kStride * 2;

  // Backward: a kv tile of kBwdBlockN rows (16 per warp) against query tiles of kBwdBlockM.
  // Eight warps where Dh ≥ 64: every query tile loaded into shared memory (and every dQ
  // partial reduced in L2) then serves 128 keys instead of 64.
  static constexpr int kBwdWarps = kHeadDim >= 64 ? 8 : 4;
  static constexpr int kBwdThreads = 32 * kBwdWarps;
  static constexpr int kBwdBlockN = 16 * kBwdWarps;
  static constexpr int kBwdBlockM = 64;
  static constexpr int kStrideDs = kBwdBlockM + 8;  // dSᵀ tile row stride
  // Query columns per pass: Dh = 128 keeps dK, dV (128 fp32 per lane) and would spill with all
  // kBwdBlockM columns of sT and dpT live at once.
  static constexpr int kQCols = kHeadDim >= 128 ? kBwdBlockM / 2 : kBwdBlockM;
  // dQ = dS·K: warps tile the [kBwdBlockM, Dh] product as kDqWarpsM (16 rows each) ×
  // kDqWarpsD (column ranges), each range in passes of kDqCols columns.
  static constexpr int kDqWarpsM = kBwdBlockM / 16;
  static constexpr int kDqWarpsD = kBwdWarps / kDqWarpsM;
  static constexpr int kDqWarpCols = kHeadDim / kDqWarpsD;
  static constexpr int kDqCols = kDqWarpCols > 64 ? 64 : kDqWarpCols;
  static_assert(kDqWarpsM * kDqWarpsD == kBwdWarps && kDqWarpCols % 16 == 0);
  // Each warp stages its 16 × kDqCols fp32 partial dQ in the Q/dO buffers of the iteration
  // (free by then) for bulk reductions; the pad keeps the fragment stores conflict-free.
  static constexpr int kStageStride = kDqCols + 4;
  static_assert(kBwdWarps * 16 * kStageStride * 4 <= 2 * kBwdBlockM * kStride * 2,
                "the dQ staging tiles must fit in one Q/dO buffer pair");
  // K, V; double-buffered (Q, dO) pairs; dSᵀ; double-buffered lse, Δ.
  static constexpr int kBwdSmem = 2 * kBwdBlockN * kStride * 2 + 4 * kBwdBlockM * kStride * 2 +
                                  kBwdBlockN * kStrideDs * 2 + 4 * kBwdBlockM * 4;
};

// ---- global -> shared -------------------------------------------------------------------------

// Rows [r0, r0 + rows) of one head (columns col..col+Dh of a [T, stride] buffer, sequence
// base `src`) into a padded smem tile; rows at or past S become zeros.
template <int kHeadDim, int kThreads>
__device__ __forceinline__ void load_rows(bf16* dst, const bf16* src, int64_t stride, int r0,
                                          int rows, int seq_len) {
  constexpr int kChunks = kHeadDim / 8, kStride = kHeadDim + 8;
  for (int c = threadIdx.x; c < rows * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks, gr = r0 + r;
    const bool valid = gr < seq_len;
    cp_async_16(dst + r * kStride + ch * 8, src + (valid ? gr : 0) * stride + ch * 8, valid);
  }
}

// ---- block_causal ------------------------------------------------------------------------------

// The first row r in [lo, hi) whose document starts after position `key` (doc[r] > key), or hi:
// the query rows from lo on that see `key` end there, document starts never decreasing along a
// sequence. A binary search every thread of a CTA runs alike (log2 S reads, L1-cached).
__device__ __forceinline__ int rows_seeing_end(const int* doc, int lo, int hi, int key) {
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (__ldg(doc + mid) > key) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// ---- launchers ---------------------------------------------------------------------------------

// Dh as a compile-time constant.
template <class F>
void visit_head_dim(int64_t head_dim, const char* op, F&& f) {
  switch (head_dim) {
    case 16: f.template operator()<16>(); return;
    case 32: f.template operator()<32>(); return;
    case 64: f.template operator()<64>(); return;
    case 128: f.template operator()<128>(); return;
    default: break;
  }
  TT_CHECK(false, op, ": the CUDA attention supports head_dim Dh ∈ {16, 32, 64, 128}, got ",
           head_dim, "; choose a model whose dim / n_heads is one of these");
}

// Opts a kernel into more than 48 KiB of dynamic shared memory. The attribute belongs to the
// current device's context, so it is set at every launch (a cheap host call), not once.
template <class Kernel>
void allow_smem(Kernel kernel, int bytes) {
  int device = cuda::current_device(), optin = 0;
  TT_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  // The tiles are sized for Hopper (227 KiB a block); an A100 offers 163 KiB.
  TT_CHECK(bytes <= optin, "attention on cuda:", device, " needs ", bytes / 1024,
           " KiB of shared memory per block but the device offers ", optin / 1024,
           " KiB; this kernel's tiles are sized for Hopper (sm_90)");
  TT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

inline void check_cuda_operand(const char* op, const Tensor& t, const char* what) {
  TT_CHECK(t.is_contiguous(), op, ": ", what, " must be contiguous, got ", t);
  TT_CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0, op, ": ", what,
           " must be 16-byte aligned (a view at an odd offset?), got ", t);
}

}  // namespace titan::model::attention_tiles
