// Low-rank adaptation (LoRA, Hu et al. 2021) as a run asks for it: which linears get adapters,
// their rank and scale. With LoRA on, every base weight is frozen (no gradient, no optimizer
// state) and only the adapters train; model/lora.h computes with them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace titan::model {

struct LoraConfig {
  int64_t rank = 0;    // r; 0: LoRA off, every weight trains
  double alpha = 16;   // the adapter's output is scaled by alpha / r (PEFT's lora_alpha)
  double dropout = 0;  // only 0: dropout on the adapter's input is not implemented
  // Block linears by name: "wqkv", "wo", "w13", "w2" (PEFT's q/k/v_proj, o_proj, gate/up_proj,
  // down_proj). The fused ones get one adapter per part, as PEFT adapts each projection.
  std::vector<std::string> targets = {"wqkv", "wo"};

  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / static_cast<double>(rank); }
  bool targets_linear(std::string_view name) const;
};

// The block linears LoRA can adapt, in block order.
const std::vector<std::string>& lora_target_names();
// The parts of one of them, each with an adapter of its own: wqkv 3 (q, k, v), w13 2 (gate, up),
// wo and w2 1. An adapter of rank r on a linear [out, in] holds r·(parts·in + out) values.
int64_t lora_target_parts(std::string_view name);

// Throws InputError naming `<section>.<field>`, the value and the fix: a negative rank, a
// dropout other than 0, an empty or unknown target.
void validate_lora(const LoraConfig& lora, std::string_view section);

}  // namespace titan::model
