// CUDA twin of model/ops/attention/attention_block.h: attention of one query chunk over one K/V
// chunk with the log-sum-exp, the merge of two partial results, and the accumulating backward.
//
// The kernels are attention.cu's FlashAttention-2 kernels (same tiles, same tensor-core
// products, same online softmax in the log2 domain; attention_tiles.cuh holds what they share)
// with three differences:
//   - operands are strided views: every q, k, v, out, dout, dq, dk, dv has its own batch and row
//     strides, so the ring hands over chunks of the fused buffers without copies;
//   - the causal mask comes from the chunks' global positions: query i sees key j when
//     j ≤ i + (q_pos − kv_pos), and under block_causal also kv_pos + j ≥ q_doc_start[i]; a
//     query tile visits only the K/V tiles some row of it sees (from its first row's document
//     start) and a K/V tile only the query tiles whose rows see it, each masking only the tiles
//     that straddle a boundary or the block's end; a row that sees nothing writes out 0 and
//     lse −inf;
//   - results are partials and sums over blocks, kept in f32: the forward writes its out in f32
//     for the merge, and the backward adds into f32 dq, dk, dv (dq through sm_90 bulk
//     reductions, as attention.cu; dk, dv read-modify-written by the one CTA that owns a kv
//     tile of a kv head, so no atomics) instead of assigning bf16 dqkv.
//
// Compiled for sm_90a; test/gpu/test_attention_block.cpp compares every kernel with the CPU
// twin, and they passed on an H200 (docs/status.md#ran-on-the-h200-2026-11-26).
#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/cuda/stream.h"
#include "model/ops/attention/attention_block.h"
#include "model/ops/attention/attention_tiles.cuh"

namespace titan::model {

namespace {

using namespace attention_tiles;

// A strided operand: element (b, r, c) at p + b·sb + r·sr + c.
template <class T>
struct Strided {
  T* p;
  int64_t sb, sr;
  __device__ __forceinline__ T* row(int b, int r) const {
    return p + static_cast<int64_t>(b) * sb + static_cast<int64_t>(r) * sr;
  }
};

struct BlockParams {
  Strided<const bf16> q, k, v;  // [B, S_q, H·Dh], [B, S_kv, Hkv·Dh] ×2
  Strided<float> out;           // forward: [B, S_q, H·Dh] f32 partial
  Strided<float> lse;           // [B, H, S_q]: (b, h, i) at p + b·sb + h·sr + i
  Strided<const bf16> out_b;    // backward: the merged out, bf16
  Strided<const bf16> dout;     // [B, S_q, H·Dh]
  float* delta;                 // [B, H, S_q] contiguous  Δ = rowsum(dout ⊙ out)
  Strided<float> dq, dk, dv;    // accumulators
  const int* q_doc;             // block_causal: (b, i) at q_doc + b·q_doc_sb + i; null: causal
  int64_t q_doc_sb;
  int kv_pos;  // global position of key 0: key j sees documents from kv_pos + j
  int q_len, kv_len, n_heads, n_kv_heads, group;
  int offset;  // q_pos − kv_pos, clamped to [−q_len, kv_len]: query i sees key j ≤ i + offset
  float scale;       // 1/sqrt(Dh)
  float scale_log2;  // scale·log2e
};

// ---- forward -----------------------------------------------------------------------------------

// grid (B·H, ceil(S_q / kFwdRows)), longest (last) query tiles first as in attention.cu.
template <int kHeadDim>
__global__ void __launch_bounds__(AttentionConfig<kHeadDim>::kFwdThreads)
    block_forward_kernel(const BlockParams p) {
  using C = AttentionConfig<kHeadDim>;
  constexpr int BM = C::kFwdRows, BN = C::kFwdBlockN, kStride = C::kStride;
  constexpr int kDhTiles = kHeadDim / 8;

  extern __shared__ uint4 smem_u4[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_u4);  // [BM][kStride]
  bf16* sK = sQ + BM * kStride;                 // [2][BN][kStride]
  bf16* sV = sK + 2 * BN * kStride;             // [2][BN][kStride]

  const int Sq = p.q_len, Skv = p.kv_len;
  const int m_block = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x % p.n_heads, b = blockIdx.x / p.n_heads, g = h / p.group;
  const int m0 = m_block * BM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q_row = m0 + warp * 16 + lane / 4;  // and q_row + 8
  const int col = h * kHeadDim + (lane % 4) * 2;

  // Keys some valid row of this tile sees: j < min(q_end + offset, S_kv), and under
  // block_causal j ≥ the first row's document start (the least of the tile's rows).
  const int q_end = min(m0 + BM, Sq);
  const int kv_end = max(0, min(q_end + p.offset, Skv));
  const int n_tiles = (kv_end + BN - 1) / BN;
  const int* doc = p.q_doc ? p.q_doc + static_cast<int64_t>(b) * p.q_doc_sb : nullptr;
  // Block-local first key of each row's document (≤ 0 when causal or before the block).
  const int kv_first = doc ? __ldg(doc + m0) - p.kv_pos : 0;
  const int j_begin = max(0, kv_first) / BN;
  const int doc_mask_below = doc ? __ldg(doc + q_end - 1) - p.kv_pos : 0;
  if (j_begin >= n_tiles || kv_first >= kv_end) {  // the tile sees nothing: the merge's identity
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int q = q_row + 8 * i;
      if (q >= Sq) continue;
      float* out_row = p.out.row(b, q) + col;
#pragma unroll
      for (int dt = 0; dt < kDhTiles; ++dt) {
        *reinterpret_cast<float2*>(out_row + dt * 8) = make_float2(0.f, 0.f);
      }
      if (lane % 4 == 0) p.lse.row(b, h)[q] = -INFINITY;
    }
    return;
  }

