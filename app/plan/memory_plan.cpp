#include "app/plan/memory_plan.h"

#include <memory>

#include "app/layer_options.h"
#include "core/check.h"
#include "model/activation_memory.h"
#include "parallel/memory_estimate.h"

namespace titan::app::plan {

namespace {

// How many steps the replay runs: the first allocates what every later one reuses (the RoPE
// tables), and the second starts with the first's last reduce-scatter drained.
constexpr int kReplayedSteps = 2;

}  // namespace

parallel::ParallelMemoryOptions parallel_memory_options(const PlanJob& job, bool cuda) {
  const parallel::ParallelizeOptions p =
      parallelize_options(job.config, cuda ? Device::cuda(0) : Device::cpu());
  parallel::ParallelMemoryOptions o;
  o.dims = job.mesh.dims();
  o.context_parallel = job.mesh.cp;
  o.compute_dtype = p.placement.compute_dtype;
  o.cuda = cuda;
  o.reshard_after_forward = p.reshard_after_forward;
  o.async_tensor_parallel = p.async_tensor_parallel && job.mesh.tp > 1;
  o.bf16_gemm_operands = p.bf16_gemm_operands;
  o.float8 = p.float8;
  o.float8_all_gather = p.float8_all_gather;
  o.precompute_float8_scales = p.precompute_float8_scales;
  return o;
}

MemoryPlan plan_memory(const PlanJob& job, bool cuda) {
  const JobConfig::Training& tr = job.config.training;
  const parallel::ParallelMemoryOptions options = parallel_memory_options(job, cuda);
  MemoryTimeline t;
  MemoryPlan plan;

  // Trainer::build_model_and_optimizer: the parameters' storage and AdamW's moments.
  parallel::ParallelModelMemory parallel_model(job.args, options, t);
  plan.float8_notes = parallel_model.layout().float8.auto_filtered;

  model::ActivationShape shape;
  shape.batch = tr.local_batch_size;
  shape.seq_len = tr.seq_len / job.mesh.cp;
  shape.tp = job.mesh.tp;
  shape.element_bytes = static_cast<double>(dtype_size(options.compute_dtype));
  shape.stats_bytes = options.compute_dtype == DType::BF16 ? 4 : shape.element_bytes;
  shape.cuda = cuda;
  const int64_t in_flight =
      std::max<int64_t>(1, std::min(job.microbatches_in_flight, job.accumulation));
  plan.microbatches_in_flight = in_flight;
  std::vector<std::unique_ptr<model::TransformerMemory>> models;
  for (int64_t i = 0; i < in_flight; ++i) {
    models.push_back(std::make_unique<model::TransformerMemory>(
        job.args, job.ac, shape, parallel_model.linears(), parallel_model.hooks()));
  }

  // Trainer::train: the weights' derived state, then the memory snapshot starts.
  parallel_model.on_weights_updated(t);
  t.start_peak();
  const double BS = static_cast<double>(tr.local_batch_size) * static_cast<double>(tr.seq_len);
  for (int step = 0; step < kReplayedSteps; ++step) {
    parallel_model.zero_grad(t);
    for (int64_t micro = 0; micro < job.accumulation; micro += in_flight) {
      // The loader's window [B, S+1] and the inputs and targets [B, S] cut from it, i32: host
      // tensors, the device's only on the CPU.
      std::vector<MemoryTimeline::Bytes> batches;
      for (int64_t i = 0; i < in_flight; ++i) {
        MemoryTimeline::Tag tag(t, MemoryCategory::Other);
        const double window = cuda ? 0 : 4 * (BS + static_cast<double>(tr.local_batch_size));
        batches.push_back(t.hold(window));
        batches.push_back(t.hold(cuda ? 0 : 4 * BS));  // inputs
        batches.push_back(t.hold(cuda ? 0 : 4 * BS));  // targets
        models[static_cast<size_t>(i)]->forward(t, batches[batches.size() - 2]);
        if (step == 0 && micro == 0 && i == 0) plan.kept_activations = models[0]->saved_bytes();
      }
      for (int64_t i = 0; i < in_flight; ++i) models[static_cast<size_t>(i)]->backward(t);
    }
    parallel_model.finish_gradients(t);
    {
      // The loss sum reduced over dp and the gradient norm's sum of squares: [1] f64 each.
      MemoryTimeline::Tag tag(t, MemoryCategory::Other);
      const MemoryTimeline::Bytes loss = t.hold(8);
      const MemoryTimeline::Bytes norm = t.hold(8);
    }
    parallel_model.on_weights_updated(t);
  }
  plan.at_peak = t.at_peak();
  plan.peak = t.peak();
  if (cuda) {
    plan.runtime_reserve = kCudaRuntimeReserveBytes;
    plan.allocator_slack = kCudaAllocatorSlack * plan.peak;
  }
  return plan;
}

std::string category_name(MemoryCategory category) {
  return category == MemoryCategory::Activations ? std::string("activations")
                                                 : memory_tag_name({category, -1});
}

MemoryCategory largest_category(const MemoryPlan& plan) {
  MemoryCategory largest = MemoryCategory::Other;
  for (int i = 0; i < kMemoryCategories; ++i) {
    const auto c = static_cast<MemoryCategory>(i);
    if (plan.at_peak[c] > plan.at_peak[largest]) largest = c;
  }
  return largest;
}

std::string how_to_shrink(MemoryCategory category, const PlanJob& job) {
  const JobConfig& c = job.config;
  const PlanMesh& m = job.mesh;
  switch (category) {
    case MemoryCategory::Parameters:
    case MemoryCategory::Gradients:
    case MemoryCategory::OptimizerState:
      return detail::concat("shard them over more ranks: raise parallelism.dp_shard (now ",
                            m.dp_shard, ") or parallelism.tp (now ", m.tp,
                            "), or run on more devices");
    case MemoryCategory::GatheredParameters:
      if (!c.parallelism.reshard_after_forward) {
        return "set parallelism.reshard_after_forward true (now false: every block stays "
               "gathered from its forward to its backward)";
      }
      return detail::concat("raise parallelism.tp (now ", m.tp,
                            "): each gathered block is its tp slice");
    case MemoryCategory::Activations:
    case MemoryCategory::CommBuffers:
      return detail::concat(
          c.activation_checkpoint.mode == model::ActivationCheckpointMode::Full
              ? std::string("")
              : detail::concat("set activation_checkpoint.mode full (now ",
                               c.activation_checkpoint.mode, "), "),
          "lower training.local_batch_size (now ", c.training.local_batch_size,
          ") or training.seq_len (now ", c.training.seq_len,
          "; a larger training.global_batch_size keeps the batch by accumulating), or raise "
          "parallelism.tp (now ",
          m.tp, ")");
    case MemoryCategory::Fp8Cache:
      return detail::concat("lower training.local_batch_size (now ", c.training.local_batch_size,
                            "), or keep parallelism.reshard_after_forward true with "
                            "float8.enable_fsdp_float8_all_gather");
    case MemoryCategory::Other: break;
  }
  return "lower training.local_batch_size";
}

}  // namespace titan::app::plan
