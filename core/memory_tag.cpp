#include "core/memory_tag.h"

namespace titan {

namespace {
thread_local MemoryTag current_tag;
}

std::string memory_tag_name(MemoryTag tag) {
  switch (tag.category) {
    case MemoryCategory::Other: return "other";
    case MemoryCategory::Parameters: return "parameters";
    case MemoryCategory::Gradients: return "gradients";
    case MemoryCategory::OptimizerState: return "optimizer_state";
    case MemoryCategory::GatheredParameters: return "gathered_parameters";
    case MemoryCategory::Activations:
      return tag.block < 0 ? std::string("activations.outside_blocks")
                           : "activations.block." + std::to_string(tag.block);
    case MemoryCategory::CommBuffers: return "comm_buffers";
    case MemoryCategory::Fp8Cache: return "fp8_cache";
  }
  return "other";
}

MemoryTag current_memory_tag() { return current_tag; }

MemoryTagScope::MemoryTagScope(MemoryTag tag) : previous_(current_tag) { current_tag = tag; }

MemoryTagScope::~MemoryTagScope() { current_tag = previous_; }

}  // namespace titan