  const bf16* q_src = p.q.row(b, 0) + h * kHeadDim;
  const bf16* k_src = p.k.row(b, 0) + g * kHeadDim;
  const bf16* v_src = p.v.row(b, 0) + g * kHeadDim;
  load_rows<kHeadDim, C::kFwdThreads>(sQ, q_src, p.q.sr, m0, BM, Sq);
  load_rows<kHeadDim, C::kFwdThreads>(sK, k_src, p.k.sr, j_begin * BN, BN, Skv);
  load_rows<kHeadDim, C::kFwdThreads>(sV, v_src, p.v.sr, j_begin * BN, BN, Skv);
  cp_async_commit();
  const int row_first[2] = {doc ? __ldg(doc + min(q_row, Sq - 1)) - p.kv_pos : 0,
                            doc ? __ldg(doc + min(q_row + 8, Sq - 1)) - p.kv_pos : 0};

  uint32_t qf[kHeadDim / 16][4];
  float o[kDhTiles][4];
#pragma unroll
  for (int i = 0; i < kDhTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 domain
  float row_sum[2] = {0.f, 0.f};              // this lane's share of the row's Σ p

  for (int j = j_begin; j < n_tiles; ++j) {
    cp_async_wait_all();
    __syncthreads();  // tile j landed; every warp is done with tile j-1's buffers
    if (j == j_begin) {
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        ldmatrix_x4(qf[kk], sQ + a_operand(lane, warp * 16, kk * 16, kStride));
      }
    }
    const int buf = (j - j_begin) & 1;
    if (j + 1 < n_tiles) {
      const int nb = buf ^ 1;
      load_rows<kHeadDim, C::kFwdThreads>(sK + nb * BN * kStride, k_src, p.k.sr, (j + 1) * BN, BN,
                                          Skv);
      load_rows<kHeadDim, C::kFwdThreads>(sV + nb * BN * kStride, v_src, p.v.sr, (j + 1) * BN, BN,
                                          Skv);
      cp_async_commit();
    }
    const bf16* k_tile = sK + buf * BN * kStride;
    const bf16* v_tile = sV + buf * BN * kStride;

    // s = q·kᵀ for this warp's 16 rows and the tile's BN keys.
    float s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
#pragma unroll
      for (int nn = 0; nn < BN / 16; ++nn) {
        uint32_t kb[4];
        ldmatrix_x4(kb, k_tile + b_pair(lane, nn * 16, kk * 16, kStride));
        mma_16816(s[2 * nn], qf[kk], kb[0], kb[1]);
        mma_16816(s[2 * nn + 1], qf[kk], kb[2], kb[3]);
      }
    }

    // Mask keys after the query's position, the zero-filled rows past S_kv, and (block_causal)
    // keys before the query's document, on the tiles that hold any.
    const int n0 = j * BN;
    if (n0 + BN - 1 > m0 + p.offset || n0 + BN > Skv || n0 < doc_mask_below) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kv = n0 + nt * 8 + (lane % 4) * 2 + (e & 1);
          if (kv > q_row + (e >= 2 ? 8 : 0) + p.offset || kv >= Skv ||
              kv < row_first[e >= 2 ? 1 : 0]) {
            s[nt][e] = -INFINITY;
          }
        }
      }
    }

    // Online softmax, as attention.cu.
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
      tile_max[0] = fmaxf(tile_max[0], fmaxf(s[nt][0], s[nt][1]));
      tile_max[1] = fmaxf(tile_max[1], fmaxf(s[nt][2], s[nt][3]));
    }
    float shift[2], correction[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
      tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
      const float new_max = fmaxf(row_max[i], tile_max[i] * p.scale_log2);
      shift[i] = new_max == -INFINITY ? 0.f : new_max;  // a row with nothing seen yet
      correction[i] = fast_exp2(row_max[i] - shift[i]);
      row_max[i] = new_max;
      row_sum[i] *= correction[i];
    }
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
      s[nt][0] = fast_exp2(fmaf(s[nt][0], p.scale_log2, -shift[0]));
      s[nt][1] = fast_exp2(fmaf(s[nt][1], p.scale_log2, -shift[0]));
      s[nt][2] = fast_exp2(fmaf(s[nt][2], p.scale_log2, -shift[1]));
      s[nt][3] = fast_exp2(fmaf(s[nt][3], p.scale_log2, -shift[1]));
      row_sum[0] += s[nt][0] + s[nt][1];
      row_sum[1] += s[nt][2] + s[nt][3];
    }
