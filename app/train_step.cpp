#include "app/train_step.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <string>
#include <thread>
#include <tuple>

#include "core/check.h"
#include "core/profiler.h"
#include "data/documents.h"
#include "data/token_file.h"
#include "model/ops/cross_entropy.h"
#include "model/optim/grad_clip.h"
#include "parallel/context_parallel.h"
#include "parallel/grad_norm.h"

namespace titan::app {

LocalTokens local_tokens(const Tensor& window, int64_t seq_len, int64_t cp, int64_t cp_rank,
                         std::optional<int32_t> document_eos) {
  // Packed conversations carry their loss mask in the sign bit (data/token_file.h).
  auto [inputs, targets, trained] = data::split_window(window, seq_len);
  Tensor doc_start = document_eos ? data::document_starts(inputs, *document_eos) : Tensor();
  if (cp == 1) return {inputs, targets, doc_start};
  // Cut after the shift, so that each target stays beside its input, and the document starts
  // (global positions) with them.
  return {parallel::cp_shard(inputs, 1, cp, cp_rank), parallel::cp_shard(targets, 1, cp, cp_rank),
          doc_start.defined() ? parallel::cp_shard(doc_start, 1, cp, cp_rank) : Tensor()};
}

NonfiniteSteps::NonfiniteSteps(const JobConfig& config, int64_t skipped_before)
    : config_(config), skipped_(skipped_before) {}

void NonfiniteSteps::skip(int64_t step, double loss, double grad_norm) {
  const JobConfig& c = config_;
  const std::string what = std::isfinite(loss) ? detail::concat("gradient norm is ", grad_norm)
                                               : detail::concat("loss is ", loss);
  const int64_t allowed = c.training.skip_nonfinite_steps;
  if (skipped_ >= allowed) {
    const std::string skips =
        allowed == 0
            ? std::string("; to skip such steps instead, set training.skip_nonfinite_steps")
            : detail::concat(" after ", skipped_, " skipped step", skipped_ == 1 ? "" : "s",
                             " (training.skip_nonfinite_steps ", allowed, ")");
    throw TrainingDiverged(
        detail::concat("step ", step, ": ", what, "; training diverged", skips,
                       ". Lower optimizer.lr (now ", c.optimizer.lr,
                       ") or lengthen lr_scheduler.warmup_steps (now ", c.lr_scheduler.warmup_steps,
                       "), and check training.max_norm (now ", c.training.max_norm, ")"));
  }
  ++skipped_;
  spdlog::warn(
      "step {}: {}; step skipped: the weights and optimizer state keep their values, and no "
      "checkpoint of step {} is written ({} of training.skip_nonfinite_steps {} used)",
      step, what, step, skipped_, allowed);
}

TrainStep::TrainStep(const JobConfig& config, StepParts parts, StepShape shape)
    : config_(config),
      parts_(std::move(parts)),
      shape_(std::move(shape)),
      nonfinite_(config, shape_.skipped_before),
      world_rank_(static_cast<int>(parts_.mesh->world_rank())) {
  TT_CHECK(!parts_.parts.empty() && parts_.data_parallel && parts_.optimizer && parts_.scheduler &&
               parts_.loader && parts_.tp_waits && parts_.cp_waits,
           "TrainStep: a part of the step is missing");
}

void TrainStep::inject_step_start_faults(int64_t step) {
  const std::vector<InjectedFault>& faults = shape_.faults;
  if (fault_due(faults, world_rank_, step, FaultKind::Throw)) {
    throw Error(detail::concat("injected fault (TITAN_FAULT_INJECT) at step ", step));
  }
  if (fault_due(faults, world_rank_, step, FaultKind::Stop)) raise(SIGSTOP);
  if (fault_due(faults, world_rank_, step, FaultKind::Late)) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kLateFaultSeconds));
  }
  if (fault_due(faults, world_rank_, step, FaultKind::ExtraCollective)) {
    parts_.mesh->comm().barrier();
  }
  if (fault_due(faults, world_rank_, step, FaultKind::Hang)) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // stuck, outside MPI
  }
}

void TrainStep::poison_one_gradient() {
  for (model::Parameter* p : parts_.data_parallel->optimizer_params()) {
    if (p->grad.defined() && p->grad.numel() > 0) {
      p->grad.view(Shape({p->grad.numel()})).narrow(0, 0, 1).fill_(std::nan(""));
      return;
    }
  }
}

double TrainStep::global_mean(double loss_sum, double tokens) const {
  // Every tp rank of a dp rank has the same loss (loss parallel), each cp rank the sum over its
  // own tokens, and only the pipeline's last stage has one: sum over pp, dp and cp, so that
  // every rank reports the global loss.
  Tensor sum = Tensor::from_vector<double>({loss_sum}, {1});
  const parallel::DeviceMesh losses = parts_.mesh->slice({parallel::MeshDim::Pp, parallel::kDpCp});
  if (losses.size() > 1) losses.comm().all_reduce(sum, parallel::ReduceOp::Sum);
  return sum.data<double>()[0] / tokens;
}

