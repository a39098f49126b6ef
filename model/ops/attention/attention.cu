// CUDA twin of model/ops/attention/attention.h: causal grouped-query attention, FlashAttention-2
// style.
//
// Why this shape: the S×S score matrix never reaches global memory. Forward streams K/V tiles
// through shared memory past a query tile held in registers and keeps a running (max, sum) per
// row (online softmax), so it writes only out and lse. Backward recomputes P from q, k and lse
// tile by tile; a CTA owns one kv tile of one kv head and loops over every query tile below the
// diagonal *and every query head of its group*, so dK and dV of a GQA group sum in registers
// and are stored once (no atomics, no fp32 dK/dV workspace). dQ is the only cross-CTA sum: fp32
// partials added into a [T, H·Dh] workspace (on sm_90 one bulk cp.reduce per row, elsewhere
// atomicAdd), then one pass scales and rounds it into dqkv.
//
// All products run on tensor cores through mma.sync m16n8k16 (bf16 in, fp32 accumulate);
// softmax runs in fp32 in the log2 domain (p = 2^(s·scale·log2e − max), one FFMA + ex2).
// Every warp owns 16 rows of the tile it works on; fragments come from shared memory through
// ldmatrix (.trans where the operand is stored the other way round). Shared-memory rows are
// padded by 16 bytes, which makes every ldmatrix of 8 rows conflict-free for Dh ∈ {16..128}.
// Global → shared copies are cp.async (16-byte, zero-filled past S), double-buffered.
//
// Under block_causal (doc_start given) a query tile starts its K/V loop at the tile of its first
// row's document start instead of 0, and a K/V tile's backward stops at the last query tile
// some row of which sees it: the tiles wholly in other documents are never loaded or computed,
// so a window of short documents costs about Σ n² instead of S². Tiles a document boundary
// crosses are masked element by element, as the diagonal ones are.
//
// Measured on an H100 SXM (B=1, S=8192, H=32, Hkv=8, Dh=128, causal): forward 293 TFLOP/s,
// backward 218 TFLOP/s, 236 together. Both are bound by ldmatrix traffic (each warp re-reads the
// shared operand of its 16-row strip); docs/attention_cuda_notes.md says what comes next.
//
// Layouts (T = B·S tokens, row = (H + 2·Hkv)·Dh):
//   qkv  [T, row] bf16      q head h at column h·Dh, k head g at (H+g)·Dh, v at (H+Hkv+g)·Dh
//   out  [T, H·Dh] bf16     lse [B, H, S] f32 (natural log of Σ exp(scale·q·k))
//   dqkv [T, row] bf16      assigned
#include <cuda_bf16.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "core/cuda/launch.cuh"
#include "core/cuda/stream.h"
#include "model/ops/attention/attention.h"
#include "model/ops/attention/attention_tiles.cuh"