#pragma unroll
    for (int dt = 0; dt < kDhTiles; ++dt) {
      o[dt][0] *= correction[0];
      o[dt][1] *= correction[0];
      o[dt][2] *= correction[1];
      o[dt][3] *= correction[1];
    }

    // o += p·v, p rounded to bf16 as the A operand.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t pa[4];
      acc_to_a(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int dn = 0; dn < kHeadDim / 16; ++dn) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_tile + b_pair_trans(lane, kk * 16, dn * 16, kStride));
        mma_16816(o[2 * dn], pa, vb[0], vb[1]);
        mma_16816(o[2 * dn + 1], pa, vb[2], vb[3]);
      }
    }
  }

  // Finish the rows: o / Σp and lse = ln(2^max · Σp); a row that saw no key: 0 and −inf.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    row_sum[i] += __shfl_xor_sync(0xffffffffu, row_sum[i], 1);
    row_sum[i] += __shfl_xor_sync(0xffffffffu, row_sum[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int q = q_row + 8 * i;
    if (q >= Sq) continue;
    const bool seen = row_sum[i] > 0.f;
    const float inv = seen ? 1.f / row_sum[i] : 0.f;
    float* out_row = p.out.row(b, q) + col;
#pragma unroll
    for (int dt = 0; dt < kDhTiles; ++dt) {
      *reinterpret_cast<float2*>(out_row + dt * 8) =
          make_float2(o[dt][2 * i] * inv, o[dt][2 * i + 1] * inv);
    }
    if (lane % 4 == 0) {
      p.lse.row(b, h)[q] = seen ? (row_max[i] + __log2f(row_sum[i])) * kLn2 : -INFINITY;
    }
  }
}

// ---- merge -------------------------------------------------------------------------------------

// out = e^(lse − lse')·out + e^(lse_part − lse')·out_part, one thread per element of out; the
// new lse is written by the next kernel, after every element has read the old one.
__global__ void lse_merge_out_kernel(Strided<float> out, Strided<const float> out_part,
                                     Strided<const float> lse, Strided<const float> lse_part,
                                     int q_len, int n_heads, int head_dim, int64_t n) {
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= n) return;
  const int width = n_heads * head_dim;
  const int c = static_cast<int>(idx % width);
  const int i = static_cast<int>((idx / width) % q_len);
  const int b = static_cast<int>(idx / (int64_t{width} * q_len));
  const int h = c / head_dim;
  const float x = lse.row(b, h)[i], y = lse_part.row(b, h)[i];
  const float hi = fmaxf(x, y), lo = fminf(x, y);
  if (hi == -INFINITY) return;  // neither saw a key
  const float merged = hi + log1pf(expf(lo - hi));
  float* o = out.row(b, i) + c;
  *o = expf(x - merged) * *o + expf(y - merged) * out_part.row(b, i)[c];
}

__global__ void lse_merge_lse_kernel(Strided<float> lse, Strided<const float> lse_part, int q_len,
                                     int n_heads, int64_t n) {
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= n) return;
  const int i = static_cast<int>(idx % q_len);
  const int h = static_cast<int>((idx / q_len) % n_heads);
  const int b = static_cast<int>(idx / (int64_t{q_len} * n_heads));
  float* x = lse.row(b, h) + i;
  const float y = lse_part.row(b, h)[i];
  const float hi = fmaxf(*x, y), lo = fminf(*x, y);
  if (hi == -INFINITY) return;
  *x = hi + log1pf(expf(lo - hi));
}

// ---- backward ----------------------------------------------------------------------------------

