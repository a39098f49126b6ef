// When the training loop saves, resumes and stops for preemption: the policy around the
// checkpoint mechanism (checkpoint/checkpointer.h), as torchtitan's CheckpointManager.
//
//   set-up      which state the run starts from: the newest complete checkpoint of its own
//               folder (or checkpoint.load_step); failing that checkpoint.initial_load_path
//               (a titan_train step folder, or a Hugging Face Llama 3 folder); failing that,
//               fresh weights. Decided and checked before the model is allocated.
//   every step  save on checkpoint.interval (and after the last step); commit an asynchronous
//               save once every rank's writes are done; on a preemption signal (preemption.h)
//               save the step just finished, commit, and stop. A step skipped for a NaN/Inf
//               loss (training.skip_nonfinite_steps) is never saved: a save due then waits for
//               the next step that trains, and so does the stop of a preemption.
//   the end     commit the save in flight, so the job never exits with its last checkpoint
//               half written; with checkpoint.last_save_in_hf, export the last step as a
//               Hugging Face folder.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "app/config.h"
#include "checkpoint/checkpointer.h"
#include "data/mixture.h"
#include "model/optim/optimizer.h"
#include "model/transformer.h"
#include "parallel/device_mesh.h"

namespace titan::app {

class CheckpointManager {
 public:
  // Before allocation, no communication: finds what resume() will load and checks that it
  // exists and reads as a checkpoint of this model; InputError naming the checkpoint.* key
  // otherwise. Installs the preemption handlers when checkpointing is on.
  // World rank 0 logs for the job.
  CheckpointManager(const JobConfig& config, const model::ModelArgs& args, int world_rank);

  // After the model and optimizer exist: loads what the constructor chose into this rank's
  // shards (and the loader's position). Returns the first step to train.
  int64_t resume(model::Transformer& model, model::Optimizer& optimizer, data::MixtureLoader& loader,
                 const parallel::DeviceMesh& mesh);

  // On every rank at the end of every step (collective when there are several ranks);
  // `applied` is false for a skipped step. Returns true when the job was preempted: the step is
  // saved and committed, and training must stop.
  bool end_step(int64_t step, bool applied, model::Transformer& model, model::Optimizer& optimizer,
                const data::MixtureLoader& loader, const parallel::DeviceMesh& mesh);

  // Collective, after the last step: commits the save in flight and writes the HF export.
  void finish(const parallel::DeviceMesh& mesh);

  // Whether resume() continues a checkpoint of this run's own folder (its metrics append).
  bool resumes_own_checkpoint() const { return resume_step_.has_value(); }

 private:
  void save(int64_t step, model::Transformer& model, model::Optimizer& optimizer,
            const data::MixtureLoader& loader, const parallel::DeviceMesh& mesh);
  void commit(const parallel::DeviceMesh& mesh);

  const JobConfig::Checkpoint& config_;
  int64_t last_step_;  // training.steps
  std::unique_ptr<checkpoint::Checkpointer> checkpointer_;  // when checkpoint.enable
  std::optional<int64_t> resume_step_;                      // of checkpointer_'s folder
  int64_t last_saved_step_ = -1;
  int64_t in_flight_step_ = -1;  // the step of the save in flight, -1 for none
  bool save_due_ = false;        // an interval save waiting for a step that trains
};

}  // namespace titan::app
