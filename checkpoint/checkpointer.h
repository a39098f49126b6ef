// Saving and resuming a training run: the model's parameters, the optimizer's moments and step,
// and the data loader's position, so that a resumed run continues bit for bit as if it had
// never stopped.
//
//   <dump_folder>/<folder>/step-<N>/model.safetensors      parameters by name (fp32)
//                                   optimizer.safetensors  <name>.exp_avg, <name>.exp_avg_sq
//                                   train_state.yaml       step, optimizer steps, loader position
//
// A step folder is written under a temporary name and renamed when complete, so a crash while
// saving never leaves a checkpoint that looks whole.
//
// The files hold full, unsharded tensors under the model's names, whatever the mesh: saving
// gathers each parameter (and its moments) one at a time and world rank 0 writes; loading has
// every rank read the file and keep its own rows. So a run saved on one mesh resumes on any
// other (parallel/full_state.h), at the cost of one full tensor at a time per rank.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "data/loader.h"
#include "model/optim/adamw_optimizer.h"
#include "model/transformer.h"
#include "parallel/device_mesh.h"

namespace titan::checkpoint {

struct TrainState {
  int64_t step = 0;  // the last completed optimizer step
  data::LoaderState loader;
};

class Checkpointer {
 public:
  explicit Checkpointer(std::string folder);

  // The highest step saved in the folder, if any.
  std::optional<int64_t> latest_step() const;
  std::string step_folder(int64_t step) const;

  // Collective over the mesh: every rank calls it.
  void save(const TrainState& state, model::Transformer& model, model::AdamW& optimizer,
            const parallel::DeviceMesh& mesh) const;
  // Loads step `step` into the optimizer's parameters (this rank's shards) and moments;
  // InputError naming checkpoint.* when the step is missing or was saved for another model.
  TrainState load(int64_t step, model::Transformer& model, model::AdamW& optimizer,
                  const parallel::DeviceMesh& mesh) const;

 private:
  std::string folder_;
};

}  // namespace titan::checkpoint