// Δ[b, h, i] = Σ_d dout·out over one head row of the strided views; one lane per 16-byte chunk,
// the kHeadDim/8 lanes of a row reducing with shuffles (as attention.cu's prep kernel).
template <int kHeadDim>
__global__ void block_backward_prep_kernel(const BlockParams p, int64_t n_chunks) {
  constexpr int kChunks = kHeadDim / 8;
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const bool active = idx < n_chunks;
  const int64_t r = active ? idx / kChunks : 0;  // row ((b·S_q + i)·H + h)
  const int ch = static_cast<int>(idx % kChunks);
  const int h = static_cast<int>(r % p.n_heads);
  const int i = static_cast<int>((r / p.n_heads) % p.q_len);
  const int b = static_cast<int>(r / (int64_t{p.n_heads} * p.q_len));
  float sum = 0.f;
  if (active) {
    const int64_t c = static_cast<int64_t>(h) * kHeadDim + ch * 8;
    const uint4 o4 = *reinterpret_cast<const uint4*>(p.out_b.row(b, i) + c);
    const uint4 d4 = *reinterpret_cast<const uint4*>(p.dout.row(b, i) + c);
    const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&o4);
    const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(&d4);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 of = __bfloat1622float2(o2[k]), df = __bfloat1622float2(d2[k]);
      sum += of.x * df.x + of.y * df.y;
    }
  }
#pragma unroll
  for (int w = kChunks / 2; w > 0; w /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, w);
  if (active && ch == 0) p.delta[(static_cast<int64_t>(b) * p.n_heads + h) * p.q_len + i] = sum;
}

