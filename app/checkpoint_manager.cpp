#include "app/checkpoint_manager.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>

#include "app/layer_options.h"
#include "app/output_folder.h"
#include "app/preemption.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_llama.h"
#include "core/check.h"
#include "core/exit_code.h"
#include "core/profiler.h"

namespace titan::app {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What picks another checkpoint, in titan_train's keys, for the messages of checkpoint/: a
// resumed step is chosen by load_step, a starting one by initial_load_path.
const checkpoint::CheckpointChoice kResumeChoice{
    "checkpoint.load_step", "titan_train starts from one with checkpoint.initial_load_in_hf true"};
const checkpoint::CheckpointChoice kInitialLoadChoice{
    "checkpoint.initial_load_path",
    "titan_train starts from one with checkpoint.initial_load_in_hf true"};
const char kWeightsOnly[] =
    "checkpoint.initial_load_path and checkpoint.initial_load_model_only true";
const checkpoint::HfFolderKeys kHfKeys{"checkpoint.initial_load_path", "model"};

// Where the Hugging Face export of step `step` goes: beside the step folders, under a name
// that latest_step() never takes for a checkpoint.
std::string hf_export_folder(const checkpoint::Checkpointer& checkpointer, int64_t step) {
  const fs::path step_folder = checkpointer.step_folder(step);
  return (step_folder.parent_path() / ("hf-" + step_folder.filename().string())).string();
}

}  // namespace

CheckpointManager::CheckpointManager(const JobConfig& config, const model::ModelArgs& args,
                                     int world_rank)
    : config_(config.checkpoint), last_step_(config.training.steps) {
  const JobConfig::Checkpoint& c = config_;
  if (c.enable) {
    const checkpoint::CheckpointOptions options = checkpoint_options(config);
    // An unwritable folder is found now, not at the first save checkpoint.interval steps later.
    ensure_writable_folder(options.folder, "checkpoint.folder");
    checkpointer_ = std::make_unique<checkpoint::Checkpointer>(options);
    if (c.load_step < 0) {
      resume_step_ = checkpointer_->latest_step(/*warn=*/world_rank == 0);
    } else {
      std::error_code ec;
      if (!fs::is_directory(checkpointer_->step_folder(c.load_step), ec)) {
        input_error("checkpoint.load_step: no checkpoint for step ", c.load_step, " in '",
                    checkpointer_->step_folder(c.load_step),
                    "'; use -1 for the latest saved step");
      }
      resume_step_ = c.load_step;
    }
    // The metadata is read now, before anything large is allocated: a checkpoint that is not
    // one, or was saved for another model, costs a second.
    if (resume_step_) {
      const checkpoint::CheckpointReader reader(checkpointer_->step_folder(*resume_step_),
                                                kResumeChoice);
      checkpoint::check_same_model(reader.metadata(), args, "checkpoint.folder");
      checkpoint::check_same_optimizer(reader.metadata(), config.optimizer.name,
                                       "checkpoint.folder", kWeightsOnly);
    }
    install_preemption_handlers();
  }
  if (resume_step_ || c.initial_load_path.empty()) return;
  std::error_code ec;
  if (!fs::is_directory(c.initial_load_path, ec)) {
    input_error("checkpoint.initial_load_path: no folder '", c.initial_load_path,
                "'; name a step-N folder of a titan_train checkpoint, or a Hugging Face "
                "Llama 3 folder with checkpoint.initial_load_in_hf true");
  }
  if (c.initial_load_in_hf) {
    const checkpoint::HfConfig hf = checkpoint::check_hf_folder(c.initial_load_path, args, kHfKeys);
    if (!hf.assumed.empty()) spdlog::warn("checkpoint: {}", hf.assumed);
  } else {
    const checkpoint::CheckpointReader reader(c.initial_load_path, kInitialLoadChoice);
    checkpoint::check_same_model(reader.metadata(), args, "checkpoint.initial_load_path");
    if (!c.initial_load_model_only) {
      checkpoint::check_same_optimizer(reader.metadata(), config.optimizer.name,
                                       "checkpoint.initial_load_path", kWeightsOnly);
    }
  }
}

int64_t CheckpointManager::resume(model::Transformer& model, model::Optimizer& optimizer,
                                  data::MixtureLoader& loader, const parallel::DeviceMesh& mesh) {
  const JobConfig::Checkpoint& c = config_;
  const auto start = Clock::now();
  checkpoint::TrainState state;
  if (resume_step_) {
    state = checkpointer_->load(*resume_step_, model, optimizer, mesh,
                                checkpoint::LoadScope::Everything, kResumeChoice);
    last_saved_step_ = state.step;
    spdlog::info("checkpoint: resumed from {} (step {}) in {:.2f} s",
                 checkpointer_->step_folder(*resume_step_), state.step, seconds_since(start));
  } else if (!c.initial_load_path.empty()) {
    if (c.initial_load_in_hf) {
      checkpoint::load_hf_weights(c.initial_load_path, model.args(), optimizer, mesh, kHfKeys);
    } else {
      state = checkpoint::Checkpointer::load_folder(
          c.initial_load_path, model, optimizer, mesh,
          c.initial_load_model_only ? checkpoint::LoadScope::ModelOnly
                                    : checkpoint::LoadScope::Everything,
          kInitialLoadChoice);
    }
    const bool weights_only = c.initial_load_in_hf || c.initial_load_model_only;
    spdlog::info("checkpoint: started from {} ({}{}) in {:.2f} s", c.initial_load_path,
                 c.initial_load_in_hf ? "Hugging Face weights" : "titan_train checkpoint",
                 weights_only ? "" : fmt::format(", step {}", state.step), seconds_since(start));
    if (weights_only) state = {};
  } else {
    if (checkpointer_) {
      spdlog::info("checkpoint: none saved yet under {}, starting from step 1",
                   fs::path(checkpointer_->step_folder(0)).parent_path().string());
    }
    return 1;
  }
  loader.restore(state.loader);
  return state.step + 1;
}

