// Llama 3 model arguments and the named flavors (torchtitan's dims).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/lora_config.h"

namespace titan::model {

// Llama 3.1's rotary frequency scaling ("rope_type: llama3" in HF configs): wavelengths longer
// than the original context are stretched by `factor`, short ones kept, and a smooth ramp joins
// the two bands.
struct RopeScaling {
  bool enabled = true;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position = 8192.0;
};

struct ModelArgs {
  std::string flavor;
  int64_t dim = 0;         // D
  int64_t n_layers = 0;    // L
  int64_t n_heads = 0;     // H
  int64_t n_kv_heads = 0;  // Hkv (grouped-query attention: H % Hkv == 0)
  int64_t ffn_dim = 0;     // F, the SwiGLU hidden size
  int64_t vocab_size = 0;  // V
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  RopeScaling rope_scaling;
  // One weight for the token embedding and the output projection (Hugging Face's name), as
  // Llama 3.2 1B and 3B have: the output's logits are x·Eᵀ with E = tok_embeddings.weight.
  bool tie_word_embeddings = false;
  // Low-rank adapters on the block linears; while enabled every base weight is frozen.
  LoraConfig lora;

  int64_t head_dim() const { return dim / n_heads; }  // Dh
  int64_t qkv_dim() const { return (n_heads + 2 * n_kv_heads) * head_dim(); }
};

// "debugmodel", "llama3_2_1b", "llama3_2_3b", "llama3_8b", "llama3_70b", "llama3_405b"; throws
// InputError listing them.
ModelArgs model_flavor(std::string_view name);
std::vector<std::string> model_flavor_names();

// Checks the arguments fit together (heads divide dim, kv heads divide heads, even head dim, …)
// and give fewer than 2^63 parameters. Errors are InputErrors naming `<section>.<field>` (the
// caller's name for where the arguments came from: titan_train passes its config section
// "model"), the value and the fix.
void validate_model_args(const ModelArgs& args, std::string_view section);

// Parameter count: every weight of the model, tok_embeddings and output included (once when they
// are tied). InputError
// when it passes 2^63 (validate_model_args refuses such dims first, naming them).
int64_t count_parameters(const ModelArgs& args);
// The LoRA adapters' parameters (args.lora), which count_parameters leaves out: per adapted
// linear and part, A [r, in] and B [out, r]. 0 when LoRA is off.
int64_t count_adapter_parameters(const ModelArgs& args);
// "LoRA rank 8 (alpha 16) on wqkv, wo: 0.049M adapter parameters trained, the model's 6.16M
// frozen", or "" without LoRA: what the run report and --plan say of it.
std::string describe_lora(const ModelArgs& args);

// The model FLOPs of training on one token (forward and backward), torchtitan's count for MFU
// (get_dense_model_nparams_and_flops in torchtitan/models/utils.py, formerly
// get_num_flop_per_token in torchtitan/utils.py):
//
//   6·(params − embedding params) + 12·L·H·Dh·S
//
// 6 FLOPs per weight per token (a multiply-add in forward, two in backward); the embedding is
// a lookup, so tok_embeddings' V·D weights are left out (torchtitan subtracts the nn.Embedding
// children's parameters), while the output projection and the norms count — the output's GEMM
// also when its weight is the embedding's (torchtitan's count, which deduplicates the shared
// weight before subtracting, loses it there). Attention adds
// Q·Kᵀ and P·V, 2·S·Dh multiply-adds per head and token in forward and twice that in backward:
// 12·L·H·Dh·S, without halving for the causal mask, and without flash attention's backward
// recompute (model FLOPs, not hardware FLOPs). S = training.seq_len.
//
// `attention_keys` is that S: the keys a token's attention counts, the whole window in
// torchtitan's count. Under block_causal a token attends within its document only, and the
// count takes Σ n² / S over a window's documents instead (data/documents.h), the mean length of
// the document a token sits in: the same convention (no halving), over what is computed.
//
// With LoRA the frozen weights run no grad-weight GEMM: 4 FLOPs each a token, not 6, and each
// adapter parameter 6 (the attention's share is unchanged: dx still flows through it).
double training_flops_per_token(const ModelArgs& args, double attention_keys);

}  // namespace titan::model
