#include "app/plan/memory_plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>

#include "app/layer_options.h"
#include "app/pipeline_plan.h"
#include "core/check.h"
#include "model/activation_memory.h"
#include "parallel/context_parallel_memory.h"
#include "parallel/device_mesh.h"
#include "parallel/memory_estimate.h"
#include "parallel/pipeline/send_release.h"

namespace titan::app::plan {

namespace {

using Bytes = MemoryTimeline::Bytes;

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
  o.pipeline_gradient_reduction = p.pipeline_gradient_reduction;
  o.optimizer_state_dtype = job.config.optimizer.state_dtype;
  o.muon = job.config.optimizer.name == "Muon";
  return o;
}

namespace {

model::ActivationShape activation_shape(const PlanJob& job,
                                        const parallel::ParallelMemoryOptions& o, bool cuda,
                                        int64_t batch) {
  model::ActivationShape shape;
  shape.batch = batch;
  shape.seq_len = job.config.training.seq_len / job.mesh.cp;
  if (job.mesh.cp > 1) {
    shape.context_parallel = std::make_shared<parallel::ContextParallelAttentionMemory>(
        job.mesh.cp, job.config.parallelism.context_parallel_comm);
  }
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
// the window goes once they are cut; under cp each is then cut to this rank's [B, S/cp]), runs
// every model's forward in order and then their backwards in reverse; then the gradients are
// finished, the step's scalars held, and the weights' derived state updated.
// One micro-step's forward and backward, given the inputs' tokens (the targets beside them).
using MicroStep = std::function<void(const Bytes& inputs)>;

void replay_steps(const PlanJob& job, bool cuda, parallel::ParallelModelMemory& parallel_model,
                  MemoryTimeline& t, const MicroStep& micro_step) {
  const JobConfig::Training& tr = job.config.training;
  const double B = static_cast<double>(tr.local_batch_size);
  const double BS = B * static_cast<double>(tr.seq_len);
  const double local_BS = BS / static_cast<double>(job.mesh.cp);
  for (int step = 0; step < kReplayedSteps; ++step) {
    parallel_model.zero_grad(t);
    for (int64_t micro = 0; micro < job.accumulation; ++micro) {
      MemoryTimeline::Tag tag(t, MemoryCategory::Other);
      MemoryTimeline::Bytes window = t.hold(cuda ? 0 : 4 * (BS + B));
      MemoryTimeline::Bytes inputs = t.hold(cuda ? 0 : 4 * BS);
      MemoryTimeline::Bytes targets = t.hold(cuda ? 0 : 4 * BS);
      if (job.mesh.cp > 1) {  // local_tokens (train_step.h): cp_shard of each
        MemoryTimeline::Bytes local_inputs = t.hold(cuda ? 0 : 4 * local_BS);
        MemoryTimeline::Bytes local_targets = t.hold(cuda ? 0 : 4 * local_BS);
        inputs = std::move(local_inputs);
        targets = std::move(local_targets);
      }
      window = {};
      micro_step(inputs);
    }
    parallel_model.finish_gradients(t);
    hold_step_scalars(t);
    parallel_model.on_weights_updated(t);
  }
}

// parallel::PipelineExecutor::run on one pp rank's action list, as allocations: each stage's
// part (one TransformerMemory a stage, its micro-batches' activations taken out after their
// forward and put back for their backward), the receive buffers posted on the rank's device when
// the compute before them starts, a stage's output and input gradient handed over on the rank or
// sent, and each send's tensor for as long as the transport holds it (SentTensors). A split
// backward holds each linear's grad-weight operands from its I to its W
// (TransformerMemory::take_deferred). The executor may run a W early while a message is late (on
// the CPU), which only frees them sooner.
class PipelineReplay {
 public:
  // How long a sent tensor stays on the sender's device.
  enum class SentTensors {
    UntilListEnds,     // MPI on the CPU: the send's request holds it until the list's end waits
    UntilTransferred,  // NCCL: until the peer has received it (pipeline::send_release_points)
    CopiedAtPost,      // MPI on CUDA: the communicator copies it to the host at the post
  };

  PipelineReplay(const PlanJob& job, bool cuda, const PipelinePlan& pipe, int64_t rank,
                 std::map<int64_t, std::unique_ptr<model::TransformerMemory>>& parts,
                 model::ParamHooksMemory& hooks, MemoryTimeline& t)
      : pipe_(pipe),
        actions_(pipe.schedule.ranks[static_cast<size_t>(rank)]),
        parts_(parts),
        hooks_(hooks),
        t_(t) {
    const int64_t b = pipe.microbatch_size;
    const int64_t S = job.config.training.seq_len / job.mesh.cp;
    const double e =
        static_cast<double>(dtype_size(parallel_memory_options(job, cuda).compute_dtype));
    boundary_bytes_ =
        static_cast<double>(b * S / job.mesh.tp) * static_cast<double>(job.args.dim) * e;
    const parallel::CommBackend backend = parallel::resolve_comm_backend(
        job.config.parallelism.comm_backend, cuda ? Device::cuda(0) : Device::cpu());
    sent_ = !cuda                                    ? SentTensors::UntilListEnds
            : backend == parallel::CommBackend::Nccl ? SentTensors::UntilTransferred
                                                     : SentTensors::CopiedAtPost;
    if (sent_ == SentTensors::UntilTransferred) {
      release_ = parallel::pipeline::send_release_points(
          pipe.schedule, pipe.simulation)[static_cast<size_t>(rank)];
    }
  }

  // One micro-step's list, on the tokens and targets [m·b, S] the caller holds.
  void run() {
    posted_.assign(actions_.size(), false);
    for (size_t i = 0; i < actions_.size(); ++i) {
      if (!actions_[i].is_compute()) {
        post(i);
        continue;
      }
      for (size_t j = i + 1; j < actions_.size() && !actions_[j].is_compute(); ++j) {
        if (is_receive(actions_[j])) post(j);
      }
      // The sends whose transfers are done by now go back to the allocator.
      sends_.erase(i);
      compute(actions_[i]);
    }
    sends_.clear();  // the sends are waited for at the end of the list
  }
  // What the rank's first forward kept of its micro-batch.
  double first_kept() const { return first_kept_; }

 private:
  using Key = std::pair<int64_t, int64_t>;  // (stage, microbatch)
  using Kind = parallel::pipeline::ActionKind;

  static bool is_receive(const parallel::pipeline::Action& a) {
    return a.kind == Kind::RECV_ACT || a.kind == Kind::RECV_GRAD;
  }

  void post(size_t i) {
    if (posted_[i]) return;
    posted_[i] = true;
    const parallel::pipeline::Action& a = actions_[i];
    const Key key{a.stage, a.microbatch};
    switch (a.kind) {
      case Kind::SEND_ACT:
      case Kind::SEND_GRAD: {
        Bytes sent = take(a.kind == Kind::SEND_ACT ? outputs_ : input_grads_, key);
        const size_t until = sent_ == SentTensors::UntilListEnds ? actions_.size()
                             : sent_ == SentTensors::UntilTransferred
                                 ? static_cast<size_t>(release_[i])
                                 : i;
        if (until > i) sends_[until].push_back(std::move(sent));
        break;
      }
      case Kind::RECV_ACT:
      case Kind::RECV_GRAD: {
        MemoryTimeline::Tag tag(t_, MemoryCategory::Activations);
        (a.kind == Kind::RECV_ACT ? inputs_ : output_grads_)[key] = t_.hold(boundary_bytes_);
        break;
      }
      default: break;
    }
  }

  // A received tensor as the compute reads it: the buffer posted for it.
  Bytes arrived(std::map<Key, Bytes>& from, const Key& key) { return take(from, key); }

  static Bytes take(std::map<Key, Bytes>& from, const Key& key) {
    const auto it = from.find(key);
    TT_CHECK(it != from.end(), "memory plan: the pipeline's action list is out of order at stage ",
             key.first, " microbatch ", key.second);
    Bytes b = std::move(it->second);
    from.erase(it);
    return b;
  }

  void compute(const parallel::pipeline::Action& a) {
    model::TransformerMemory& part = *parts_.at(a.stage);
    const Key key{a.stage, a.microbatch};
    switch (a.kind) {
      case Kind::FORWARD: {
        // The embedding's stage reads its micro-batch's rows of the caller's tokens (a view).
        const Bytes input = has_embedding(a.stage) ? Bytes() : arrived(inputs_, key);
        part.forward(t_, input);
        if (first_kept_ == 0) first_kept_ = part.saved_bytes();
        if (!has_head(a.stage)) {  // handed over on this rank, or sent
          (parts_.contains(a.stage + 1) ? inputs_[{a.stage + 1, a.microbatch}] : outputs_[key]) =
              part.output();
        }
        held_[key] = part.take_saved();
        break;
      }
      case Kind::BACKWARD_FULL:
      case Kind::BACKWARD_INPUT: {
        const Bytes dout = has_head(a.stage) ? Bytes() : arrived(output_grads_, key);
        const auto held = held_.find(key);
        TT_CHECK(held != held_.end(), "memory plan: a backward before its forward");
        part.restore_saved(std::move(held->second));
        held_.erase(held);
        const bool split = a.kind == Kind::BACKWARD_INPUT;
        Bytes dx = part.backward(t_, dout, split);
        if (split) deferred_[key] = part.take_deferred();
        if (!has_embedding(a.stage)) {
          if (parts_.contains(a.stage - 1)) {
            output_grads_[{a.stage - 1, a.microbatch}] = std::move(dx);
          } else {
            input_grads_[key] = std::move(dx);
          }
        }
        break;
      }
      case Kind::BACKWARD_WEIGHT: {
        const auto deferred = deferred_.find(key);
        TT_CHECK(deferred != deferred_.end(), "memory plan: a W before its I");
        model::run_deferred(t_, hooks_, std::move(deferred->second));
        deferred_.erase(deferred);
        break;
      }
      default: break;
    }
  }

  bool has_embedding(int64_t stage) const {
    return pipe_.stages[static_cast<size_t>(stage)].embedding;
  }
  bool has_head(int64_t stage) const { return pipe_.stages[static_cast<size_t>(stage)].output; }

  const PipelinePlan& pipe_;
  const std::vector<parallel::pipeline::Action>& actions_;
  std::map<int64_t, std::unique_ptr<model::TransformerMemory>>& parts_;
  model::ParamHooksMemory& hooks_;
  MemoryTimeline& t_;
  SentTensors sent_ = SentTensors::UntilListEnds;
  std::vector<int64_t> release_;  // UntilTransferred: each send's release point in the list
  double boundary_bytes_ = 0, first_kept_ = 0;
  std::vector<bool> posted_;
  std::map<Key, Bytes> inputs_, output_grads_, outputs_, input_grads_;
  std::map<Key, std::shared_ptr<model::TransformerMemory::Saved>> held_;
  std::map<Key, std::vector<model::DeferredGradWeight>> deferred_;  // each I's, until its W
  std::map<size_t, std::vector<Bytes>> sends_;  // by the list index before which they go
};

// One pp rank of a pipeline: its stages' parameters and its action list, replayed.
MemoryPlan replay_pipeline_rank(const PlanJob& job, bool cuda, const PipelinePlan& pipe,
                                int64_t rank) {
  parallel::ParallelMemoryOptions options = parallel_memory_options(job, cuda);
  const std::vector<int64_t> stages = pipe.stages_of(rank);
  for (int64_t s : stages) {
    const parallel::pipeline::StageLayers& stage = pipe.stages[static_cast<size_t>(s)];
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
  plan.pipeline_rank = rank;
  plan.microbatches_in_flight =
      std::max<int64_t>(1, pipe.simulation.ranks[static_cast<size_t>(rank)].peak_held);
  std::map<int64_t, std::unique_ptr<model::TransformerMemory>> parts;
  for (int64_t s : stages) {
    const parallel::pipeline::StageLayers& stage = pipe.stages[static_cast<size_t>(s)];
    model::ActivationShape shape = activation_shape(job, options, cuda, pipe.microbatch_size);
    shape.first_layer = static_cast<int>(stage.first_layer);
    shape.layers = static_cast<int>(stage.num_layers());
    shape.embedding = stage.embedding;
    shape.head = stage.output;
    parts[s] = std::make_unique<model::TransformerMemory>(
        job.args, job.ac, shape, parallel_model.linears(), parallel_model.hooks());
  }
  PipelineReplay pipeline(job, cuda, pipe, rank, parts, parallel_model.hooks(), t);
  parallel_model.on_weights_updated(t);
  t.start_peak();
  replay_steps(job, cuda, parallel_model, t, [&](const Bytes&) {
    pipeline.run();
    if (plan.kept_activations == 0) plan.kept_activations = pipeline.first_kept();
  });
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
      MemoryPlan plan = replay_pipeline_rank(job, cuda, pipe, r);
      if (r == 0 || plan.total() > most.total()) most = std::move(plan);
    }
    return most;
  }
  const JobConfig::Training& tr = job.config.training;
  const parallel::ParallelMemoryOptions options = parallel_memory_options(job, cuda);
  MemoryTimeline t;
  MemoryPlan plan;

  // Trainer::build_model_and_optimizer: the parameters' storage and the optimizer's state.
  parallel::ParallelModelMemory parallel_model(job.args, options, t);
  plan.float8_notes = parallel_model.layout().float8.auto_filtered;
  model::TransformerMemory model(job.args, job.ac,
                                 activation_shape(job, options, cuda, tr.local_batch_size),
                                 parallel_model.linears(), parallel_model.hooks());

  // Trainer::train: the weights' derived state, then the memory snapshot starts.
  parallel_model.on_weights_updated(t);
  t.start_peak();
  replay_steps(job, cuda, parallel_model, t, [&](const Bytes& inputs) {
    model.forward(t, inputs);
    if (plan.kept_activations == 0) plan.kept_activations = model.saved_bytes();
    model.backward(t);
  });
  finish_plan(plan, t, cuda);
  return plan;
}

MemoryPlan plan_pipeline_rank(const PlanJob& job, bool cuda, int64_t rank) {
  TT_CHECK(job.mesh.pp > 1 && rank >= 0 && rank < job.mesh.pp, "plan_pipeline_rank: pp rank ", rank,
           " of a mesh of pp ", job.mesh.pp);
  return replay_pipeline_rank(job, cuda, plan_pipeline(job.config, job.args), rank);
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
      if (m.pp > 1 &&
          parallel::pipeline::splits_backward(c.parallelism.pipeline_parallel_schedule)) {
        // A split backward holds each I's grad-weight operands, the recomputed ones included,
        // until its W: checkpointing saves little there, and a schedule with B saves it all.
        return detail::concat(
            "set parallelism.pipeline_parallel_schedule Interleaved1F1B (now ",
            parallel::pipeline::kScheduleKindNames.name(c.parallelism.pipeline_parallel_schedule),
            ": each input-gradient backward holds its blocks' recomputed activations until its "
            "weight-gradient step), lower training.local_batch_size (now ",
            c.training.local_batch_size, ") or raise parallelism.tp (now ", m.tp, ")");
      }
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