// grid (B·Hkv, ceil(S_kv / kBwdBlockN)). One CTA: kv rows [n0, n0 + kBwdBlockN) of kv head g,
// over the query heads of the group and the query tiles that see any of its keys (from the
// first row i with i + offset ≥ n0 to the end). As attention.cu's backward otherwise.
template <int kHeadDim>
__global__ void __launch_bounds__(AttentionConfig<kHeadDim>::kBwdThreads)
    block_backward_kernel(const BlockParams p) {
  using C = AttentionConfig<kHeadDim>;
  constexpr int BM = C::kBwdBlockM, BN = C::kBwdBlockN, kStride = C::kStride;
  constexpr int kStrideDs = C::kStrideDs;
  constexpr int kDhTiles = kHeadDim / 8;

  extern __shared__ uint4 smem_u4[];
  bf16* sK = reinterpret_cast<bf16*>(smem_u4);  // [BN][kStride]
  bf16* sV = sK + BN * kStride;                 // [BN][kStride]
  bf16* sQO = sV + BN * kStride;                // [2][Q, dO][BM][kStride]
  bf16* sdS = sQO + 4 * BM * kStride;           // [BN][kStrideDs]  dSᵀ (unscaled)
  float* sLse = reinterpret_cast<float*>(sdS + BN * kStrideDs);  // [2][BM]
  float* sDelta = sLse + 2 * BM;                                 // [2][BM]

  const int Sq = p.q_len, Skv = p.kv_len;
  const int n_block = blockIdx.y;
  const int g = blockIdx.x % p.n_kv_heads, b = blockIdx.x / p.n_kv_heads;
  const int n0 = n_block * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tid = threadIdx.x;

  // Iterations: (query head of the group) × (query tile that sees a key of this tile): from the
  // first row at or after the keys to, under block_causal, the last row whose document holds
  // one of them.
  const int* doc = p.q_doc ? p.q_doc + static_cast<int64_t>(b) * p.q_doc_sb : nullptr;
  const int row_begin = max(0, n0 - p.offset);
  if (row_begin >= Sq) return;  // no query of the block sees these keys: nothing to add
  const int rows_end =
      doc ? rows_seeing_end(doc, row_begin, Sq, p.kv_pos + min(n0 + BN, Skv) - 1) : Sq;
  const int m_begin = row_begin / BM;
  const int n_m = (rows_end + BM - 1) / BM - m_begin;
  if (rows_end <= row_begin || n_m <= 0) return;
  const int n_iter = p.group * n_m;

  load_rows<kHeadDim, C::kBwdThreads>(sK, p.k.row(b, 0) + g * kHeadDim, p.k.sr, n0, BN, Skv);
  load_rows<kHeadDim, C::kBwdThreads>(sV, p.v.row(b, 0) + g * kHeadDim, p.v.sr, n0, BN, Skv);

  auto load_iter = [&](int it, int buf) {
    const int h = g * p.group + it / n_m;
    const int m0 = (m_begin + it % n_m) * BM;
    bf16* q_dst = sQO + buf * 2 * BM * kStride;
    load_rows<kHeadDim, C::kBwdThreads>(q_dst, p.q.row(b, 0) + h * kHeadDim, p.q.sr, m0, BM, Sq);
    load_rows<kHeadDim, C::kBwdThreads>(q_dst + BM * kStride, p.dout.row(b, 0) + h * kHeadDim,
                                        p.dout.sr, m0, BM, Sq);
    if (tid < BM) {
      const bool valid = m0 + tid < Sq;
      const int at = valid ? m0 + tid : 0;
      cp_async_4(sLse + buf * BM + tid, p.lse.row(b, h) + at, valid);
      cp_async_4(sDelta + buf * BM + tid,
                 p.delta + (static_cast<int64_t>(b) * p.n_heads + h) * Sq + at, valid);
    }
  };
  load_iter(0, 0);
  cp_async_commit();

  float dk[kDhTiles][4], dv[kDhTiles][4];
#pragma unroll
  for (int i = 0; i < kDhTiles; ++i) {
    dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.f;
    dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.f;
  }
  const int kv_row = n0 + warp * 16 + lane / 4;  // and kv_row + 8

  for (int it = 0; it < n_iter; ++it) {
    cp_async_wait_all();
    __syncthreads();  // iteration it landed; every warp is done with it-1 (dS, buffers, staging)
    if (it + 1 < n_iter) {
      load_iter(it + 1, (it + 1) & 1);
      cp_async_commit();
    }
    const int buf = it & 1;
    const int h = g * p.group + it / n_m;
    const int m0 = (m_begin + it % n_m) * BM;
    const bf16* q_tile = sQO + buf * 2 * BM * kStride;
    const bf16* do_tile = q_tile + BM * kStride;
    const float* lse_tile = sLse + buf * BM;
    const float* delta_tile = sDelta + buf * BM;

    const bool masked = n0 + BN - 1 > m0 + p.offset || m0 + BM > Sq || n0 + BN > Skv ||
                        (doc && __ldg(doc + min(m0 + BM, Sq) - 1) - p.kv_pos > n0);
#pragma unroll 1
    for (int c0 = 0; c0 < BM; c0 += C::kQCols) {
      // sT = k·qᵀ and dpT = v·doᵀ: this warp's 16 kv rows × kQCols query columns.
      float st[C::kQCols / 8][4], dpt[C::kQCols / 8][4];
#pragma unroll
      for (int i = 0; i < C::kQCols / 8; ++i) {
        st[i][0] = st[i][1] = st[i][2] = st[i][3] = 0.f;
        dpt[i][0] = dpt[i][1] = dpt[i][2] = dpt[i][3] = 0.f;
      }
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk) {
        uint32_t ka[4], va[4];
        ldmatrix_x4(ka, sK + a_operand(lane, warp * 16, kk * 16, kStride));
        ldmatrix_x4(va, sV + a_operand(lane, warp * 16, kk * 16, kStride));
#pragma unroll
        for (int nn = 0; nn < C::kQCols / 16; ++nn) {
          uint32_t qb[4], db[4];
          ldmatrix_x4(qb, q_tile + b_pair(lane, c0 + nn * 16, kk * 16, kStride));
          mma_16816(st[2 * nn], ka, qb[0], qb[1]);
          mma_16816(st[2 * nn + 1], ka, qb[2], qb[3]);
          ldmatrix_x4(db, do_tile + b_pair(lane, c0 + nn * 16, kk * 16, kStride));
          mma_16816(dpt[2 * nn], va, db[0], db[1]);
          mma_16816(dpt[2 * nn + 1], va, db[2], db[3]);
        }
      }

      // pT = exp(scale·s − lse), zero where the query does not see the key, past S_q or past
      // S_kv (a row whose lse is −inf sees no key, so the mask covers it); dsT = pT ⊙ (dpT − Δ).
#pragma unroll
      for (int nt = 0; nt < C::kQCols / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = c0 + nt * 8 + (lane % 4) * 2 + (e & 1);
          float pv = fast_exp2(fmaf(st[nt][e], p.scale_log2, -lse_tile[qc] * kLog2e));
          if (masked) {
            const int q = m0 + qc, kv = kv_row + (e >= 2 ? 8 : 0);
            if (q >= Sq || kv > q + p.offset || kv >= Skv ||
                (doc && p.kv_pos + kv < __ldg(doc + q))) {
              pv = 0.f;
            }
          }
          st[nt][e] = pv;
          dpt[nt][e] = pv * (dpt[nt][e] - delta_tile[qc]);
        }
      }

      // dV += pT·do and dK += dsT·q over these query rows.
#pragma unroll
      for (int kk = 0; kk < C::kQCols / 16; ++kk) {
        uint32_t pa[4], dsa[4];
        acc_to_a(pa, st[2 * kk], st[2 * kk + 1]);
        acc_to_a(dsa, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
        for (int dn = 0; dn < kHeadDim / 16; ++dn) {
          uint32_t db[4], qb[4];
          ldmatrix_x4_trans(db, do_tile + b_pair_trans(lane, c0 + kk * 16, dn * 16, kStride));
          mma_16816(dv[2 * dn], pa, db[0], db[1]);
          mma_16816(dv[2 * dn + 1], pa, db[2], db[3]);
          ldmatrix_x4_trans(qb, q_tile + b_pair_trans(lane, c0 + kk * 16, dn * 16, kStride));
          mma_16816(dk[2 * dn], dsa, qb[0], qb[1]);
          mma_16816(dk[2 * dn + 1], dsa, qb[2], qb[3]);
        }
      }

      // dsT to shared memory (bf16, as the products above used it) for dQ = ds·k.
#pragma unroll
      for (int nt = 0; nt < C::kQCols / 8; ++nt) {
        bf16* at = sdS + (warp * 16 + lane / 4) * kStrideDs + c0 + nt * 8 + (lane % 4) * 2;
        *reinterpret_cast<uint32_t*>(at) = pack_bf16(dpt[nt][0], dpt[nt][1]);
        *reinterpret_cast<uint32_t*>(at + 8 * kStrideDs) = pack_bf16(dpt[nt][2], dpt[nt][3]);
      }
    }
    __syncthreads();

    // dQ[m0 + 16w.., :] += scale · ds·k over this CTA's BN keys, kDqCols columns at a time.
    const int dq_m = (warp % C::kDqWarpsM) * 16;              // query rows m0 + dq_m ..
    const int dq_d = (warp / C::kDqWarpsM) * C::kDqWarpCols;  // head-dim columns dq_d ..
#if __CUDA_ARCH__ >= 900
    float* stage =
        reinterpret_cast<float*>(const_cast<bf16*>(q_tile)) + warp * 16 * C::kStageStride;
    const int my_q = m0 + dq_m + lane;
    float* my_dq = my_q < Sq ? p.dq.row(b, my_q) + h * kHeadDim : nullptr;
#endif
#pragma unroll 1
    for (int d0 = dq_d; d0 < dq_d + C::kDqWarpCols; d0 += C::kDqCols) {
      float dq[C::kDqCols / 8][4];
#pragma unroll
      for (int i = 0; i < C::kDqCols / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t dsa[4];
        ldmatrix_x4_trans(dsa, sdS + a_operand_trans(lane, kk * 16, dq_m, kStrideDs));
#pragma unroll
        for (int dn = 0; dn < C::kDqCols / 16; ++dn) {
          uint32_t kb[4];
          ldmatrix_x4_trans(kb, sK + b_pair_trans(lane, kk * 16, d0 + dn * 16, kStride));
          mma_16816(dq[2 * dn], dsa, kb[0], kb[1]);
          mma_16816(dq[2 * dn + 1], dsa, kb[2], kb[3]);
        }
      }
#if __CUDA_ARCH__ >= 900
      if (d0 > dq_d) {  // the previous pass' rows must have left the staging tile
        if (lane < 16) bulk_wait_read();
        __syncwarp();
      }
#pragma unroll
      for (int dt = 0; dt < C::kDqCols / 8; ++dt) {
        float* at = stage + (lane / 4) * C::kStageStride + dt * 8 + (lane % 4) * 2;
        *reinterpret_cast<float2*>(at) = make_float2(dq[dt][0] * p.scale, dq[dt][1] * p.scale);
        *reinterpret_cast<float2*>(at + 8 * C::kStageStride) =
            make_float2(dq[dt][2] * p.scale, dq[dt][3] * p.scale);
      }
      fence_proxy_async_shared();
      __syncwarp();
      if (lane < 16 && my_q < Sq) {
        bulk_reduce_add_f32(my_dq + d0, stage + lane * C::kStageStride, C::kDqCols * 4);
        bulk_commit();
      }
#else
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int q = m0 + dq_m + lane / 4 + 8 * i;
        if (q >= Sq) continue;
        float* dq_row = p.dq.row(b, q) + h * kHeadDim + d0 + (lane % 4) * 2;
#pragma unroll
        for (int dt = 0; dt < C::kDqCols / 8; ++dt) {
          atomicAdd(dq_row + dt * 8, dq[dt][2 * i] * p.scale);
          atomicAdd(dq_row + dt * 8 + 1, dq[dt][2 * i + 1] * p.scale);
        }
      }
#endif
    }
