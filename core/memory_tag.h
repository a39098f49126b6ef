// What a tensor's bytes are for, recorded when they are allocated.
//
// The memory breakdown (profiling.enable_memory_snapshot) answers "what held the memory at the
// peak?" by category: parameters, gradients, optimizer state, gathered parameters, activations
// per block, communication buffers, FP8 caches. Rather than guess after the fact, every
// allocation is tagged with the innermost MemoryTagScope open on its thread, and the allocator
// keeps the live bytes of each tag (core/allocator.h). Scopes nest: an FSDP gather inside block
// 3's forward is tagged gathered parameters, not block 3's activations. Untagged bytes are
// `other`, so the categories always add up to the allocator's total.
#pragma once

#include <cstdint>
#include <string>

namespace titan {

enum class MemoryCategory : uint8_t {
  Other,
  Parameters,          // the rank's parameters (its shards under FSDP), and their bf16 copies
  Gradients,           // the rank's gradients (its shards under FSDP)
  OptimizerState,      // AdamW's moments
  GatheredParameters,  // FSDP all-gathered parameters and their unsharded gradients
  Activations,         // tensors made by forward and backward; `block` says whose
  CommBuffers,         // staging and receive buffers of collectives
  Fp8Cache,            // FP8 codes and scales kept between forward and backward or across steps
};
inline constexpr int kMemoryCategories = 8;

struct MemoryTag {
  MemoryCategory category = MemoryCategory::Other;
  int32_t block = -1;  // the transformer block, for Activations; -1 outside the blocks

  static MemoryTag activations(int32_t block) { return {MemoryCategory::Activations, block}; }
};

// "parameters", "activations.block.3", "activations.outside_blocks", …: the key in the snapshot.
std::string memory_tag_name(MemoryTag tag);

// The tag new allocations on this thread get: the innermost open scope's, or Other.
MemoryTag current_memory_tag();

// Tags the allocations made on this thread while it is alive. Cheap (a thread-local store).
class MemoryTagScope {
 public:
  explicit MemoryTagScope(MemoryTag tag);
  explicit MemoryTagScope(MemoryCategory category) : MemoryTagScope(MemoryTag{category, -1}) {}
  ~MemoryTagScope();
  MemoryTagScope(const MemoryTagScope&) = delete;
  MemoryTagScope& operator=(const MemoryTagScope&) = delete;

 private:
  MemoryTag previous_;
};

}  // namespace titan
