// The checks of a training job that need nothing but its config, its world size and the size of
// its device: kept apart from the trainer that runs the job (as torchtitan keeps ParallelDims'
// validation apart from its trainer), so that each is one function a test calls with a config.
// Each throws InputError with one line naming the key at fault, the value seen and the fix,
// before anything large is allocated (docs/bad_input.md). None of them changes the process
// (rank_setup.h does that).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "app/config.h"
#include "app/pipeline_plan.h"
#include "app/rank_setup.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "parallel/parallel_dims.h"

namespace titan::app {

// pp > 1: the stages, microbatches and schedule (pipeline_plan.h), and that a microbatch (a
// training one, and a validation one) splits into tp sequence shards of a cp rank's tokens.
// nullopt at pp 1. Depends on the config alone, not on the world, so a plan can be checked on
// one process.
std::optional<PipelinePlan> check_pipeline(const JobConfig& config, const model::ModelArgs& args);

// model.attention_mask block_causal ends each document at the tokenizer's EOS: that id, refused
// in one line when the tokenizer (named by `tokenizer_key`) has none. nullopt under causal.
std::optional<int32_t> check_document_eos(const JobConfig& config, const data::Tokenizer& tokenizer,
                                          std::string_view tokenizer_key);

// The model's dims divide over tp, and the batch's token count fits 64 bits.
void check_model_fits_mesh(const JobConfig& config, const model::ModelArgs& args,
                           const parallel::ParallelDims& dims);

// The batch a step runs, resolved from the config's -1s.
struct BatchPlan {
  int64_t global_batch = 0;            // sequences per optimizer step
  int64_t accumulation = 1;            // micro-steps per optimizer step
  int64_t validation_local_batch = 0;  // validation.local_batch_size, -1 resolved
  int64_t validation_seq_len = 0;      // validation.seq_len, -1 resolved
};
// training.global_batch_size must be a multiple of local_batch_size × dp.
BatchPlan resolve_batch(const JobConfig& config, const parallel::ParallelDims& dims);

// What this rank's memory check measures against: the device's bytes, how many ranks share it,
// and how a message names it.
struct DeviceCapacity {
  double bytes = 0;
  int sharers = 1;
  bool cuda = false;
  std::string where;  // "cuda:0 (1 rank(s)), whose NVIDIA H200 has 140 GiB"
};
// This rank's GPU (shared by gpu.sharers ranks under the MPI backend), or this node's memory
// shared by its `local_size` ranks.
DeviceCapacity capacity_of(const RankDevice& rank, int local_size);

// The plan of this rank's step (app/plan/memory_plan.h, the one memory model titan_train --plan
// prints) against `capacity`: refused naming the largest part and how to shrink it.
void check_memory(const JobConfig& config, const model::ModelArgs& args,
                  const parallel::ParallelDims& dims, const DeviceCapacity& capacity);

}  // namespace titan::app
