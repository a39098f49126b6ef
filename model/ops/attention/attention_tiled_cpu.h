// The CPU's fast attention: one tiled kernel for the full attention (attention.h) and for the
// blocks of context parallelism (attention_block.h), forward and backward, f32 and f64.
//
// Queries go in tiles of kQueryTile rows and keys in tiles of kKeyTile. A key tile that no
// query of the query tile sees (causal: after its last query; block_causal: before its first
// query's document) is never computed, the others are masked element by element, and the
// softmax is online, as FlashAttention's: a running max and sum per row, the output rescaled as
// the max grows, so no [S, S] block is ever held. The products are plain loops the compiler
// vectorizes, built for AVX-512, AVX2 and SSE2 and chosen at load for the CPU (GCC's
// target_clones); exp is glibc's vector exp (libmvec). Floating-point contraction is off, so
// every build of the loops rounds alike.
//
// Threads (core/thread_pool.h) take whole items: a (sequence, query head) in the forward, a
// (sequence, kv head) in the backward, whose dK and dV sum over the query heads of a group.
// Each item is computed by one thread in one order, so the results are the same bits for any
// number of threads.
//
// The plain twins (attention.cpp's and attention_block.cpp's, one [S_q, S_kv] score block per
// head through GEMMs) stay the oracle: the tests hold this kernel to them on every mask and
// shape (test/model/test_attention_tiled_cpu.cpp).
#pragma once

#include <cstdint>

#include "model/ops/attention/attention_block.h"

namespace titan::model {

inline constexpr int64_t kQueryTile = 32;
inline constexpr int64_t kKeyTile = 64;

// Element (b, r, c) of a view with a contiguous last dim at p + b·sb + r·sr + c; for lse
// [B, H, S_q], (b, h, i) at p + b·sb + h·sr + i.
template <class T>
struct AttentionRows {
  T* p = nullptr;
  int64_t sb = 0, sr = 0;
};

// What decides the mask: the block's shape and places (AttentionBlockShape), and under
// block_causal each query's document start (global positions), q_doc + b·q_doc_sb + i; null:
// causal. `windows`: the full op's block_causal, where each document is attended as a sequence
// of its own (its rows alone, causal), as attention.h promises; else a block is masked by the
// document starts element by element, as attention_block.h's.
struct TiledAttentionCall {
  AttentionBlockShape shape;
  const int32_t* q_doc = nullptr;
  int64_t q_doc_sb = 0;
  bool windows = false;
};

// out [B, S_q, H·Dh] and lse [B, H, S_q] from q [B, S_q, H·Dh], k, v [B, S_kv, Hkv·Dh]; a row
// that sees no key gets out 0 and lse −inf (attention_block.h's contract).
template <class T>
void tiled_attention_forward(const TiledAttentionCall& call, AttentionRows<T> out,
                             AttentionRows<T> lse, AttentionRows<const T> q,
                             AttentionRows<const T> k, AttentionRows<const T> v);

// dq += dS·K, dk += dSᵀ·Q, dv += Pᵀ·dO, with P from lse and Δ = rowsum(dO ⊙ out) (the merged
// results, as attention_block_backward takes them): accumulates, as the block backward does.
template <class T>
void tiled_attention_backward(const TiledAttentionCall& call, AttentionRows<T> dq,
                              AttentionRows<T> dk, AttentionRows<T> dv,
                              AttentionRows<const T> dout, AttentionRows<const T> q,
                              AttentionRows<const T> k, AttentionRows<const T> v,
                              AttentionRows<const T> out, AttentionRows<const T> lse);

}  // namespace titan::model