void CheckpointManager::save(int64_t step, model::Transformer& model, model::Optimizer& optimizer,
                             const data::MixtureLoader& loader, const parallel::DeviceMesh& mesh) {
  checkpointer_->save({step, loader.state()}, model, optimizer, mesh);
  last_saved_step_ = step;
  if (checkpointer_->save_in_flight()) {
    in_flight_step_ = step;
    spdlog::info("checkpoint: step {} staged in {:.2f} s; writing {} in the background", step,
                 checkpointer_->last_save_blocking_s(), checkpointer_->step_folder(step));
  } else {
    spdlog::info("checkpoint: saved step {} to {} in {:.2f} s", step,
                 checkpointer_->step_folder(step), checkpointer_->last_save_blocking_s());
  }
}

void CheckpointManager::commit(const parallel::DeviceMesh& mesh) {
  const auto start = Clock::now();
  checkpointer_->commit(mesh);
  spdlog::info("checkpoint: step {} complete in {} (commit {:.2f} s)", in_flight_step_,
               checkpointer_->step_folder(in_flight_step_), seconds_since(start));
  in_flight_step_ = -1;
}

bool CheckpointManager::end_step(int64_t step, bool applied, model::Transformer& model,
                                 model::Optimizer& optimizer, const data::MixtureLoader& loader,
                                 const parallel::DeviceMesh& mesh) {
  if (!checkpointer_) return false;
  profiler::Span span("checkpoint.end_step", "checkpoint");
  save_due_ = save_due_ || step % config_.interval == 0 || step == last_step_;
  if (save_due_ && applied) {
    save(step, model, optimizer, loader, mesh);
    save_due_ = false;
  }
  // One agreement per step over the job: was any rank signalled, and is any rank still
  // writing? Every rank then acts alike: commits together, stops after the same step.
  int32_t signalled = preemption_signal() != 0;
  int32_t writing = checkpointer_->save_in_flight() && !checkpointer_->write_done();
  if (mesh.comm().size() > 1) {
    Tensor flags = Tensor::from_vector<int32_t>({signalled, writing}, {2});
    mesh.comm().all_reduce(flags, parallel::ReduceOp::Max);
    signalled = flags.data<int32_t>()[0];
    writing = flags.data<int32_t>()[1];
  }
  if (checkpointer_->save_in_flight() && !writing) commit(mesh);
  if (!signalled) return false;
  if (!applied) {
    // The signal stays latched: every rank agrees on it again after the next step, which trains
    // and is saved before the job stops.
    spdlog::warn("preempted at step {}, which was skipped: stopping after the next step", step);
    return false;
  }

  const int signal = preemption_signal();
  spdlog::warn("preempted: {} received; saving step {} and stopping (exit code {})",
               signal != 0 ? strsignal(signal) : "a signal on another rank", step,
               exit_status(ExitCode::Preempted));
  if (last_saved_step_ != step) save(step, model, optimizer, loader, mesh);
  if (checkpointer_->save_in_flight()) commit(mesh);
  return true;
}

void CheckpointManager::finish(const parallel::DeviceMesh& mesh) {
  if (!checkpointer_) return;
  if (checkpointer_->save_in_flight()) commit(mesh);
  if (save_due_) {
    spdlog::warn("checkpoint: the last step, {}, was skipped (non-finite), so it is not saved; "
                 "the newest checkpoint is step {}",
                 last_step_, last_saved_step_);
  }
  if (!config_.last_save_in_hf || last_saved_step_ != last_step_) return;
  const auto start = Clock::now();
  const std::string step_folder = checkpointer_->step_folder(last_step_);
  const std::string out = hf_export_folder(*checkpointer_, last_step_);
  const DType dtype = config_.export_dtype;
  const int world = mesh.comm().size();
  // Every rank writes one file of the export, then rank 0 writes the index and config.json
  // and renames the folder into place.
  checkpoint::export_hf(step_folder, out, dtype, mesh.comm().rank(), world);
  mesh.comm().barrier();
  if (mesh.comm().rank() == 0) checkpoint::finish_hf_export(step_folder, out, dtype, world);
  mesh.comm().barrier();
  spdlog::info("checkpoint: step {} exported in Hugging Face format to {} in {:.2f} s",
               last_step_, out, seconds_since(start));
}

}  // namespace titan::app
