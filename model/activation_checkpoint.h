// Activation checkpointing as a per-block policy (ARCHITECTURE.md decision 11).
//
//   none        every block keeps all its activations for backward.
//   full        every block keeps only its input and recomputes its whole forward in backward
//               (collectives included, under tensor parallelism).
//   selective   every N-th block is `full`, the others `none` (torchtitan's selective_ac_option N:
//               blocks N-1, 2N-1, …).
//   op          every block keeps its GEMM and attention outputs and recomputes the cheap
//               element-wise ops (the two norms and SwiGLU) in backward.
//
// Recomputation runs the same deterministic CPU ops on the same inputs, so gradients are
// bit-identical to `none` in every mode; a test holds the project to that.
#pragma once

#include <string>
#include <string_view>

namespace titan::model {

enum class BlockRecompute { None, Full, Op };

struct ActivationCheckpointPolicy {
  enum class Mode { None, Full, Selective, Op };
  Mode mode = Mode::None;
  int every = 2;  // Selective: checkpoint every N-th block

  // mode: "none" | "full" | "selective" | "op"; option: torchtitan's selective_ac_option, a
  // block frequency N or "op" (then selective means op). Errors name the config key.
  static ActivationCheckpointPolicy parse(std::string_view mode, std::string_view option);

  BlockRecompute for_block(int layer_id) const;
  std::string describe() const;  // "selective (every 2nd block)"
};

}  // namespace titan::model