int64_t TrainStep::global_trained_targets(const std::vector<Tensor>& windows,
                                          int64_t seq_len) const {
  // Every cp, tp and pp rank of a dp rank reads the same windows: counted over dp alone.
  int64_t local = 0;
  for (const Tensor& window : windows) {
    const int32_t* w = window.data<int32_t>();
    for (int64_t b = 0; b < window.size(0); ++b) {
      for (int64_t i = 1; i <= seq_len; ++i) local += data::is_trained(w[b * (seq_len + 1) + i]);
    }
  }
  Tensor count = Tensor::from_vector<int64_t>({local}, {1});
  const parallel::DeviceMesh dp = parts_.mesh->slice(parallel::kDp);
  if (dp.size() > 1) dp.comm().all_reduce(count, parallel::ReduceOp::Sum);
  return count.data<int64_t>()[0];
}

StepResult TrainStep::run(int64_t step) {
  const int64_t S = shape_.seq_len, B = shape_.local_batch;
  const int64_t cp = parts_.mesh->degree(parallel::MeshDim::Cp);
  const int64_t cp_rank = parts_.mesh->coordinate(parallel::MeshDim::Cp);
  inject_step_start_faults(step);

  // With a loss mask the step's windows are read first: the gradient scale needs the count of
  // trained targets over the whole global batch (torchtitan's normalisation of a masked loss)
  // before the first backward. Without one each window is read as its micro-batch starts.
  std::vector<Tensor> windows;
  int64_t trained = shape_.global_batch * S;
  if (shape_.loss_mask) {
    for (int64_t micro = 0; micro < shape_.accumulation; ++micro) {
      windows.push_back(parts_.loader->next_batch(B));
    }
    trained = global_trained_targets(windows, S);
  }
  const double global_tokens = static_cast<double>(std::max<int64_t>(trained, 1));

  parallel::DataParallel& dp = *parts_.data_parallel;
  dp.zero_grad();
  double loss_sum = 0;
  for (int64_t micro = 0; micro < shape_.accumulation; ++micro) {
    auto [inputs, targets, doc_start] =
        local_tokens(shape_.loss_mask ? std::move(windows[static_cast<size_t>(micro)])
                                      : parts_.loader->next_batch(B),
                     S, cp, cp_rank, shape_.document_eos);
    // Each token's loss is scaled by 1 / (the global batch's trained tokens: all of them
    // without a loss mask), so summing the gradients over the dp ranks (FSDP's reduce-scatter,
    // DDP's all-reduce) and over the microbatches of a pipeline and of accumulation gives the
    // global mean's, whatever the schedule.
    if (parts_.pipeline) {
      loss_sum += parts_.pipeline->train(inputs, targets, 1.0 / global_tokens, doc_start);
      const parallel::PipelineTiming& timing = parts_.pipeline->last_timing();
      pending_.pipeline_seconds += timing.seconds;
      pending_.pipeline_wait_seconds += timing.wait_seconds;
      // The run's figures leave out the first step, which warms the caches and the allocator.
      if (step > shape_.first_step) pipeline_runs_.add(timing);
    } else {
      model::Transformer& model = *parts_.parts.front();
      loss_sum += model.forward(inputs, targets, 1.0 / global_tokens, doc_start);
      model.backward();
    }
  }
  dp.finish_gradients();
  if (parts_.tied_weights) parts_.tied_weights->sum_gradients();
  if (fault_due(shape_.faults, world_rank_, step, FaultKind::NanGrad)) poison_one_gradient();
  if (fault_due(shape_.faults, world_rank_, step, FaultKind::NanLoss)) loss_sum = std::nan("");
  StepResult result;
  result.trained_tokens = trained;
  result.loss = global_mean(loss_sum, global_tokens);
  // The loss and the norm are reduced over the job: every rank takes the same branch below,
  // before anything touches the weights.
  result.grad_norm = std::nan("");
  std::vector<model::Parameter*> params = dp.optimizer_params();
  if (std::isfinite(result.loss)) {
    profiler::Span span("grad_norm", "optimizer");
    std::vector<model::Parameter*> counted;
    for (model::Parameter* p : params) {
      if (parallel::counts_in_grad_norm(*p)) counted.push_back(p);
    }
    result.grad_norm = parallel::global_grad_norm(counted, *parts_.mesh);
  }
  if (!std::isfinite(result.loss) || !std::isfinite(result.grad_norm)) {
    nonfinite_.skip(step, result.loss, result.grad_norm);
    result.applied = false;
    return result;
  }
  model::clip_grads_to_norm(params, result.grad_norm, config_.training.max_norm);
  profiler::Span optimizer_span("optimizer", "optimizer");
  parts_.optimizer->step(parts_.scheduler->lr(step - 1));
  dp.on_weights_updated();
  return result;
}

