// Saving and resuming a training run, sharded (docs/architecture.md#decision-13): the model's
// parameters, the optimizer's moments and step, and the data loader's position, so that a
// resumed run continues bit for bit as if it had never stopped, on the same mesh or any other.
//
//   <dump_folder>/<folder>/step-<N>/rank<R>.safetensors   the pieces world rank R owned
//                                   metadata.json          written last (checkpoint_metadata.h)
//
// Each rank writes only what it owns (its FSDP shard of its tp slice, parallel/owned_rows.h),
// and a replica (a rank at dp_replicate coordinate > 0, or a tp-replicated parameter off tp rank 0)
// writes nothing. No rank ever holds a full tensor. A save goes to step-<N>.tmp/, every file is
// fsynced, rank 0 writes metadata.json once every rank's files are complete, and renames the folder
// into place; so a folder named step-<N> is always complete, and a crash at any moment leaves at
// worst a .tmp folder, which the next start ignores with a warning. Loading on any mesh reads, per
// rank, only the byte ranges that overlap what it owns (CheckpointReader).
//
// Asynchronous saves (checkpoint.async_mode): save() stages this rank's pieces to host memory
// (pinned on CUDA with async_with_pinned_mem) and returns; a background thread writes and
// fsyncs them while training goes on. The commit (metadata, rename, pruning to keep_latest_k)
// is collective and happens on the training thread: the trainer asks every step whether every
// rank's writes are done (write_done(), agreed over the job) and then calls commit(). One save
// is in flight at a time: save() and finish() first complete the one before.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "checkpoint/async_mode.h"
#include "checkpoint/checkpoint_reader.h"
#include "data/loader.h"
#include "model/optim/optimizer.h"
#include "model/transformer.h"
#include "parallel/device_mesh.h"

namespace titan::checkpoint {

struct TrainState {
  int64_t step = 0;  // the last completed optimizer step
  data::LoaderState loader;
};

struct CheckpointOptions {
  std::string folder;  // holds the step-<N> folders
  AsyncMode async_mode = AsyncMode::Disabled;
  int64_t keep_latest_k = 0;  // 0: keep all
};

// What load() restores.
enum class LoadScope { Everything, ModelOnly };

class Checkpointer {
 public:
  explicit Checkpointer(CheckpointOptions options);
  ~Checkpointer();  // joins a background write (uncommitted: it stays a .tmp folder)

  // The newest complete step in the folder, if any. Half-written folders (step-<N>.tmp, or a
  // step folder without metadata.json) are skipped, with a one-line warning each when `warn`
  // (one rank of a job says it for all).
  std::optional<int64_t> latest_step(bool warn = true) const;
  std::string step_folder(int64_t step) const;

  // Collective over the mesh. With async_mode disabled, returns once the checkpoint is
  // committed; otherwise once this rank's state is staged (call commit() later).
  void save(const TrainState& state, model::Transformer& model, model::Optimizer& optimizer,
            const parallel::DeviceMesh& mesh);
  bool save_in_flight() const;  // staged or written, not yet committed (same on every rank)
  bool write_done() const;      // this rank's background write has finished (never blocks)
  // Collective: waits for this rank's write, then commits (metadata, rename, pruning).
  // Rethrows a background write's failure.
  void commit(const parallel::DeviceMesh& mesh);
  // Collective: commits the save in flight, if any. The job calls it before it exits.
  void finish(const parallel::DeviceMesh& mesh) {
    if (save_in_flight()) commit(mesh);
  }
  // Seconds the last save() kept the training thread (staging, or the whole save when
  // synchronous), and the last commit() took.
  double last_save_blocking_s() const;

  // Every rank calls it, but it does not communicate (it runs in set-up, whose failures main
  // agrees on): each rank checks the CRC32C of its share of the files and reads the regions it
  // owns. Loads step `step` of this folder into the optimizer's parameters (this rank's
  // shards) and moments; InputError naming the folder when it is missing, corrupt (a file's
  // CRC32C, a truncated file) or was saved for another model.
  // `choice` names, in the caller's terms, what picks another step (checkpoint_reader.h).
  TrainState load(int64_t step, model::Transformer& model, model::Optimizer& optimizer,
                  const parallel::DeviceMesh& mesh, LoadScope scope = LoadScope::Everything,
                  const CheckpointChoice& choice = {}) const;
  // The same from any step folder (titan_train: checkpoint.initial_load_path).
  static TrainState load_folder(const std::string& step_folder, model::Transformer& model,
                                model::Optimizer& optimizer, const parallel::DeviceMesh& mesh,
                                LoadScope scope, const CheckpointChoice& choice = {});

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace titan::checkpoint
