// A rank's memory in a training step, planned before anything is allocated: the one memory
// model, used by titan_train --plan and by the trainer's up-front check alike.
//
// The plan replays what Trainer::setup and the step (train_step.h) allocate — parallelize()'s
// parameters and AdamW's state, then two steps of zero_grad, each micro-batch's forward and
// backward, finish_gradients and the optimizer — on a MemoryTimeline (core/memory_timeline.h),
// through each layer's own estimate of what it allocates (model/activation_memory.h,
// parallel/memory_estimate.h, fp8/float8_memory.h). Its peak, category by category, is what a
// memory snapshot (profiling.enable_memory_snapshot) of the same run measures: the tensors.
//
// Beyond the tensors a GPU also holds what a snapshot does not count: the CUDA context, the
// cuBLASLt workspace and NCCL's buffers (runtime_reserve), and the free blocks the caching
// allocator keeps (allocator_slack). Both are assumptions, printed as such.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/plan/plan_job.h"
#include "core/memory_timeline.h"
#include "parallel/memory_estimate.h"

namespace titan::app::plan {

struct MemoryPlan {
  MemoryEstimate at_peak;       // the tensors at the step's peak, by category
  double peak = 0;              // their sum: the snapshot's total_bytes
  double kept_activations = 0;  // what one micro-batch keeps from its forward to its backward
  int64_t microbatches_in_flight = 1;
  int64_t pipeline_rank = -1;  // pp > 1: the pp rank planned (the one that holds the most)
  double runtime_reserve = 0;  // not tensors: CUDA context, cuBLASLt workspace, NCCL
  double allocator_slack = 0;  // not tensors: the caching allocator's free blocks
  std::vector<std::string> float8_notes;  // FP8 layers kept in high precision, and why

  double total() const { return peak + runtime_reserve + allocator_slack; }
};

// The assumptions behind runtime_reserve and allocator_slack, with their sources.
inline constexpr double kCudaRuntimeReserveBytes = 1024.0 * 1024.0 * 1024.0;
inline constexpr double kCudaAllocatorSlack = 0.05;  // of the tensors' peak
inline constexpr const char* kCudaReserveSource =
    "1 GiB: the CUDA context (about 0.5 GiB on Hopper), the cuBLASLt workspace (32 MiB, "
    "docs/cuda.md) and NCCL's channel buffers; assumed, not measured";
inline constexpr const char* kCudaSlackSource =
    "5% of the tensors' peak: free blocks the caching allocator keeps; assumed, not measured "
    "(a snapshot's allocator_cache_bytes is the figure to compare)";

// What parallelize() would be given for `job` on a GPU (`cuda`) or the CPU, as the estimates
// take it: layer_options.h's reading of the config, on the plan's mesh.
parallel::ParallelMemoryOptions parallel_memory_options(const PlanJob& job, bool cuda);

// The plan of one rank of `job` computing on a GPU (`cuda`: bf16 compute, the CUDA kernels'
// workspaces) or on the CPU. Under pipeline parallelism, of the pp rank that holds the most: its
// stages' parameters and its action list replayed as the executor runs it.
MemoryPlan plan_memory(const PlanJob& job, bool cuda);
// Under pipeline parallelism, the plan of pp rank `rank` (what its memory snapshot measures).
MemoryPlan plan_pipeline_rank(const PlanJob& job, bool cuda, int64_t rank);

// What would shrink `category` for this job, as an instruction naming the keys: "set
// activation_checkpoint.mode full (now none), lower training.local_batch_size (now 8) …".
std::string how_to_shrink(MemoryCategory category, const PlanJob& job);

// "optimizer_state", "activations", …: the snapshot's category names (activation blocks as one).
std::string category_name(MemoryCategory category);

// The largest category of a plan's peak.
MemoryCategory largest_category(const MemoryPlan& plan);

}  // namespace titan::app::plan
