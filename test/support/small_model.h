// A small Llama 3 for tests that run the model in-process: the debug model's kind (its norm,
// RoPE, init) at shapes that run in milliseconds, with grouped-query attention (Hkv < H) unless
// a test asks otherwise.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"

namespace titan::testing {

struct SmallModelDims {
  int64_t dim = 64;         // D
  int64_t n_layers = 4;     // L
  int64_t n_heads = 4;      // H
  int64_t n_kv_heads = 2;   // Hkv
  int64_t ffn_dim = 128;    // F
  int64_t vocab_size = 258;  // V: the byte tokenizer's 256 bytes, BOS and EOS
};

inline model::ModelArgs small_model_args(const SmallModelDims& dims = {}) {
  model::ModelArgs args = model::model_flavor("debugmodel");
  args.dim = dims.dim;
  args.n_layers = dims.n_layers;
  args.n_heads = dims.n_heads;
  args.n_kv_heads = dims.n_kv_heads;
  args.ffn_dim = dims.ffn_dim;
  args.vocab_size = dims.vocab_size;
  return args;
}

// The same dims as titan_train flags, for tests that run the binaries ("--model.dim 64 … "; the
// vocabulary stays the flavor's, which the byte tokenizer's 258 tokens fit).
inline std::string small_model_flags(const SmallModelDims& dims = {}) {
  return "--model.dim " + std::to_string(dims.dim) + " --model.n_layers " +
         std::to_string(dims.n_layers) + " --model.n_heads " + std::to_string(dims.n_heads) +
         " --model.n_kv_heads " + std::to_string(dims.n_kv_heads) + " --model.ffn_dim " +
         std::to_string(dims.ffn_dim) + " ";
}

}  // namespace titan::testing
