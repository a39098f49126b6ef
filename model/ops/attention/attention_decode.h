// Attention of new query rows against a KV cache: the causal attention of text generation,
// where the keys and values of earlier positions are kept instead of recomputed.
//
// The cache of one layer is k_cache, v_cache [B, Hkv, S_max, Dh]: per sequence and kv head, the
// keys (after RoPE) and values of every position seen so far, Hkv heads and not H (grouped-query
// attention keeps only the kv heads, H/Hkv times less memory). kv_cache_write copies the new
// rows' k and v heads out of wqkv's output into their positions; attention_decode then lets
// query row t — sequence seq[t], position pos[t] — attend to positions 0..pos[t] of its
// sequence. The causal mask is that offset: a prompt of n tokens (prefill: n rows at positions
// 0..n-1) and one new token per sequence (decode: a row at position n, then n+1, …) are the
// same call, and rows of sequences of different lengths go in one call.
//
// qkv [T, (H + 2·Hkv)·Dh] is laid out as in attention.h (per row: H query heads, then Hkv key
// heads, then Hkv value heads). Query head h reads kv head h / (H / Hkv); scores are scaled by
// 1/sqrt(Dh). Under tensor parallelism H and Hkv are the local head counts and the cache holds
// this rank's kv heads.
//
// dtypes: on the CPU qkv and out are f32 or f64 and the cache has their dtype, or bf16 beside
// f32 activations (half the memory; every value is read back to f32). On CUDA qkv, out and the
// cache share one dtype, f32 or bf16, and Dh ≤ 256. seq and pos are i32 on the tensors' device.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace titan::model {

struct DecodeAttentionShape {
  int64_t n_heads = 0;     // H
  int64_t n_kv_heads = 0;  // Hkv
  int64_t head_dim = 0;    // Dh
};

// k_cache[seq[t], g, pos[t], :] = the k head g of qkv row t, and v_cache likewise, for every row
// t and kv head g.
void kv_cache_write(const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv,
                    const Tensor& seq, const Tensor& pos, const DecodeAttentionShape& shape);

// out [T, H·Dh]: row t, head h = softmax_j(q·k_j / sqrt(Dh)) · v over positions j ≤ pos[t] of
// sequence seq[t]'s cache (which must already hold them: write, then attend).
void attention_decode(const Tensor& out, const Tensor& qkv, const Tensor& k_cache,
                      const Tensor& v_cache, const Tensor& seq, const Tensor& pos,
                      const DecodeAttentionShape& shape);

// The CUDA twins (attention_decode.cu); called for CUDA tensors.
void kv_cache_write_cuda(const Tensor& k_cache, const Tensor& v_cache, const Tensor& qkv,
                         const Tensor& seq, const Tensor& pos, const DecodeAttentionShape& shape);
void attention_decode_cuda(const Tensor& out, const Tensor& qkv, const Tensor& k_cache,
                           const Tensor& v_cache, const Tensor& seq, const Tensor& pos,
                           const DecodeAttentionShape& shape);

}  // namespace titan::model
