// ColumnParallelLinear and RowParallelLinear (tensor_parallel.h), synchronous or async,
// replayed on a MemoryTimeline in the order tensor_parallel.cpp allocates and frees: the
// gathered inputs and their send copies, the reduce-scatter's chunks and partials, and each
// chunk GEMM's operands (the largest of the CPU's row slices). Counted as activations, in the
// block that runs the linear. ParallelModelMemory (memory_estimate.h) gives every linear the
// plan's style.
#pragma once

#include <cstdint>
#include <memory>

#include "model/activation_memory.h"

namespace titan::parallel {

// `column`: ColumnParallelLinear, else RowParallelLinear, over `tp` ranks.
std::unique_ptr<model::LinearMemory> tensor_parallel_linear_memory(bool column, int64_t tp,
                                                                   bool async, bool cuda);

}  // namespace titan::parallel