namespace titan::model {

namespace {

using namespace attention_tiles;

struct AttentionParams {
  const bf16* qkv;       // [T, row]
  const bf16* out;       // [T, H·Dh]
  const bf16* dout;      // [T, H·Dh]
  bf16* out_w;           // forward's out
  float* lse;            // [B, H, S]
  float* delta;          // [B, H, S]  Δ = rowsum(dout ⊙ out)
  float* dq;             // [T, H·Dh]  fp32 accumulator
  bf16* dqkv;            // [T, row]
  const int* doc_start;  // [B, S] each token's document start (block_causal); null: causal
  int seq_len, n_heads, n_kv_heads, group;
  int64_t row;       // (H + 2·Hkv)·Dh
  int64_t out_row;   // H·Dh
  float scale;       // 1/sqrt(Dh)
  float scale_log2;  // scale·log2e
};

// ---- forward -----------------------------------------------------------------------------------

// grid (B·H, ceil(S / kFwdRows)); the longest (last) query tiles of every head are launched
// first, so that the short ones fill the tail of the last wave.
template <int kHeadDim>
__global__ void __launch_bounds__(AttentionConfig<kHeadDim>::kFwdThreads)
    attention_forward_kernel(const AttentionParams p) {
  using C = AttentionConfig<kHeadDim>;
  constexpr int BM = C::kFwdRows, BN = C::kFwdBlockN, kStride = C::kStride;
  constexpr int kDhTiles = kHeadDim / 8;

  extern __shared__ uint4 smem_u4[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_u4);  // [BM][kStride]
  bf16* sK = sQ + BM * kStride;                 // [2][BN][kStride]
  bf16* sV = sK + 2 * BN * kStride;             // [2][BN][kStride]

  const int S = p.seq_len;
  const int m_block = gridDim.y - 1 - blockIdx.y;
  const int h = blockIdx.x % p.n_heads, b = blockIdx.x / p.n_heads, g = h / p.group;
  const int m0 = m_block * BM;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  const bf16* seq = p.qkv + static_cast<int64_t>(b) * S * p.row;
  const bf16* q_src = seq + static_cast<int64_t>(h) * kHeadDim;
  const bf16* k_src = seq + static_cast<int64_t>(p.n_heads + g) * kHeadDim;
  const bf16* v_src = seq + static_cast<int64_t>(p.n_heads + p.n_kv_heads + g) * kHeadDim;

  // kv tiles that a valid row of this query tile sees (causal): kv ≤ q < min(m0 + BM, S); under
  // block_causal from the first row's document start on (the least of the tile's rows).
  const int q_end = min(m0 + BM, S);
  const int n_tiles = (q_end + BN - 1) / BN;
  const int* doc = p.doc_start ? p.doc_start + static_cast<int64_t>(b) * S : nullptr;
  const int j_begin = doc ? __ldg(doc + m0) / BN : 0;
  // Keys before the last row's document start need the document mask on their tiles.
  const int doc_mask_below = doc ? __ldg(doc + q_end - 1) : 0;

  load_rows<kHeadDim, C::kFwdThreads>(sQ, q_src, p.row, m0, BM, S);
  load_rows<kHeadDim, C::kFwdThreads>(sK, k_src, p.row, j_begin * BN, BN, S);
  load_rows<kHeadDim, C::kFwdThreads>(sV, v_src, p.row, j_begin * BN, BN, S);
  cp_async_commit();

  uint32_t qf[kHeadDim / 16][4];
  float o[kDhTiles][4];
#pragma unroll
  for (int i = 0; i < kDhTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};    // log2 domain
  float row_sum[2] = {0.f, 0.f};                // this lane's share of the row's Σ p
  const int q_row = m0 + warp * 16 + lane / 4;  // and q_row + 8
  // The rows' document starts (0 when causal); rows past S are never stored.
  const int row_doc[2] = {doc ? __ldg(doc + min(q_row, S - 1)) : 0,
                          doc ? __ldg(doc + min(q_row + 8, S - 1)) : 0};

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
      load_rows<kHeadDim, C::kFwdThreads>(sK + nb * BN * kStride, k_src, p.row, (j + 1) * BN, BN,
                                          S);
      load_rows<kHeadDim, C::kFwdThreads>(sV + nb * BN * kStride, v_src, p.row, (j + 1) * BN, BN,
                                          S);
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

    // Mask keys after the query (kv > q) on the diagonal tiles, and under block_causal keys
    // before the query's document on the tiles a boundary crosses. Keys at or past S are
    // always > q for a valid row, so the causal mask covers the tail too.
    const int n0 = j * BN;
    if (n0 + BN - 1 > m0 || n0 < doc_mask_below) {
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int kv = n0 + nt * 8 + (lane % 4) * 2 + (e & 1);
          if (kv > q_row + (e >= 2 ? 8 : 0) || kv < row_doc[e >= 2 ? 1 : 0]) s[nt][e] = -INFINITY;
        }
      }
    }

    // Online softmax in the log2 domain: new row max over the quad of lanes sharing a row
    // (raw scores; scale > 0 keeps the order), then p = 2^(s·scale·log2e − max) in one FFMA.
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