double TrainStep::validation_loss(data::FixedOrderLoader& loader, int64_t batches,
                                  int64_t local_batch, int64_t seq_len) {
  profiler::Span span("validation", "validation");
  const int64_t cp = parts_.mesh->degree(parallel::MeshDim::Cp);
  const int64_t cp_rank = parts_.mesh->coordinate(parallel::MeshDim::Cp);
  double loss_sum = 0;
  int64_t trained = 0;
  for (int64_t k = 0; k < batches; ++k) {
    // The same windows every evaluation.
    const Tensor window = loader.batch(k, local_batch);
    if (shape_.loss_mask) trained += global_trained_targets({window}, seq_len);
    auto [inputs, targets, doc_start] =
        local_tokens(window, seq_len, cp, cp_rank, shape_.document_eos);
    if (parts_.pipeline) {
      // The training microbatch when it divides the validation batch, else one microbatch.
      const int64_t micro =
          local_batch % parts_.pipeline_microbatch == 0 ? parts_.pipeline_microbatch : local_batch;
      loss_sum += parts_.pipeline->evaluate(inputs, targets, micro, doc_start);
    } else {
      loss_sum += parts_.parts.front()->evaluate(inputs, targets, doc_start);
    }
  }
  // Validation's waits are no step's. It ends on the host: nothing is left queued.
  parts_.tp_waits->take();
  parts_.cp_waits->take();
  const int64_t dp = parts_.mesh->dims().dp();
  const int64_t tokens = shape_.loss_mask ? std::max<int64_t>(trained, 1)
                                          : batches * local_batch * dp * seq_len;
  return global_mean(loss_sum, static_cast<double>(tokens));
}

std::vector<double> TrainStep::task_loss_sums(const data::TaskScoring& scoring,
                                              int64_t batch_size) {
  profiler::Span span("eval_tasks", "validation");
  const parallel::DeviceMesh& mesh = *parts_.mesh;
  const int64_t cp = mesh.degree(parallel::MeshDim::Cp);
  const int64_t cp_rank = mesh.coordinate(parallel::MeshDim::Cp);
  const int64_t tp = mesh.degree(parallel::MeshDim::Tp);
  const parallel::DeviceMesh dp = mesh[parallel::kDp];
  const int64_t multiple = (cp > 1 ? 2 * cp : 1) * tp;
  const std::vector<data::TaskBatch> batches = scoring.batches(batch_size, multiple);
  const int64_t rounds = (static_cast<int64_t>(batches.size()) + dp.size() - 1) / dp.size();
  std::vector<double> sums(static_cast<size_t>(scoring.requests()), 0.0);
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t k = round * dp.size() + dp.rank();
    const bool filler = k >= static_cast<int64_t>(batches.size());
    Tensor tokens, targets;
    if (filler) {
      tokens = Tensor::zeros({1, multiple}, DType::I32);
      targets = Tensor::zeros({1, multiple}, DType::I32);
    } else {
      std::tie(tokens, targets) = scoring.batch_tokens(batches[static_cast<size_t>(k)]);
    }
    const int64_t B = tokens.size(0), S = tokens.size(1);
    if (cp > 1) {
      tokens = parallel::cp_shard(tokens, 1, cp, cp_rank);
      targets = parallel::cp_shard(targets, 1, cp, cp_rank);
    }
    Tensor losses;  // [B, S/cp] on the rank that holds the head
    if (parts_.pipeline) {
      const int64_t micro =
          B % parts_.pipeline_microbatch == 0 ? parts_.pipeline_microbatch : B;
      losses = parts_.pipeline->evaluate_tokens(tokens, targets, micro);
    } else {
      losses = parts_.parts.front()->evaluate_tokens(tokens, targets);
    }
    if (filler || !losses.defined()) continue;
    scoring.add_losses(batches[static_cast<size_t>(k)], losses.view({B, S / cp}),
                       cp > 1 ? parallel::cp_positions(S, cp, cp_rank) : std::vector<int64_t>{},
                       sums);
  }
  parts_.tp_waits->take();
  parts_.cp_waits->take();
  const parallel::DeviceMesh holders = mesh.slice({parallel::MeshDim::Pp, parallel::kDpCp});
  if (holders.size() > 1) {
    Tensor t = Tensor::from_vector<double>(sums, {static_cast<int64_t>(sums.size())});
    holders.comm().all_reduce(t, parallel::ReduceOp::Sum);
    std::copy_n(t.data<double>(), sums.size(), sums.begin());
  }
  return sums;
}

StepWaits TrainStep::take_waits() {
  StepWaits taken = std::exchange(pending_, StepWaits{});
  taken.tp_seconds = parts_.tp_waits->take().wait_seconds;
  taken.cp_seconds = parts_.cp_waits->take().wait_seconds;
  return taken;
}

}  // namespace titan::app
