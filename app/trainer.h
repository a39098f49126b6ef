// The training job: check every input → open the data (and the held-out data) → build and
// initialise the model → optimizer and schedule → (resume) → train loop, validating every
// validation.freq steps → (checkpoint).
//
// check_config() and setup() do every check that can fail on user input before the model is
// allocated, so a wrong config costs a second, not a failed allocation of a 405B model. train()
// runs the loop.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

#include "app/checkpoint_manager.h"
#include "app/config.h"
#include "app/fault_injection.h"
#include "app/metrics/memory_snapshot.h"
#include "app/metrics/metric_sink.h"
#include "app/metrics/step_profiler.h"
#include "app/pipeline_plan.h"
#include "core/cuda/device_query.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "fp8/float8_linear.h"
#include "model/config.h"
#include "model/optim/adamw_optimizer.h"
#include "model/optim/lr_scheduler.h"
#include "model/transformer.h"
#include "parallel/data_parallel.h"
#include "parallel/device_mesh.h"
#include "parallel/mpi_runtime.h"
#include "parallel/parallel_dims.h"
#include "parallel/pipeline_executor.h"

namespace titan::app {

// The loss or the gradient norm became NaN or Inf: training cannot continue.
class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The GPU a rank trains on (info.index is its CUDA ordinal), and how many ranks of its node
// share it (the MPI backend allows it).
struct GpuPlacement {
  CudaDeviceInfo info;
  int sharers = 1;
};

class Trainer {
 public:
  Trainer(JobConfig config, const parallel::MpiRuntime& mpi);
  ~Trainer();

  // Set-up in two phases, each followed in main by a job-wide agreement on success, so that a
  // rank failing alone never leaves the others inside the collective that creates the mesh:
  //   check_config  the config on its own (mesh degrees, model dims, batch): no I/O, no MPI
  //   setup         create the mesh (collective), then data, model, optimizer, resume
  void check_config();
  void setup();
  // Completed, or Preempted: a preemption signal stopped the job after saving its step.
  enum class Outcome { Completed, Preempted };
  Outcome train();

  // For tests: the state after setup(): this rank's (first) part of the model.
  model::Transformer& model() { return *parts_.front(); }
  int64_t grad_accumulation_steps() const { return accumulation_; }

 private:
  // Set-up, in order; each throws InputError naming the config key at fault.
  void check_mesh_and_device();
  void check_model_fits_mesh() const;
  void resolve_batch();
  void check_memory() const;  // the host's, or this rank's GPU's
  void open_data();
  void open_validation_data();  // when validation.enable
  void open_outputs();  // metrics sinks, trace and snapshot folders: checked before allocation
  void build_model_and_optimizer();
  void check_pipeline();  // pp > 1: the stages, microbatches and schedule (pipeline_plan.h)

  // What one optimizer step did: the global batch's mean loss, the gradient norm before
  // clipping (NaN when the loss was not finite: not computed), and whether the optimizer step
  // was taken (false: skipped under training.skip_nonfinite_steps).
  struct StepOutcome {
    double loss = 0;
    double grad_norm = 0;
    bool applied = true;
  };
  StepOutcome train_step(int64_t step);
  // A window of tokens [B, S+1] -> this rank's inputs and targets [B, S/cp]: shifted by one,
  // then cut to its cp rank's two head-tail chunks (the whole window at cp 1). Every cp rank of
  // a dp rank reads the same window. Under block_causal also each input's document start
  // (data/documents.h), found in the whole window and cut as the inputs are.
  struct LocalTokens {
    Tensor inputs, targets;
    Tensor doc_start;  // undefined when causal
  };
  LocalTokens local_tokens(const Tensor& window, int64_t seq_len) const;
  // A step whose loss or gradient norm is NaN or Inf: skipped with a warning while
  // training.skip_nonfinite_steps allows, else TrainingDiverged.
  void skip_nonfinite_step(int64_t step, double loss, double grad_norm);
  // The faults TITAN_FAULT_INJECT asks of this rank at the start of `step` (fault_injection.h).
  void inject_step_start_faults(int64_t step);
  void poison_one_gradient();
  // Validation (torchtitan's cadence: step 1 and every validation.freq-th step). The mean token
  // loss of validation_batches_ fixed held-out global batches, forward only, reduced over dp as
  // train_step reduces the training loss; logged, and handed to the metrics as val_loss.
  bool validates(int64_t step) const;
  double validation_loss();
  void log_start() const;
  // pp > 1, at the end of the run: the mean cost of each compute kind, the schedule simulated
  // with those costs and replayed with each action's own, and the bubble measured (a
  // collective).
  void report_pipeline_costs();
  // The last runs of world rank 0's pp group replayed with each action's own time, as the text
  // the closing line inserts (empty on other ranks and when nothing ran; a collective over pp).
  std::string replayed_pipeline_bubble();