#if __CUDA_ARCH__ >= 900
    if (lane < 16) bulk_wait_read();
#endif
  }
#if __CUDA_ARCH__ >= 900
  if (lane < 16) bulk_wait();
#endif

  // dK += scale·dK, dV += dV for kv head g, rows < S_kv: this CTA alone owns them in this launch.
  const int col = g * kHeadDim + (lane % 4) * 2;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int kv = kv_row + 8 * i;
    if (kv >= Skv) continue;
    float* dk_row = p.dk.row(b, kv) + col;
    float* dv_row = p.dv.row(b, kv) + col;
#pragma unroll
    for (int dt = 0; dt < kDhTiles; ++dt) {
      float2* dk2 = reinterpret_cast<float2*>(dk_row + dt * 8);
      float2* dv2 = reinterpret_cast<float2*>(dv_row + dt * 8);
      const float2 k_old = *dk2, v_old = *dv2;
      *dk2 = make_float2(k_old.x + dk[dt][2 * i] * p.scale, k_old.y + dk[dt][2 * i + 1] * p.scale);
      *dv2 = make_float2(v_old.x + dv[dt][2 * i], v_old.y + dv[dt][2 * i + 1]);
    }
  }
}

// ---- dqkv --------------------------------------------------------------------------------------

template <class Out>
__device__ __forceinline__ Out from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

