// Causal attention of one chunk of queries over one chunk of keys and values, with the
// log-sum-exp, so that partial results over several K/V chunks merge exactly: the op behind
// context parallelism's ring attention (docs/context_parallel.md,
// docs/architecture.md#decision-18).
//
// The chunks' places in the sequence decide the mask. Query row i sits at global position
// q_pos + i, key row j at kv_pos + j, and a query sees a key at or before its own position:
//   past     every key before every query (kv_pos + S_kv − 1 ≤ q_pos): no mask
//   masked   the chunks overlap (the diagonal block of a ring): masked element by element
//   future   every key after every query: nothing to compute; callers skip it, and the op
//            leaves the identity of the merge (out 0, lse −inf) if called anyway
// A query row that sees no key of the block has out 0 and lse −inf.
//
// Under block_causal (attention.h) the ops also take q_doc_start [B, S_q] i32, a view with a
// contiguous last dim: the global position of the first token of each query's document. A
// query then sees only the keys at or after it as well; keys of earlier documents are masked,
// and on CUDA the K/V tiles no query of a tile sees are skipped. Undefined: causal.
//
// Operands are 3-D views whose last dim is contiguous, with any batch and row strides, so a
// chunk of the model's fused buffers goes in without a copy (qkv [B·S, (H + 2·Hkv)·Dh] viewed
// as [B, S, (H + 2·Hkv)·Dh], narrowed to the chunk's rows and the q, k or v columns):
//   q [B, S_q, H·Dh]   k, v [B, S_kv, Hkv·Dh]   out, dout, dq [B, S_q, H·Dh]
//   lse [B, H, S_q]    dk, dv [B, S_kv, Hkv·Dh]
// Query head h reads kv head h / (H / Hkv); scores are scaled by 1/sqrt(Dh), as in
// attention.h, whose full causal attention is the one block q_pos = kv_pos = 0, S_q = S_kv = S.
//
// Dtypes. CPU: every tensor f32, or every tensor f64. CUDA: q, k, v, dout and the backward's
// out are bf16 (the model's activations); the forward's out (a partial to merge), every lse and
// the gradient accumulators dq, dk, dv are f32, so that the sums over blocks round once.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "model/ops/attention/attention.h"

namespace titan::model {

struct AttentionBlockShape {
  int64_t batch = 0;       // B
  int64_t n_heads = 0;     // H
  int64_t n_kv_heads = 0;  // Hkv
  int64_t head_dim = 0;    // Dh
  int64_t q_len = 0;       // S_q: query rows of the block, per sequence
  int64_t kv_len = 0;      // S_kv: key rows of the block, per sequence
  int64_t q_pos = 0;       // global position of query row 0
  int64_t kv_pos = 0;      // global position of key row 0
  AttentionBackend backend = AttentionBackend::Native;  // as AttentionShape's
};

// Where the keys sit relative to the queries (above).
enum class KvBlockPlace { Past, Masked, Future };
KvBlockPlace kv_block_place(const AttentionBlockShape& shape);

// Under block_causal: whether every key of the block lies before the document of every query,
// given the least document start of the block's queries (its first row's, the least over B,
// as document starts never decrease along a sequence). Such a block adds nothing: context
// parallelism skips it as it skips a Future one.
inline bool kv_block_before_documents(const AttentionBlockShape& shape, int64_t min_doc_start) {
  return shape.kv_pos + shape.kv_len <= min_doc_start;
}

// -> out [B, S_q, H·Dh], lse [B, H, S_q]: attention over this block's keys alone (assigned).
void attention_block_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k,
                             const Tensor& v, const AttentionBlockShape& shape,
                             const Tensor& q_doc_start = {});

// The online-softmax merge of a block's partial result into a running one, in place:
//   lse' = log(e^lse + e^lse_part),  out' = e^(lse − lse')·out + e^(lse_part − lse')·out_part.
// Exact: softmax over the union of two key sets, whatever the order of merging. A running
// result starts as out 0, lse −inf. out, out_part [B, S_q, H·Dh]; lse, lse_part [B, H, S_q].
void attention_lse_merge(const Tensor& out, const Tensor& lse, const Tensor& out_part,
                         const Tensor& lse_part);

// The FlashAttention-2 backward of one block, given the merged out and lse of every block the
// queries see and the gradient dout: with P = exp(scale·Q·Kᵀ − lse) (masked), D = rowsum(dout ⊙
// out) and dS = P ⊙ (dout·Vᵀ − D),
//   dq += scale·dS·K,  dk += scale·dSᵀ·Q,  dv += Pᵀ·dout     (accumulated, not assigned)
// so that dq sums over the kv blocks of its queries and dk, dv over the query blocks (and the
// query heads of a kv group) that see them.
void attention_block_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                              const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse,
                              const AttentionBlockShape& shape, const Tensor& q_doc_start = {});

// The plain CPU twins, the oracle of the tiled kernel (attention_tiled_cpu.h) the ops above run
// on the CPU and of the CUDA kernels: one [S_q, S_kv] score block per head through GEMMs. CPU
// tensors only, f32 or f64.
void attention_block_forward_plain(const Tensor& out, const Tensor& lse, const Tensor& q,
                                   const Tensor& k, const Tensor& v,
                                   const AttentionBlockShape& shape,
                                   const Tensor& q_doc_start = {});
void attention_block_backward_plain(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                    const Tensor& dout, const Tensor& q, const Tensor& k,
                                    const Tensor& v, const Tensor& out, const Tensor& lse,
                                    const AttentionBlockShape& shape,
                                    const Tensor& q_doc_start = {});

// dqkv [T, (H + 2·Hkv)·Dh] = [dq | dkv] with dq [T, H·Dh], dkv [T, 2·Hkv·Dh] (k heads, then v
// heads), converted to dqkv's dtype: the accumulators of the blocks into the layout of
// attention_backward's dqkv (on CUDA f32 into bf16).
void attention_assemble_dqkv(const Tensor& dqkv, const Tensor& dq, const Tensor& dkv);

// The CUDA twins (attention_block.cu); called for CUDA tensors. Dh ∈ {16, 32, 64, 128}.
void attention_block_forward_cuda(const Tensor& out, const Tensor& lse, const Tensor& q,
                                  const Tensor& k, const Tensor& v,
                                  const AttentionBlockShape& shape, const Tensor& q_doc_start = {});
void attention_lse_merge_cuda(const Tensor& out, const Tensor& lse, const Tensor& out_part,
                              const Tensor& lse_part);
void attention_block_backward_cuda(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                                   const Tensor& dout, const Tensor& q, const Tensor& k,
                                   const Tensor& v, const Tensor& out, const Tensor& lse,
                                   const AttentionBlockShape& shape,
                                   const Tensor& q_doc_start = {});
void attention_assemble_dqkv_cuda(const Tensor& dqkv, const Tensor& dq, const Tensor& dkv);

}  // namespace titan::model
