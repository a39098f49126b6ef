#include "model/activation_checkpoint.h"

#include <charconv>

#include "core/check.h"

namespace titan::model {

ActivationCheckpointPolicy ActivationCheckpointPolicy::parse(std::string_view mode,
                                                             std::string_view option) {
  ActivationCheckpointPolicy policy;
  if (mode == "none") return policy;
  if (mode == "full") {
    policy.mode = Mode::Full;
    return policy;
  }
  if (mode == "op") {
    policy.mode = Mode::Op;
    return policy;
  }
  if (mode != "selective") {
    input_error("activation_checkpoint.mode: unknown mode '", mode,
                "'; use none, full, selective or op");
  }
  if (option == "op") {
    policy.mode = Mode::Op;
    return policy;
  }
  int every = 0;
  auto [end, ec] = std::from_chars(option.data(), option.data() + option.size(), every);
  if (ec != std::errc() || end != option.data() + option.size() || every < 1) {
    input_error(
        "activation_checkpoint.selective_ac_option: expected a positive block frequency "
        "or 'op', got '",
        option, "'; use e.g. 2 to checkpoint every 2nd block");
  }
  policy.mode = Mode::Selective;
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