// dqkv[t, c] = dq[t, c] for c < nq, else dkv[t, c − nq]; one thread per element.
template <class Out>
__global__ void assemble_dqkv_kernel(Out* dqkv, const float* dq, const float* dkv, int64_t nq,
                                     int64_t nkv, int64_t n) {
  const int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (idx >= n) return;
  const int64_t t = idx / (nq + nkv), c = idx % (nq + nkv);
  dqkv[idx] = from_f32<Out>(c < nq ? dq[t * nq + c] : dkv[t * nkv + c - nq]);
}

// ---- launchers ---------------------------------------------------------------------------------

// Views whose rows cp.async reads 16 bytes at a time (bf16) or whose f32 rows take 8-byte
// (float2) stores and 16-byte bulk reductions: base and strides aligned to 16 bytes.
void check_aligned(const char* op, const Tensor& t, const char* what) {
  const int64_t elems = 16 / static_cast<int64_t>(dtype_size(t.dtype()));
  TT_CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0 && t.strides()[0] % elems == 0 &&
               t.strides()[1] % elems == 0,
           op, ": ", what, " must start on 16 bytes with rows a multiple of 16 bytes apart, got ",
           t, " with strides ", t.strides(), "; use a head dim that is a multiple of 8");
}

template <class T>
Strided<T> strided(const Tensor& t) {
  return {reinterpret_cast<T*>(t.raw_data()), t.strides()[0], t.strides()[1]};
}

BlockParams make_block_params(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lse,
                              const AttentionBlockShape& a) {
  TT_CHECK(a.q_len <= int64_t{65535} * 64 && a.kv_len <= int64_t{65535} * 64 &&
               a.batch * a.n_heads <= INT32_MAX,
           "attention block: S_q ", a.q_len, ", S_kv ", a.kv_len, " (at most ", int64_t{65535} * 64,
           ") or B·H ", a.batch * a.n_heads, " is too large for the CUDA kernels' grid");
  TT_CHECK(q.device().index == cuda::current_device(), "attention block: tensors on ", q.device(),
           " but the current CUDA device is ", cuda::current_device(),
           "; call titan::cuda::set_device first");
  BlockParams p{};
  p.q = strided<const bf16>(q);
  p.k = strided<const bf16>(k);
  p.v = strided<const bf16>(v);
  p.lse = strided<float>(lse);
  p.q_len = static_cast<int>(a.q_len);
  p.kv_len = static_cast<int>(a.kv_len);
  p.n_heads = static_cast<int>(a.n_heads);
  p.n_kv_heads = static_cast<int>(a.n_kv_heads);
  p.group = static_cast<int>(a.n_heads / a.n_kv_heads);
  p.offset = static_cast<int>(std::clamp<int64_t>(a.q_pos - a.kv_pos, -a.q_len, a.kv_len));
  p.kv_pos = static_cast<int>(a.kv_pos);
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  p.scale_log2 = p.scale * kLog2e;
  return p;
}

constexpr int kElementwiseThreads = 256;

// block_causal's positions into the params (left null when causal).
void set_doc(BlockParams& p, const Tensor& q_doc_start) {
  if (!q_doc_start.defined()) return;
  p.q_doc = cuda::device_ptr<int>(q_doc_start);
  p.q_doc_sb = q_doc_start.strides()[0];
}

}  // namespace

void attention_block_forward_cuda(const Tensor& out, const Tensor& lse, const Tensor& q,
                                  const Tensor& k, const Tensor& v,
                                  const AttentionBlockShape& shape, const Tensor& q_doc_start) {
  const char* op = "attention_block_forward";
  check_aligned(op, q, "q");
  check_aligned(op, k, "k");
  check_aligned(op, v, "v");
  check_aligned(op, out, "out");
  BlockParams p = make_block_params(q, k, v, lse, shape);
  set_doc(p, q_doc_start);
  p.out = strided<float>(out);
  visit_head_dim(shape.head_dim, op, [&]<int kHeadDim>() {
    using C = AttentionConfig<kHeadDim>;
    allow_smem(block_forward_kernel<kHeadDim>, C::kFwdSmem);
    const dim3 grid(static_cast<unsigned>(shape.batch * shape.n_heads),
                    (p.q_len + C::kFwdRows - 1) / C::kFwdRows);
    block_forward_kernel<kHeadDim>
        <<<grid, C::kFwdThreads, C::kFwdSmem, cuda::current_stream()>>>(p);
    cuda::launch_check();
  });
}

