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
//
// Two masks (model.attention_mask, torchtitan's names). causal: query i sees keys 0 … i.
// block_causal, Llama 3's document mask over packed sequences: query i sees only the keys of
// its own document, doc_start[b, i] … i, where doc_start [B, S] i32 holds for each token the
// position of the first token of its document (data/documents.h derives it from the EOS that
// ends each document). The ops take block_causal when they are given a defined doc_start; its
// values are positions in the sequence, non-decreasing along it, each at or before its token
// and itself the start of its own run (doc_start[b, doc_start[b, i]] == doc_start[b, i]).
#pragma once

#include "core/enum_names.h"
#include "core/tensor.h"

namespace titan::model {

enum class AttentionMaskKind { Causal, BlockCausal };
inline constexpr EnumName<AttentionMaskKind> kAttentionMaskList[] = {
    {AttentionMaskKind::Causal, "causal"}, {AttentionMaskKind::BlockCausal, "block_causal"}};
inline constexpr EnumNames<AttentionMaskKind> kAttentionMasks{"attention mask", kAttentionMaskList};

// Which implementation runs attention on a GPU (attention_backend.h says what each is and how
// an executable picks one). A value the model hands to every attention it runs, not process
// state, so that two models, or two tests, run on different backends side by side.
enum class AttentionBackend { Auto, Cudnn, Native, Hopper };
inline constexpr EnumName<AttentionBackend> kAttentionBackendList[] = {
    {AttentionBackend::Auto, "auto"},
    {AttentionBackend::Cudnn, "cudnn"},
    {AttentionBackend::Native, "native"},
    {AttentionBackend::Hopper, "hopper"}};
inline constexpr EnumNames<AttentionBackend> kAttentionBackends{"attention backend",
                                                                kAttentionBackendList};

struct AttentionShape {
  int64_t batch = 0;       // B
  int64_t seq_len = 0;     // S
  int64_t n_heads = 0;     // H
  int64_t n_kv_heads = 0;  // Hkv
  int64_t head_dim = 0;    // Dh
  // How it runs on a GPU; the CPU runs its twins whatever this says. Native unless the model
  // was handed another (Transformer::run_attention_on).
  AttentionBackend backend = AttentionBackend::Native;
};

// -> out [B·S, H·Dh], lse [B, H, S]. doc_start [B, S] i32 on qkv's device: block_causal;
// undefined: causal.
void attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                       const AttentionShape& shape, const Tensor& doc_start = {});

// -> dqkv [B·S, (H + 2·Hkv)·Dh] (assigned)
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, const AttentionShape& shape,
                        const Tensor& doc_start = {});

// The plain CPU twins, the oracle of every other path: per (sequence, head) one [S, S] score
// block through GEMMs, each document of block_causal a window of its own. On the CPU the ops
// above run the tiled kernel (attention_tiled_cpu.h) instead, held to these by the tests. CPU
// tensors only, f32 or f64.
void attention_forward_plain(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                             const AttentionShape& shape, const Tensor& doc_start = {});
void attention_backward_plain(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const AttentionShape& shape,
                              const Tensor& doc_start = {});

// The mask a block of attention runs under, as the model hands it down: doc_start on the
// attention's device, and the same positions on the CPU for what the host decides from them
// (which K/V blocks of context parallelism no query sees). Both undefined: causal.
struct DocumentMask {
  Tensor doc_start;       // [B, S] i32 on the attention's device
  Tensor doc_start_host;  // [B, S] i32 on the CPU
  bool block_causal() const { return doc_start.defined(); }
};

// The CUDA twins (attention.cu); called for CUDA tensors. Dh ∈ {16, 32, 64, 128}. A defined
// doc_start makes the kernels skip every K/V tile that no query of a tile sees.
void attention_forward_cuda(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                            const AttentionShape& shape, const Tensor& doc_start = {});
void attention_backward_cuda(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                             const Tensor& out, const Tensor& lse, const AttentionShape& shape,
                             const Tensor& doc_start = {});

}  // namespace titan::model