  // Finish the rows: o / Σp and lse = ln(2^max · Σp).
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    row_sum[i] += __shfl_xor_sync(0xffffffffu, row_sum[i], 1);
    row_sum[i] += __shfl_xor_sync(0xffffffffu, row_sum[i], 2);
  }
  const float inv[2] = {1.f / row_sum[0], 1.f / row_sum[1]};
  const int col = h * kHeadDim + (lane % 4) * 2;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int q = q_row + 8 * i;
    if (q >= S) continue;
    bf16* out_row = p.out_w + (static_cast<int64_t>(b) * S + q) * p.out_row + col;
#pragma unroll
    for (int dt = 0; dt < kDhTiles; ++dt) {
      *reinterpret_cast<uint32_t*>(out_row + dt * 8) =
          pack_bf16(o[dt][2 * i] * inv[i], o[dt][2 * i + 1] * inv[i]);
    }
    if (lane % 4 == 0) {
      p.lse[(static_cast<int64_t>(b) * p.n_heads + h) * S + q] =
          (row_max[i] + __log2f(row_sum[i])) * kLn2;
    }
  }
}

// ---- backward ----------------------------------------------------------------------------------

// Δ[b, h, s] = Σ_d dout·out over one head row, and zeroes the dQ accumulator. One lane per
// 16-byte chunk; the kHeadDim/8 lanes of a row reduce with shuffles.
template <int kHeadDim>
__global__ void attention_backward_prep_kernel(const AttentionParams p, int64_t n_chunks) {
  constexpr int kChunks = kHeadDim / 8;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const bool active = i < n_chunks;
  const int64_t r = active ? i / kChunks : 0;  // row (t, h) of [T·H, Dh]
  const int ch = static_cast<int>(i % kChunks);
  float sum = 0.f;
  if (active) {
    const uint4 o4 = *reinterpret_cast<const uint4*>(p.out + r * kHeadDim + ch * 8);
    const uint4 d4 = *reinterpret_cast<const uint4*>(p.dout + r * kHeadDim + ch * 8);
    const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&o4);
    const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(&d4);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 of = __bfloat1622float2(o2[k]), df = __bfloat1622float2(d2[k]);
      sum += of.x * df.x + of.y * df.y;
    }
    float4* dq = reinterpret_cast<float4*>(p.dq + r * kHeadDim + ch * 8);
    dq[0] = make_float4(0.f, 0.f, 0.f, 0.f);
    dq[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  // Lanes of one row are kChunks consecutive lanes of a warp (kChunks divides 32).
#pragma unroll
  for (int w = kChunks / 2; w > 0; w /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, w);
  if (active && ch == 0) {
    const int64_t t = r / p.n_heads;
    const int h = static_cast<int>(r % p.n_heads);
    const int64_t bb = t / p.seq_len, s = t % p.seq_len;
    p.delta[(bb * p.n_heads + h) * p.seq_len + s] = sum;
  }
}

