// FullyShardedDataParallel's hooks (fsdp.h) replayed on a MemoryTimeline, group by group, in
// the order fsdp.cpp allocates and frees: the gather buffers and gathered parameters of the
// group that runs and of the kFsdpPrefetchGroups posted ahead of it (every group without
// reshard_after_forward), their unsharded fp32 gradients in backward, the packed reduce-scatter
// input and its output, and the float8 all-gather's codes and scales (fp8/float8_memory.h).
// Under pipeline parallelism with the step gradient reduction the unsharded gradients stay from
// a group's first backward to finish_gradients, which reduce-scatters each group once; with the
// microbatch one each group is reduced after every backward or W, and a split backward lets its
// deferred weights' gradients go from I to W. ParallelModelMemory
// (memory_estimate.h) composes it with the other layers' replays.
#pragma once

#include <memory>

#include "model/activation_memory.h"
#include "parallel/memory_estimate.h"

namespace titan::parallel {

class FsdpMemory : public model::ParamHooksMemory {
 public:
  static std::unique_ptr<FsdpMemory> make(const ParallelLayout& layout,
                                          const ParallelMemoryOptions& options);
  // DataParallel's calls in the step (train_step.h), as memory.
  virtual void zero_grad() = 0;
  virtual void finish_gradients(MemoryTimeline& t) = 0;
  virtual void on_weights_updated(MemoryTimeline& t) = 0;
};

}  // namespace titan::parallel
