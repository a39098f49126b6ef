// Context parallelism's part of a rank's memory estimate (core/memory_timeline.h): what
// ContextParallelGroup's attention (context_parallel.cpp) allocates beyond the local attention,
// replayed on a MemoryTimeline in the order the ring and the all-gather allocate and free it,
// beside the code it replays (docs/architecture.md#decision-19). The model's replay
// (model/activation_memory.h) calls it where a block's attention runs over the cp group.
//
//   ring        the K/V in hand and the next rank's arriving, one block's partials; in backward
//               also dq, two blocks' dK/dV (one computed while the other travels) and the partial
//               sum arriving from the rank before
//   all-gather  every rank's K/V [cp·B·L, 2·Hkv·Dh], put in sequence order; in backward
//               gathered again, with the sequence's dK/dV and the reduce-scatter's partials
//
// Accumulators and partials are f32 on CUDA and in the activations' dtype on the CPU.
#pragma once

#include <cstdint>

#include "model/activation_memory.h"
#include "parallel/context_parallel.h"

namespace titan::parallel {

class ContextParallelAttentionMemory final : public model::ContextParallelMemory {
 public:
  ContextParallelAttentionMemory(int64_t cp, CpRotateMethod method) : cp_(cp), method_(method) {}
  void attention_forward(MemoryTimeline& t, const Attention& a) const override;
  void attention_backward(MemoryTimeline& t, const Attention& a) const override;

 private:
  // gather_kv: every rank's K/V [cp·B·L, nkv] (this rank's sent from a contiguous copy), then
  // put in sequence order [B·S, nkv], which it returns.
  MemoryTimeline::Bytes gather_kv(MemoryTimeline& t, const Attention& a, int64_t nkv) const;

  int64_t cp_;
  CpRotateMethod method_;
};

}  // namespace titan::parallel
