// What a plan is made of: the config (the same file and overrides as a run), the mesh it is for
// and what follows from both (the model's dims, the activation checkpointing policy, the
// batch), resolved by the same rules as the trainer's set-up, so that a plan refuses exactly
// what the trainer would.
#pragma once

#include <cstdint>
#include <string>

#include "app/config.h"
#include "model/activation_checkpoint.h"
#include "model/config.h"
#include "parallel/parallel_dims.h"

namespace titan::app::plan {

// The mesh, outermost first (docs/architecture.md#decision-16):
//   pp  each rank replays only its stages' blocks (model::ActivationShape's first_layer, layers,
//       embedding, head) and parameter groups (parallel::ParallelMemoryOptions::group_ids),
//       through its own action list as the pipeline executor runs it (memory_plan.h)
//   cp  each rank holds S / cp of every sequence's tokens (ActivationShape::seq_len) and
//       attention holds the ring's or the all-gather's K/V (ActivationShape::cp), and FSDP
//       shards over dp_shard × cp (ParallelDims::fsdp_shards)
struct PlanMesh {
  int64_t pp = 1;
  int64_t dp_replicate = 1;
  int64_t dp_shard = 1;
  int64_t cp = 1;
  int64_t tp = 1;

  int64_t world() const { return pp * dp_replicate * dp_shard * cp * tp; }
  int64_t dp() const { return dp_replicate * dp_shard; }
  parallel::ParallelDims dims() const;
  std::string describe() const;  // "dp_replicate 2 × dp_shard 2 × tp 2"
  static PlanMesh of(const parallel::ParallelDims& dims);
};

struct PlanJob {
  JobConfig config;
  model::ModelArgs args;
  model::ActivationCheckpointPolicy ac;
  PlanMesh mesh;
  int64_t global_batch = 0;  // sequences per optimizer step
  int64_t accumulation = 1;  // micro-batches per optimizer step on each rank
  // The keys a token's attention counts (model::training_flops_per_token): training.seq_len
  // under causal; under block_causal the training data's documents, sampled
  // (with_document_keys), or seq_len when no data was read.
  double attention_keys = 0;
  std::string attention_keys_source;  // how attention_keys was found, for the plan's assumptions
};

// The job on `mesh`: InputError, naming the key, for a model that does not fit the mesh or a
// batch that does not divide (the trainer's check_config rules).
PlanJob plan_job(const JobConfig& config, const PlanMesh& mesh);

// Under model.attention_mask block_causal: `job` with attention_keys from the training data's
// documents (data.path read through the tokenizer as titan_train reads it, 256 windows sampled;
// data/documents.h). Under causal, or when the data cannot be read, the job as it was.
PlanJob with_document_keys(PlanJob job);

}  // namespace titan::app::plan