  JobConfig config_;
  const parallel::MpiRuntime& mpi_;
  parallel::ParallelDims dims_;
  Device device_ = Device::cpu();             // this rank's: the CPU, or its GPU
  GpuPlacement gpu_;                          // when device_ is a GPU
  std::optional<parallel::DeviceMesh> mesh_;  // made once the degrees are known to be valid
  model::ModelArgs args_;
  model::ActivationCheckpointPolicy ac_policy_;
  int64_t global_batch_ = 0;                    // sequences per optimizer step
  int64_t accumulation_ = 1;                    // micro-steps per optimizer step
  std::unique_ptr<data::Tokenizer> tokenizer_;  // for text data: byte or a tokenizer.json
  std::optional<int32_t> document_eos_;         // block_causal: the EOS that ends a document
  std::shared_ptr<const data::TokenSource> source_;
  std::unique_ptr<data::DataLoader> loader_;
  std::shared_ptr<const data::TokenSource> validation_source_;  // when validation.enable
  std::unique_ptr<data::FixedOrderLoader> validation_;
  int64_t validation_local_batch_ = 0;  // validation.local_batch_size, -1 resolved
  int64_t validation_seq_len_ = 0;      // validation.seq_len, -1 resolved
  int64_t validation_batches_ = 0;      // validation.steps, -1 resolved
  // The parts of the model this rank holds: the whole model, or its pipeline stages' parts.
  std::vector<std::unique_ptr<model::Transformer>> parts_;
  std::optional<PipelinePlan> pipeline_plan_;              // pp > 1
  std::unique_ptr<parallel::PipelineExecutor> pipeline_;   // pp > 1: runs the parts' stages
  std::shared_ptr<parallel::DataParallel> data_parallel_;  // holds the parameters' storage
  fp8::Float8Conversion float8_;
  std::vector<std::string> tp_table_;  // tensor parallelism's start-up table (empty at tp 1)
  std::unique_ptr<model::AdamW> optimizer_;
  std::unique_ptr<model::LrScheduler> scheduler_;
  std::vector<std::unique_ptr<MetricSink>> sinks_;   // handed to the metrics processor
  std::unique_ptr<StepProfiler> step_profiler_;      // when profiling.enable_profiling
  std::unique_ptr<MemorySnapshot> memory_snapshot_;  // when profiling.enable_memory_snapshot
  std::unique_ptr<CheckpointManager> checkpoints_;   // what to resume from, when to save
  double pipeline_seconds_ = 0, pipeline_wait_seconds_ = 0;  // this step's, for the metrics
  parallel::PipelineTiming pipeline_run_;                    // the run's, after its first step
  // Each list run's order and times after the first step, the last kReplayedRuns of them: what
  // the closing line replays through the simulator (pipeline::replayed_bubble).
  static constexpr size_t kReplayedRuns = 64;
  std::deque<std::vector<parallel::pipeline::RanCompute>> pipeline_ran_;
  int64_t start_step_ = 1;
  int64_t skipped_steps_ = 0;  // non-finite steps skipped so far, in this run and before a resume
  std::vector<InjectedFault> faults_;
};

}  // namespace titan::app
