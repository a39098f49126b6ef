#include "model/activation_memory.h"

#include <algorithm>

namespace titan::model {

ActivationMemory estimate_activation_memory(const ModelArgs& args, int64_t batch, int64_t seq_len,
                                            int64_t tp, const ActivationCheckpointPolicy& policy,
                                            int64_t element_bytes) {
  const double e = static_cast<double>(element_bytes);
  const double parts = static_cast<double>(tp);
  const double tokens = static_cast<double>(batch) * static_cast<double>(seq_len);  // B·S
  const double residual = tokens / parts;                                          // T
  const double D = static_cast<double>(args.dim);
  const double Dh = static_cast<double>(args.head_dim());
  const double H = static_cast<double>(args.n_heads) / parts;
  const double Hkv = static_cast<double>(args.n_kv_heads) / parts;
  const double F = static_cast<double>(args.ffn_dim) / parts;
  const double V = static_cast<double>(args.vocab_size) / parts;

  const double norm_outputs = 2 * residual * D * e;  // attention_norm(x), ffn_norm(h)
  const double swiglu_output = tokens * F * e;
  const double block_none = 2 * residual * D * e                      // x, h
                            + norm_outputs                            //
                            + tokens * ((H + 2 * Hkv) * Dh + H * Dh) * e  // qkv, attention
                            + tokens * 2 * F * e + swiglu_output      // h13, g
                            + 4.0 * (2 * residual + tokens * H);      // rstd ×2, lse (f32)
  const double block_op = block_none - norm_outputs - swiglu_output;
  const double block_full = residual * D * e;

  ActivationMemory memory;
  double rebuilt = 0;  // the most one block rebuilds in backward
  for (int layer = 0; layer < args.n_layers; ++layer) {
    double kept = block_none;
    switch (policy.for_block(layer)) {
      case BlockRecompute::None: kept = block_none; break;
      case BlockRecompute::Op: kept = block_op; break;
      case BlockRecompute::Full: kept = block_full; break;
    }
    memory.kept_bytes += kept;
    rebuilt = std::max(rebuilt, block_none - kept);
  }
  memory.kept_bytes += 2 * residual * D * e   // the final norm's input and output
                       + tokens * V * 4.0;    // the logit gradient, f32
  memory.peak_bytes = memory.kept_bytes + rebuilt + 2 * residual * D * e;
  return memory;
}

}  // namespace titan::model
