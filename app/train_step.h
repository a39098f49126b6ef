// One optimizer step of titan_train, and the forward-only validation pass: what the trainer's
// loop calls once per step, given the parts set-up built. It owns what a step measures — the tp
// and cp wait clocks (parallel/comm_waits.h) and the pipeline's runs — and hands the figures to
// the reports (take_waits, pipeline_runs), so nothing a step measures lives in a process global.
//
// A step: this rank's micro-batches (gradient accumulation; through the pipeline executor under
// pp) → the gradients finished (FSDP's reduce-scatter, DDP's all-reduce) → the loss summed over
// the job → the global gradient norm → clipped → AdamW. A non-finite loss or norm skips the
// step while training.skip_nonfinite_steps allows (NonfiniteSteps), else TrainingDiverged.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "app/config.h"
#include "app/fault_injection.h"
#include "app/pipeline_cost_report.h"
#include "core/tensor.h"
#include "data/loader.h"
#include "data/task_scoring.h"
#include "model/optim/optimizer.h"
#include "model/optim/lr_scheduler.h"
#include "model/transformer.h"
#include "parallel/comm_waits.h"
#include "parallel/data_parallel.h"
#include "parallel/device_mesh.h"
#include "parallel/pipeline_executor.h"
#include "parallel/tied_weights.h"

namespace titan::app {

// The loss or the gradient norm became NaN or Inf more often than the run may skip.
class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A window of tokens [B, S+1] -> this rank's inputs and targets [B, S/cp]: shifted by one, then
// cut to cp rank `cp_rank`'s two head-tail chunks (the whole window at cp 1). Every cp rank of a
// dp rank reads the same window. Under block_causal (`document_eos` given) also each input's
// document start (data/documents.h), found in the whole window and cut as the inputs are.
struct LocalTokens {
  Tensor inputs, targets;
  Tensor doc_start;  // [B, S/cp] global positions; undefined when causal
};
LocalTokens local_tokens(const Tensor& window, int64_t seq_len, int64_t cp, int64_t cp_rank,
                         std::optional<int32_t> document_eos = std::nullopt);

// training.skip_nonfinite_steps: how many steps with a NaN or Inf loss or gradient norm a run
// skips (counting those its checkpoint's run skipped) before it stops as diverged.
class NonfiniteSteps {
 public:
  NonfiniteSteps(const JobConfig& config, int64_t skipped_before);
  // Step `step` had `loss` or `grad_norm` non-finite: a warning and one more skip while the
  // budget allows, else TrainingDiverged naming what to change.
  void skip(int64_t step, double loss, double grad_norm);
  int64_t skipped() const { return skipped_; }

 private:
  const JobConfig& config_;
  int64_t skipped_;
};

// What one optimizer step did: the global batch's mean loss, the gradient norm before clipping
// (NaN when the loss was not finite: not computed), and whether the optimizer step was taken
// (false: skipped under training.skip_nonfinite_steps).
struct StepResult {
  double loss = 0;
  double grad_norm = 0;
  bool applied = true;
  int64_t trained_tokens = 0;  // targets the loss covered over the global batch
};

// What the step waited on since the last take: tp and cp transfers, and under pp the pipeline
// lists' time and their part spent waiting on messages.
struct StepWaits {
  double tp_seconds = 0;
  double cp_seconds = 0;
  double pipeline_seconds = 0;
  double pipeline_wait_seconds = 0;
};

// The parts a step works on, built and owned by the trainer's set-up.
struct StepParts {
  std::vector<model::Transformer*> parts;          // this rank's parts of the model
  parallel::PipelineExecutor* pipeline = nullptr;  // pp > 1: runs the parts' stages
  int64_t pipeline_microbatch = 0;                 // pp > 1: sequences per microbatch
  parallel::DataParallel* data_parallel = nullptr;
  parallel::TiedWeights* tied_weights = nullptr;  // tied embeddings across pipeline stages
  model::Optimizer* optimizer = nullptr;
  model::LrScheduler* scheduler = nullptr;
  data::WindowBatches* loader = nullptr;
  const parallel::DeviceMesh* mesh = nullptr;
  // The tp and cp groups' wait clocks (parallelize's ParallelModel): the step's from now on.
  std::shared_ptr<parallel::CommWaits> tp_waits, cp_waits;
};

// How a step is shaped: the batch, where the run starts, and the faults it is to inject.
struct StepShape {
  int64_t local_batch = 0;     // training.local_batch_size
  int64_t seq_len = 0;         // training.seq_len
  int64_t global_batch = 0;    // sequences per optimizer step, all dp ranks
  int64_t accumulation = 1;    // micro-steps per optimizer step
  int64_t first_step = 1;      // the run's first step (after a resume, the checkpoint's next)
  int64_t skipped_before = 0;  // non-finite steps the checkpoint's run skipped
  std::vector<InjectedFault> faults;    // TITAN_FAULT_INJECT's (fault_injection.h)
  std::optional<int32_t> document_eos;  // block_causal: the EOS that ends a document
  // The data holds packed conversations (titan_tokenize --chat): the loss is over the trained
  // targets only, normalised by their count in the global batch.
  bool loss_mask = false;
};

class TrainStep {
 public:
  TrainStep(const JobConfig& config, StepParts parts, StepShape shape);

  // Runs step `step` (1-based), with the faults TITAN_FAULT_INJECT asks of this rank at it.
  StepResult run(int64_t step);

  // The mean token loss of `batches` fixed held-out global batches of `local_batch` sequences ×
  // `seq_len` tokens per dp rank, forward only, reduced over the job as the training loss is.
  // Its tp and cp waits are no step's: dropped.
  double validation_loss(data::FixedOrderLoader& loader, int64_t batches, int64_t local_batch,
                         int64_t seq_len);
  // The targets a loss mask lets through in `windows` ([B, S+1] each), summed over dp.
  int64_t global_trained_targets(const std::vector<Tensor>& windows, int64_t seq_len) const;

  // Every request's summed token losses over `scoring`'s batches of `batch_size` rows, forward
  // only, the same on every rank. The dp ranks take turns at the batches (batch k on dp rank
  // k mod dp; a rank past the last runs a one-row filler, since FSDP gathers each block with
  // every dp_shard rank); each batch's S a multiple of 2·cp·tp (cp cuts 2·cp chunks, tp shards
  // the rows); under pp one microbatch of the training size when it divides the batch. Each
  // rank holding the head adds its cp chunks' columns, and the sums are added over pp, dp and cp
  // (every tp rank holds the same losses: loss parallel). Its tp and cp waits are dropped.
  std::vector<double> task_loss_sums(const data::TaskScoring& scoring, int64_t batch_size);

  // The waits since the last take, and forgets them. On CUDA a wait still queued counts in the
  // next take (synchronize first to read every one).
  StepWaits take_waits();

  // The pipeline's runs after the first step, for the closing report.
  const PipelineRuns& pipeline_runs() const { return pipeline_runs_; }
  int64_t skipped_steps() const { return nonfinite_.skipped(); }

 private:
  void inject_step_start_faults(int64_t step);
  void poison_one_gradient();
  // The loss summed over the ranks that hold a part of it, over `tokens`.
  double global_mean(double loss_sum, double tokens) const;

  const JobConfig& config_;
  StepParts parts_;
  StepShape shape_;
  NonfiniteSteps nonfinite_;
  int world_rank_ = 0;
  StepWaits pending_;  // the pipeline's, since the last take
  PipelineRuns pipeline_runs_;
};

}  // namespace titan::app