// grid (B·Hkv, ceil(S / kBwdBlockN)), longest first (kv tile 0 sees every query tile). One
// CTA: kv rows [n0, n0 + kBwdBlockN) of kv head g; loops over the query heads of the group and
// the query tiles at or below the diagonal. Warp w owns kv rows n0 + 16w.. for Sᵀ, dPᵀ, dV, dK;
// for dQ the warps tile [kBwdBlockM, Dh] as kDqWarpsM × kDqWarpsD.
template <int kHeadDim>
__global__ void __launch_bounds__(AttentionConfig<kHeadDim>::kBwdThreads)
    attention_backward_kernel(const AttentionParams p) {
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

  const int S = p.seq_len;
  const int n_block = blockIdx.y;
  const int g = blockIdx.x % p.n_kv_heads, b = blockIdx.x / p.n_kv_heads;
  const int n0 = n_block * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tid = threadIdx.x;

  const bf16* seq = p.qkv + static_cast<int64_t>(b) * S * p.row;
  const bf16* dout_seq = p.dout + static_cast<int64_t>(b) * S * p.out_row;
  load_rows<kHeadDim, C::kBwdThreads>(sK, seq + static_cast<int64_t>(p.n_heads + g) * kHeadDim,
                                      p.row, n0, BN, S);
  load_rows<kHeadDim, C::kBwdThreads>(
      sV, seq + static_cast<int64_t>(p.n_heads + p.n_kv_heads + g) * kHeadDim, p.row, n0, BN, S);

  // Iterations: (query head of the group) × (query tile from the diagonal down, under
  // block_causal to the last row whose document holds a key of this tile).
  const int* doc = p.doc_start ? p.doc_start + static_cast<int64_t>(b) * S : nullptr;
  const int m_begin = n0 / BM;
  const int rows_end = doc ? rows_seeing_end(doc, n0, S, min(n0 + BN, S) - 1) : S;
  const int n_m = (rows_end + BM - 1) / BM - m_begin;
  const int n_iter = p.group * n_m;
  auto load_iter = [&](int it, int buf) {
    const int h = g * p.group + it / n_m;
    const int m0 = (m_begin + it % n_m) * BM;
    bf16* q_dst = sQO + buf * 2 * BM * kStride;
    load_rows<kHeadDim, C::kBwdThreads>(q_dst, seq + static_cast<int64_t>(h) * kHeadDim, p.row, m0,
                                        BM, S);
    load_rows<kHeadDim, C::kBwdThreads>(
        q_dst + BM * kStride, dout_seq + static_cast<int64_t>(h) * kHeadDim, p.out_row, m0, BM, S);
    if (tid < BM) {
      const bool valid = m0 + tid < S;
      const int64_t at = (static_cast<int64_t>(b) * p.n_heads + h) * S + (valid ? m0 + tid : 0);
      cp_async_4(sLse + buf * BM + tid, p.lse + at, valid);
      cp_async_4(sDelta + buf * BM + tid, p.delta + at, valid);
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

    // In passes over kQCols query columns at a time (the contraction of dV and dK splits the
    // same way), which bounds the live sT/dpT registers next to dK and dV.
    const bool masked =
        n0 + BN - 1 > m0 || m0 + BM > S || (doc && __ldg(doc + min(m0 + BM, S) - 1) > n0);
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

      // pT = exp(scale·s − lse), zero where kv > q, q ≥ S or (block_causal) kv lies before
      // q's document; dsT = pT ⊙ (dpT − Δ), unscaled.
#pragma unroll
      for (int nt = 0; nt < C::kQCols / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = c0 + nt * 8 + (lane % 4) * 2 + (e & 1);
          float pv = fast_exp2(fmaf(st[nt][e], p.scale_log2, -lse_tile[qc] * kLog2e));
          if (masked) {
            const int q = m0 + qc, kv = kv_row + (e >= 2 ? 8 : 0);
            if (q >= S || kv > q || (doc && kv < __ldg(doc + q))) pv = 0.f;
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

    // dQ[m0 + 16w.., :] += ds·k over this CTA's BN keys, kDqCols head-dim columns at a time.
    const int dq_m = (warp % C::kDqWarpsM) * 16;              // query rows m0 + dq_m ..
    const int dq_d = (warp / C::kDqWarpsM) * C::kDqWarpCols;  // head-dim columns dq_d ..
#if __CUDA_ARCH__ >= 900
    // Staged in this iteration's Q/dO buffers (read by nobody any more), then one bulk f32
    // reduction into the workspace per row: lane r < 16 owns row r of the warp's strip.
    float* stage =
        reinterpret_cast<float*>(const_cast<bf16*>(q_tile)) + warp * 16 * C::kStageStride;
    const int my_q = m0 + dq_m + lane;
    float* my_dq = p.dq + (static_cast<int64_t>(b) * S + my_q) * p.out_row +
                   static_cast<int64_t>(h) * kHeadDim;
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
        *reinterpret_cast<float2*>(at) = make_float2(dq[dt][0], dq[dt][1]);
        *reinterpret_cast<float2*>(at + 8 * C::kStageStride) = make_float2(dq[dt][2], dq[dt][3]);
      }
      fence_proxy_async_shared();
      __syncwarp();
      if (lane < 16 && my_q < S) {
        bulk_reduce_add_f32(my_dq + d0, stage + lane * C::kStageStride, C::kDqCols * 4);
        bulk_commit();
      }
#else
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int q = m0 + dq_m + lane / 4 + 8 * i;
        if (q >= S) continue;
        float* dq_row = p.dq + (static_cast<int64_t>(b) * S + q) * p.out_row +
                        static_cast<int64_t>(h) * kHeadDim + d0 + (lane % 4) * 2;
#pragma unroll
        for (int dt = 0; dt < C::kDqCols / 8; ++dt) {
          atomicAdd(dq_row + dt * 8, dq[dt][2 * i]);
          atomicAdd(dq_row + dt * 8 + 1, dq[dt][2 * i + 1]);
        }
      }
#endif
    }
#if __CUDA_ARCH__ >= 900
    // The next iteration's prefetch may overwrite the staging tile once everyone passed the
    // barrier at its top.
    if (lane < 16) bulk_wait_read();
#endif
  }
#if __CUDA_ARCH__ >= 900
  if (lane < 16) bulk_wait();
#endif

  // dK (scaled) and dV of kv head g, rows < S.
  const int col = (lane % 4) * 2;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int kv = kv_row + 8 * i;
    if (kv >= S) continue;
    bf16* row = p.dqkv + (static_cast<int64_t>(b) * S + kv) * p.row;
    bf16* dk_row = row + static_cast<int64_t>(p.n_heads + g) * kHeadDim + col;
    bf16* dv_row = row + static_cast<int64_t>(p.n_heads + p.n_kv_heads + g) * kHeadDim + col;
#pragma unroll
    for (int dt = 0; dt < kDhTiles; ++dt) {
      *reinterpret_cast<uint32_t*>(dk_row + dt * 8) =
          pack_bf16(dk[dt][2 * i] * p.scale, dk[dt][2 * i + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(dv_row + dt * 8) = pack_bf16(dv[dt][2 * i], dv[dt][2 * i + 1]);
    }
  }
}

// dqkv[:, q columns] = bf16(scale · dQ); one thread per 8 values.
__global__ void attention_dq_store_kernel(const AttentionParams p, int64_t n_chunks) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n_chunks) return;
  const int64_t chunks_per_token = p.out_row / 8;
  const int64_t t = i / chunks_per_token, c = (i % chunks_per_token) * 8;
  const float4* src = reinterpret_cast<const float4*>(p.dq + t * p.out_row + c);
  const float4 a = src[0], bq = src[1];
  uint4 packed;
  packed.x = pack_bf16(a.x * p.scale, a.y * p.scale);
  packed.y = pack_bf16(a.z * p.scale, a.w * p.scale);
  packed.z = pack_bf16(bq.x * p.scale, bq.y * p.scale);
  packed.w = pack_bf16(bq.z * p.scale, bq.w * p.scale);
  *reinterpret_cast<uint4*>(p.dqkv + t * p.row + c) = packed;
}

