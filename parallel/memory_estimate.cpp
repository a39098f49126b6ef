#include "parallel/memory_estimate.h"

#include "parallel/fsdp.h"  // defines: kFsdpPrefetchGroups

namespace titan::parallel {

namespace {

constexpr double kMasterBytes = 4.0;  // fp32 parameters, gradients and moments

}  // namespace

MemoryEstimate estimate_parameter_memory(const model::ModelArgs& args, const ParallelDims& dims,
                                         DType compute_dtype) {
  const double params = static_cast<double>(model::count_parameters(args));
  const double share = params / static_cast<double>(dims.dp_shard * dims.tp);
  const double compute_bytes = static_cast<double>(dtype_size(compute_dtype));
  const bool working_copy = !dims.fsdp_enabled() && compute_dtype != DType::F32;

  MemoryEstimate m;
  m[MemoryCategory::Parameters] = share * (kMasterBytes + (working_copy ? compute_bytes : 0.0));
  m[MemoryCategory::Gradients] = share * kMasterBytes;
  m[MemoryCategory::OptimizerState] = share * 2 * kMasterBytes;  // AdamW's exp_avg, exp_avg_sq
  if (dims.fsdp_enabled()) {
    // One block's tp slice: everything but tok_embeddings and output, over the layers.
    const double embeddings = 2.0 * static_cast<double>(args.vocab_size) *
                              static_cast<double>(args.dim);
    const double block = (params - embeddings) / static_cast<double>(args.n_layers * dims.tp);
    m[MemoryCategory::GatheredParameters] =
        (1 + kFsdpPrefetchGroups) * block * (compute_bytes + kMasterBytes);
  }
  return m;
}

MemoryEstimate estimate_tensor_parallel_memory(const model::ModelArgs& args,
                                               const ParallelDims& dims, int64_t tokens,
                                               DType compute_dtype) {
  MemoryEstimate m;
  if (!dims.tp_enabled()) return m;
  m[MemoryCategory::Activations] = static_cast<double>(tokens) *
                                   static_cast<double>(args.dim) *
                                   static_cast<double>(dtype_size(compute_dtype));
  return m;
}

}  // namespace titan::parallel
