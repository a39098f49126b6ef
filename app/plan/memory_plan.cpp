#include "app/plan/memory_plan.h"

#include <memory>

#include "app/layer_options.h"
#include "app/pipeline_plan.h"
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

namespace {

model::ActivationShape activation_shape(const PlanJob& job,
                                        const parallel::ParallelMemoryOptions& o, bool cuda,
                                        int64_t batch) {
  model::ActivationShape shape;
  shape.batch = batch;
  shape.seq_len = job.config.training.seq_len / job.mesh.cp;
  shape.tp = job.mesh.tp;
  shape.element_bytes = static_cast<double>(dtype_size(o.compute_dtype));
  shape.stats_bytes = o.compute_dtype == DType::BF16 ? 4 : shape.element_bytes;
  shape.cuda = cuda;
  return shape;
}

void finish_plan(MemoryPlan& plan, const MemoryTimeline& t, bool cuda) {
  plan.at_peak = t.at_peak();
  plan.peak = t.peak();
  if (cuda) {
    plan.runtime_reserve = kCudaRuntimeReserveBytes;
    plan.allocator_slack = kCudaAllocatorSlack * plan.peak;
  }
}

// The step's scalars after backward: the loss sum reduced over dp and the gradient norm's sum
// of squares, [1] f64 each.
void hold_step_scalars(MemoryTimeline& t) {
  MemoryTimeline::Tag tag(t, MemoryCategory::Other);
  const MemoryTimeline::Bytes loss = t.hold(8);
  const MemoryTimeline::Bytes norm = t.hold(8);
}

// Trainer::train's steps, as the memory snapshot sees them: each micro-step cuts its inputs and
// targets from the loader's window [B, S+1] (i32 host tensors: the device's only on the CPU;
// the window goes once they are cut), runs every model's forward in order and then their
// backwards in reverse; then the gradients are finished, the step's scalars held, and the
// weights' derived state updated.
void replay_steps(const PlanJob& job, bool cuda, parallel::ParallelModelMemory& parallel_model,
                  const std::vector<std::unique_ptr<model::TransformerMemory>>& models,
                  MemoryTimeline& t, MemoryPlan& plan) {
  const JobConfig::Training& tr = job.config.training;
  const double BS = static_cast<double>(tr.local_batch_size) * static_cast<double>(tr.seq_len);
  for (int step = 0; step < kReplayedSteps; ++step) {
    parallel_model.zero_grad(t);
    for (int64_t micro = 0; micro < job.accumulation; ++micro) {
      MemoryTimeline::Tag tag(t, MemoryCategory::Other);
      MemoryTimeline::Bytes window =
          t.hold(cuda ? 0 : 4 * (BS + static_cast<double>(tr.local_batch_size)));
      const MemoryTimeline::Bytes inputs = t.hold(cuda ? 0 : 4 * BS);
      const MemoryTimeline::Bytes targets = t.hold(cuda ? 0 : 4 * BS);
      window = {};
      for (size_t i = 0; i < models.size(); ++i) {
        models[i]->forward(t, inputs);
        if (step == 0 && micro == 0 && i == 0) plan.kept_activations = models[0]->saved_bytes();
      }
      for (size_t i = models.size(); i-- > 0;) models[i]->backward(t);
    }
    parallel_model.finish_gradients(t);
    hold_step_scalars(t);
    parallel_model.on_weights_updated(t);
  }
}

// One pp rank of a pipeline: its stages' parameters, and the most (stage, micro-batch)
// activations the schedule's simulator says it holds at once, all forwarded before their
// backwards. An approximation of the executor's order, not checked against a snapshot.
MemoryPlan plan_pipeline_rank(const PlanJob& job, bool cuda, const PipelinePlan& pipe,
                              int64_t rank) {
  parallel::ParallelMemoryOptions options = parallel_memory_options(job, cuda);
  std::vector<parallel::pipeline::StageLayers> stages;
  for (int64_t s : pipe.stages_of(rank)) stages.push_back(pipe.stages[static_cast<size_t>(s)]);
  for (const parallel::pipeline::StageLayers& stage : stages) {
    if (stage.embedding) options.group_ids.push_back(0);
    for (int64_t l = stage.first_layer; l < stage.end_layer; ++l) {
      options.group_ids.push_back(static_cast<int>(l + 1));
    }
    if (stage.output) options.group_ids.push_back(static_cast<int>(job.args.n_layers + 1));
  }
  MemoryTimeline t;
  MemoryPlan plan;
  parallel::ParallelModelMemory parallel_model(job.args, options, t);
  plan.float8_notes = parallel_model.layout().float8.auto_filtered;
  const int64_t held =
      std::max<int64_t>(1, pipe.simulation.ranks[static_cast<size_t>(rank)].peak_held);
  plan.microbatches_in_flight = held;
  plan.pipeline_rank = rank;
  std::vector<std::unique_ptr<model::TransformerMemory>> models;
  for (int64_t i = 0; i < held; ++i) {
    const parallel::pipeline::StageLayers& stage = stages[static_cast<size_t>(i) % stages.size()];
    model::ActivationShape shape = activation_shape(job, options, cuda, pipe.microbatch_size);
    shape.first_layer = static_cast<int>(stage.first_layer);
    shape.layers = static_cast<int>(stage.num_layers());
    shape.embedding = stage.embedding;
    shape.head = stage.output;
    models.push_back(std::make_unique<model::TransformerMemory>(
        job.args, job.ac, shape, parallel_model.linears(), parallel_model.hooks()));
  }
  parallel_model.on_weights_updated(t);
  t.start_peak();
  replay_steps(job, cuda, parallel_model, models, t, plan);
  finish_plan(plan, t, cuda);
  return plan;
}

}  // namespace

MemoryPlan plan_memory(const PlanJob& job, bool cuda) {
  if (job.mesh.pp > 1) {
    // Every pp rank's plan; the rank that holds the most is the job's.
    const PipelinePlan pipe = plan_pipeline(job.config, job.args);
    MemoryPlan most;
    for (int64_t r = 0; r < job.mesh.pp; ++r) {
      MemoryPlan plan = plan_pipeline_rank(job, cuda, pipe, r);
      if (r == 0 || plan.total() > most.total()) most = std::move(plan);
    }
    return most;
  }
  const JobConfig::Training& tr = job.config.training;
  const parallel::ParallelMemoryOptions options = parallel_memory_options(job, cuda);
  MemoryTimeline t;
  MemoryPlan plan;

  // Trainer::build_model_and_optimizer: the parameters' storage and AdamW's moments.
  parallel::ParallelModelMemory parallel_model(job.args, options, t);
  plan.float8_notes = parallel_model.layout().float8.auto_filtered;
  std::vector<std::unique_ptr<model::TransformerMemory>> models;
  models.push_back(std::make_unique<model::TransformerMemory>(
      job.args, job.ac, activation_shape(job, options, cuda, tr.local_batch_size),
      parallel_model.linears(), parallel_model.hooks()));

  // Trainer::train: the weights' derived state, then the memory snapshot starts.
  parallel_model.on_weights_updated(t);
  t.start_peak();
  replay_steps(job, cuda, parallel_model, models, t, plan);
  finish_plan(plan, t, cuda);
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