// ---- launchers ---------------------------------------------------------------------------------

AttentionParams make_params(const Tensor& qkv, const AttentionShape& a) {
  // Query and kv tiles run along gridDim.y (at most 65535 tiles of 64 rows).
  TT_CHECK(a.seq_len <= int64_t{65535} * 64 && a.batch * a.n_heads <= INT32_MAX, "attention: S ",
           a.seq_len, " (at most ", int64_t{65535} * 64, ") or B·H ", a.batch * a.n_heads,
           " is too large for the CUDA kernels' grid");
  AttentionParams p{};
  p.qkv = cuda::device_ptr<bf16>(qkv);
  p.seq_len = static_cast<int>(a.seq_len);
  p.n_heads = static_cast<int>(a.n_heads);
  p.n_kv_heads = static_cast<int>(a.n_kv_heads);
  p.group = static_cast<int>(a.n_heads / a.n_kv_heads);
  p.row = (a.n_heads + 2 * a.n_kv_heads) * a.head_dim;
  p.out_row = a.n_heads * a.head_dim;
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.head_dim)));
  p.scale_log2 = p.scale * kLog2e;
  TT_CHECK(qkv.device().index == cuda::current_device(), "attention: tensors on ", qkv.device(),
           " but the current CUDA device is ", cuda::current_device(),
           "; call titan::cuda::set_device first");
  return p;
}

