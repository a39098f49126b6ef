#include "model/activation_checkpoint.h"

#include <charconv>

#include "core/check.h"

namespace titan::model {

ActivationCheckpointPolicy ActivationCheckpointPolicy::make(Mode mode,
                                                            std::string_view selective_option,
                                                            std::string_view option_key) {
  ActivationCheckpointPolicy policy;
  policy.mode = mode;
  if (mode != Mode::Selective) return policy;
  if (selective_option == "op") {
    policy.mode = Mode::Op;
    return policy;
  }
  int every = 0;
  auto [end, ec] = std::from_chars(selective_option.data(),
                                   selective_option.data() + selective_option.size(), every);
  if (ec != std::errc() || end != selective_option.data() + selective_option.size() || every < 1) {
    input_error(option_key, ": expected a positive block frequency or 'op', got '",
                selective_option, "'; use e.g. 2 to checkpoint every 2nd block");
  }
  policy.every = every;
  return policy;
}

BlockRecompute ActivationCheckpointPolicy::for_block(int layer_id) const {
  switch (mode) {
    case Mode::None: return BlockRecompute::None;
    case Mode::Full: return BlockRecompute::Full;
    case Mode::Op: return BlockRecompute::Op;
    case Mode::Selective:
      return (layer_id + 1) % every == 0 ? BlockRecompute::Full : BlockRecompute::None;
  }
  return BlockRecompute::None;
}

std::string ActivationCheckpointPolicy::describe() const {
  switch (mode) {
    case Mode::None: return "none";
    case Mode::Full: return "full";
    case Mode::Op: return "op (recompute norms and SwiGLU)";
    case Mode::Selective: return "selective (every " + std::to_string(every) + " blocks: full)";
  }
  return "?";
}

}  // namespace titan::model