void attention_lse_merge_cuda(const Tensor& out, const Tensor& lse, const Tensor& out_part,
                              const Tensor& lse_part) {
  const int q_len = static_cast<int>(lse.size(2)), n_heads = static_cast<int>(lse.size(1));
  const int head_dim = static_cast<int>(out.size(2) / lse.size(1));
  const int64_t n_out = out.numel(), n_lse = lse.numel();
  if (n_out == 0) return;
  lse_merge_out_kernel<<<cuda::grid_for(n_out, kElementwiseThreads, INT32_MAX), kElementwiseThreads,
                         0, cuda::current_stream()>>>(
      strided<float>(out), strided<const float>(out_part), strided<const float>(lse),
      strided<const float>(lse_part), q_len, n_heads, head_dim, n_out);
  cuda::launch_check();
  lse_merge_lse_kernel<<<cuda::grid_for(n_lse, kElementwiseThreads, INT32_MAX), kElementwiseThreads,
                         0, cuda::current_stream()>>>(
      strided<float>(lse), strided<const float>(lse_part), q_len, n_heads, n_lse);
  cuda::launch_check();
}

void attention_block_backward_cuda(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                   const Tensor& dout, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& out, const Tensor& lse,
                                   const AttentionBlockShape& shape, const Tensor& q_doc_start) {
  const char* op = "attention_block_backward";
  check_aligned(op, q, "q");
  check_aligned(op, k, "k");
  check_aligned(op, v, "v");
  check_aligned(op, out, "out");
  check_aligned(op, dout, "dout");
  check_aligned(op, dq, "dq");
  check_aligned(op, dk, "dk");
  check_aligned(op, dv, "dv");
  BlockParams p = make_block_params(q, k, v, lse, shape);
  set_doc(p, q_doc_start);
  p.out_b = strided<const bf16>(out);
  p.dout = strided<const bf16>(dout);
  p.dq = strided<float>(dq);
  p.dk = strided<float>(dk);
  p.dv = strided<float>(dv);
  // Δ from the caching allocator, on this stream: freed for reuse when it leaves scope, which
  // stream order makes safe.
  Tensor delta = Tensor::empty({shape.batch, shape.n_heads, shape.q_len}, DType::F32, q.device());
  p.delta = cuda::device_ptr<float>(delta);
  visit_head_dim(shape.head_dim, op, [&]<int kHeadDim>() {
    using C = AttentionConfig<kHeadDim>;
    const int64_t row_chunks = shape.batch * shape.q_len * shape.n_heads * (kHeadDim / 8);
    block_backward_prep_kernel<kHeadDim>
        <<<cuda::grid_for(row_chunks, kElementwiseThreads, INT32_MAX), kElementwiseThreads, 0,
           cuda::current_stream()>>>(p, row_chunks);
    cuda::launch_check();

    allow_smem(block_backward_kernel<kHeadDim>, C::kBwdSmem);
    const dim3 grid(static_cast<unsigned>(shape.batch * shape.n_kv_heads),
                    (p.kv_len + C::kBwdBlockN - 1) / C::kBwdBlockN);
    block_backward_kernel<kHeadDim>
        <<<grid, C::kBwdThreads, C::kBwdSmem, cuda::current_stream()>>>(p);
    cuda::launch_check();
  });
}

void attention_assemble_dqkv_cuda(const Tensor& dqkv, const Tensor& dq, const Tensor& dkv) {
  const int64_t n = dqkv.numel();
  if (n == 0) return;
  const unsigned blocks = cuda::grid_for(n, kElementwiseThreads, INT32_MAX);
  const float* q = cuda::device_ptr<float>(dq);
  const float* kv = cuda::device_ptr<float>(dkv);
  if (dqkv.dtype() == DType::BF16) {
    assemble_dqkv_kernel<<<blocks, kElementwiseThreads, 0, cuda::current_stream()>>>(
        cuda::device_ptr<bf16>(dqkv), q, kv, dq.size(1), dkv.size(1), n);
  } else {
    TT_CHECK(dqkv.dtype() == DType::F32, "attention_assemble_dqkv on CUDA: dqkv must be bf16 or ",
             "f32, got ", dqkv);
    assemble_dqkv_kernel<<<blocks, kElementwiseThreads, 0, cuda::current_stream()>>>(
        cuda::device_ptr<float>(dqkv), q, kv, dq.size(1), dkv.size(1), n);
  }
  cuda::launch_check();
}

}  // namespace titan::model
