// What parallelize() makes a rank hold for the model's parameters, and the buffers tensor
// parallelism adds to a step, estimated from the shapes before the model is built, in the
// memory snapshot's categories (core/memory_estimate.h). P is model::count_parameters, sharded
// over dp_shard × tp (FSDP shards each tp slice along dim 0):
//
//   Parameters          the rank's fp32 master parameters, P / (dp_shard·tp); without FSDP and
//                       with a compute dtype other than fp32, their working copy in it too
//                       (ReplicatedDataParallel's; under FSDP the gather makes that copy)
//   Gradients           fp32, the same share
//   OptimizerState      AdamW's two fp32 moments of that share
//   GatheredParameters  FSDP (dp_shard > 1): the block that runs and the kFsdpPrefetchGroups
//                       whose gathers are posted ahead of it (fsdp.h), each block's tp slice in
//                       the compute dtype, with its fp32 unsharded gradient
//   Activations         tp > 1: the gathered input of one sequence-parallel linear, [B·S, D] in
//                       the compute dtype, which exists only around that linear's GEMM (its
//                       backward gathers it again) and so adds to the blocks' peak; the snapshot
//                       counts it in the block that runs it
//
// Not counted: the embedding and head groups' gathers (the blocks' are the larger for every
// flavor), the reduce-scatter's packed gradient buffers, and FSDP padding rows.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/memory_estimate.h"
#include "model/config.h"
#include "parallel/parallel_dims.h"

namespace titan::parallel {

// The parameters, their gradients and optimizer state, and FSDP's gathered blocks, of one rank
// of `dims` computing in `compute_dtype`.
MemoryEstimate estimate_parameter_memory(const model::ModelArgs& args, const ParallelDims& dims,
                                         DType compute_dtype);

// What tensor parallelism adds to one micro-batch of `tokens` = B·S tokens (0 at tp 1).
MemoryEstimate estimate_tensor_parallel_memory(const model::ModelArgs& args,
                                               const ParallelDims& dims, int64_t tokens,
                                               DType compute_dtype);

}  // namespace titan::parallel