// block_causal's positions, checked like the other operands; null when causal.
const int* doc_start_ptr(const char* op, const Tensor& doc_start) {
  if (!doc_start.defined()) return nullptr;
  check_cuda_operand(op, doc_start, "doc_start");
  return cuda::device_ptr<int>(doc_start);
}

}  // namespace

void attention_forward_cuda(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                            const AttentionShape& shape, const Tensor& doc_start) {
  const char* op = "attention_forward";
  check_cuda_operand(op, qkv, "qkv");
  check_cuda_operand(op, out, "out");
  check_cuda_operand(op, lse, "lse");
  AttentionParams p = make_params(qkv, shape);
  p.doc_start = doc_start_ptr(op, doc_start);
  p.out_w = cuda::device_ptr<bf16>(out);
  p.lse = cuda::device_ptr<float>(lse);
  visit_head_dim(shape.head_dim, op, [&]<int kHeadDim>() {
    using C = AttentionConfig<kHeadDim>;
    allow_smem(attention_forward_kernel<kHeadDim>, C::kFwdSmem);
    const dim3 grid(static_cast<unsigned>(shape.batch * shape.n_heads),
                    (p.seq_len + C::kFwdRows - 1) / C::kFwdRows);
    attention_forward_kernel<kHeadDim>
        <<<grid, C::kFwdThreads, C::kFwdSmem, cuda::current_stream()>>>(p);
    cuda::launch_check();
  });
}

void attention_backward_cuda(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                             const Tensor& out, const Tensor& lse, const AttentionShape& shape,
                             const Tensor& doc_start) {
  const char* op = "attention_backward";
  check_cuda_operand(op, dqkv, "dqkv");
  check_cuda_operand(op, dout, "dout");
  check_cuda_operand(op, qkv, "qkv");
  check_cuda_operand(op, out, "out");
  check_cuda_operand(op, lse, "lse");
  AttentionParams p = make_params(qkv, shape);
  p.doc_start = doc_start_ptr(op, doc_start);
  p.out = cuda::device_ptr<bf16>(out);
  p.dout = cuda::device_ptr<bf16>(dout);
  p.lse = cuda::device_ptr<float>(lse);
  p.dqkv = cuda::device_ptr<bf16>(dqkv);
  const int64_t tokens = shape.batch * shape.seq_len;
  // Workspaces from the caching allocator, on this stream: freed (for reuse) when they leave
  // scope, which stream order makes safe.
  Tensor delta = Tensor::empty({shape.batch, shape.n_heads, shape.seq_len}, DType::F32,
                               qkv.device());                                // Δ [B, H, S]
  Tensor dq = Tensor::empty({tokens, p.out_row}, DType::F32, qkv.device());  // [T, H·Dh]
  p.delta = cuda::device_ptr<float>(delta);
  p.dq = cuda::device_ptr<float>(dq);
  visit_head_dim(shape.head_dim, op, [&]<int kHeadDim>() {
    using C = AttentionConfig<kHeadDim>;
    constexpr int kPrepThreads = 256;
    const int64_t row_chunks = tokens * shape.n_heads * (kHeadDim / 8);
    attention_backward_prep_kernel<kHeadDim>
        <<<cuda::grid_for(row_chunks, kPrepThreads, INT32_MAX), kPrepThreads, 0,
           cuda::current_stream()>>>(p, row_chunks);
    cuda::launch_check();

    allow_smem(attention_backward_kernel<kHeadDim>, C::kBwdSmem);
    const dim3 grid(static_cast<unsigned>(shape.batch * shape.n_kv_heads),
                    (p.seq_len + C::kBwdBlockN - 1) / C::kBwdBlockN);
    attention_backward_kernel<kHeadDim>
        <<<grid, C::kBwdThreads, C::kBwdSmem, cuda::current_stream()>>>(p);
    cuda::launch_check();

    attention_dq_store_kernel<<<cuda::grid_for(row_chunks, kPrepThreads, INT32_MAX), kPrepThreads,
                                0, cuda::current_stream()>>>(p, row_chunks);
    cuda::launch_check();
  });
}

}  // namespace titan::model
