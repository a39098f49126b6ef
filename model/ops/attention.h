// Causal grouped-query attention over the fused qkv buffer, without keeping the S×S matrix.
//
// Forward keeps only the log-sum-exp of each softmax row (lse [B, H, S]); backward recomputes
// the probabilities from q, k and lse, as FlashAttention does, so saved activations grow with S,
// not S². The CUDA kernels (attention.cu, FlashAttention-2 style) have this same signature and
// take bf16 qkv, out, dout and dqkv with an f32 lse; the CPU path takes f32 or f64 throughout.
//
// qkv [B·S, (H + 2·Hkv)·Dh] holds, per token, the H query heads, then the Hkv key heads, then
// the Hkv value heads — wqkv's output after RoPE. Query head h reads kv head h / (H / Hkv).
// Scores are scaled by 1/sqrt(Dh). Under tensor parallelism H and Hkv are the local head counts.
#pragma once

#include "core/tensor.h"

namespace titan::model {

struct AttentionShape {
  int64_t batch = 0;       // B
  int64_t seq_len = 0;     // S
  int64_t n_heads = 0;     // H
  int64_t n_kv_heads = 0;  // Hkv
  int64_t head_dim = 0;    // Dh
};

// -> out [B·S, H·Dh], lse [B, H, S]
void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                       const AttentionShape& shape);

// -> dqkv [B·S, (H + 2·Hkv)·Dh] (assigned)
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, const AttentionShape& shape);

// The CUDA twins (attention.cu); called for CUDA tensors. Dh ∈ {16, 32, 64, 128}.
void attention_forward_cuda(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                            const AttentionShape& shape);
void attention_backward_cuda(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                             const Tensor& out, const Tensor& lse, const AttentionShape& shape);

}  // namespace titan::model
