// The training job, composed of its parts: the checks of the config (trainer_checks.h), the
// rank's process state (rank_setup.h), the step (train_step.h), and the reports at the start
// and end of the run (run_report.h, pipeline_cost_report.h). What is left here is their order:
// check every input → open the data (and the held-out data) → build and initialise the model →
// optimizer and schedule → (resume) → train loop, validating every validation.freq steps and
// scoring eval.tasks every eval.freq steps → (checkpoint).
//
// check_config() and setup() do every check that can fail on user input before the model is
// allocated, so a wrong config costs a second, not a failed allocation of a 405B model. train()
// runs the loop.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "app/checkpoint_manager.h"
#include "app/config.h"
#include "app/fault_injection.h"
#include "app/layer_options.h"
#include "app/metrics/memory_snapshot.h"
#include "app/metrics/metric_sink.h"
#include "app/metrics/step_profiler.h"
#include "app/pipeline_plan.h"
#include "app/rank_setup.h"
#include "app/run_report.h"
#include "app/task_evaluation.h"
#include "app/train_step.h"
#include "app/trainer_checks.h"
#include "data/loader.h"
#include "data/mixture.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "model/optim/optimizer.h"
#include "model/optim/lr_scheduler.h"
#include "model/transformer.h"
#include "parallel/device_mesh.h"
#include "parallel/mpi_runtime.h"
#include "parallel/parallel_dims.h"
#include "parallel/parallelize.h"
#include "parallel/pipeline_executor.h"
#include "parallel/tied_weights.h"

namespace titan::app {

// How a training run ended without an error.
enum class TrainingEnd {
  Completed,  // every step ran (or the checkpoint was already at the last one)
  Preempted,  // a preemption signal stopped the job after saving its step
};

class Trainer {
 public:
  Trainer(JobConfig config, const parallel::MpiRuntime& mpi);
  ~Trainer();

  // Set-up in two phases, each followed in main by a job-wide agreement on success, so that a
  // rank failing alone never leaves the others inside the collective that creates the mesh:
  //   check_config  the config on its own (mesh degrees, model dims, batch, memory) and this
  //                 rank's device: no I/O but the device's, no MPI
  //   setup         create the mesh (collective), then data, model, optimizer, resume
  void check_config();
  void setup();
  TrainingEnd train();

  // For tests: the state after setup(): this rank's (first) part of the model.
  model::Transformer& model() { return *parts_.front(); }
  int64_t grad_accumulation_steps() const { return batch_.accumulation; }

 private:
  // One held-out set: validation.dataset_path (unnamed, reported as val_loss), or one of
  // validation.sources (val_loss/<name>).
  struct ValidationSet {
    std::string name;
    std::shared_ptr<const data::TokenSource> source;
    std::unique_ptr<data::FixedOrderLoader> loader;
    int64_t batches = 0;  // validation.steps, -1 resolved
  };

  // Set-up, in order; each throws InputError naming the config key at fault.
  void open_data();
  void open_validation_data();  // when validation.enable
  ValidationSet open_validation_set(const NamedSourceSpec& set);
  void open_outputs();  // metrics sinks, trace and snapshot folders: checked before allocation
  // optimizer.groups over the whole model's names: a group matching nothing refused (exit 2),
  // each group's parameter count logged once.
  void assign_param_groups();
  void build_model_and_optimizer();
  RunStartFacts start_facts() const;
  std::unique_ptr<TrainStep> make_step();
  // The end of the run: the closing lines, the pipeline's costs, the memory peak.
  void finish_run(const TrainStep& step, double seconds);

  JobConfig config_;
  const parallel::MpiRuntime& mpi_;
  parallel::ParallelDims dims_;
  RankDevice rank_;                           // this rank's device: the CPU, or its GPU
  std::optional<parallel::DeviceMesh> mesh_;  // made once the degrees are known to be valid
  model::ModelArgs args_;
  // Each parameter's lr scale and weight decay under optimizer.groups, by name, over the whole
  // model (a pipeline rank steps only its stages'); empty without groups.
  std::map<std::string, model::ParamHyper> param_hypers_;
  model::ActivationCheckpointPolicy ac_policy_;
  model::AttentionBackend attention_backend_ = model::AttentionBackend::Native;  // on a GPU
  BatchPlan batch_;
  std::unique_ptr<data::Tokenizer> tokenizer_;  // for text data: byte or a tokenizer.json
  std::optional<int32_t> document_eos_;         // block_causal: the EOS that ends a document
  std::unique_ptr<data::MixtureLoader> loader_;                // data.sources, or data.path alone
  std::vector<ValidationSet> validation_;                      // when validation.enable
  std::vector<std::unique_ptr<std::string>> validation_keys_;  // their path keys, for messages
  std::unique_ptr<TaskEvaluation> task_evaluation_;            // when eval.tasks names any
  // The parts of the model this rank holds: the whole model, or its pipeline stages' parts.
  std::vector<std::unique_ptr<model::Transformer>> parts_;
  std::optional<PipelinePlan> pipeline_plan_;             // pp > 1
  std::unique_ptr<parallel::PipelineExecutor> pipeline_;  // pp > 1: runs the parts' stages
  parallel::ParallelModel parallel_;                      // holds the parameters' storage
  std::unique_ptr<model::Optimizer> optimizer_;
  std::unique_ptr<parallel::TiedWeights> tied_weights_;
  bool loss_mask_ = false;  // some data holds packed conversations: the loss on answers only
  int64_t trained_tokens_ = 0;  // the last step's, over the global batch
  std::unique_ptr<model::LrScheduler> scheduler_;
  std::vector<std::unique_ptr<MetricSink>> sinks_;   // handed to the metrics processor
  std::unique_ptr<StepProfiler> step_profiler_;      // when profiling.enable_profiling
  std::unique_ptr<MemorySnapshot> memory_snapshot_;  // when profiling.enable_memory_snapshot
  std::unique_ptr<CheckpointManager> checkpoints_;   // what to resume from, when to save
  int64_t start_step_ = 1;
  int64_t skipped_before_ = 0;  // non-finite steps the checkpoint's run skipped
  std::vector<InjectedFault> faults_;
};

}  // namespace titan::app
