// Activation checkpointing as a per-block policy (docs/architecture.md#decision-11).
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

#include <ostream>
#include <string>
#include <string_view>

#include "core/enum_names.h"

namespace titan::model {

enum class BlockRecompute { None, Full, Op };

enum class ActivationCheckpointMode { None, Full, Selective, Op };
inline constexpr EnumName<ActivationCheckpointMode> kActivationCheckpointModeList[] = {
    {ActivationCheckpointMode::None, "none"},
    {ActivationCheckpointMode::Full, "full"},
    {ActivationCheckpointMode::Selective, "selective"},
    {ActivationCheckpointMode::Op, "op"},
};
inline constexpr EnumNames<ActivationCheckpointMode> kActivationCheckpointModes{
    "mode", kActivationCheckpointModeList};
inline std::ostream& operator<<(std::ostream& os, ActivationCheckpointMode mode) {
  return os << kActivationCheckpointModes.name(mode);
}

struct ActivationCheckpointPolicy {
  using Mode = ActivationCheckpointMode;
  Mode mode = Mode::None;
  int every = 2;  // Selective: checkpoint every N-th block

  // `mode` with torchtitan's selective_ac_option, which only selective reads: a block
  // frequency N, or "op" (then selective means op). InputError naming `option_key` (the
  // caller's name for the option) when selective gets anything else.
  static ActivationCheckpointPolicy make(Mode mode, std::string_view selective_option,
                                         std::string_view option_key);

  BlockRecompute for_block(int layer_id) const;
  std::string describe() const;  // "selective (every 2nd block)"
};

}  // namespace titan::model
