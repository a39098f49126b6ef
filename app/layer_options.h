// The config, translated into each layer's own options: the one place where a key of
// JobConfig becomes an argument of the code that uses it, so that "where is key X used" is one
// grep in this file and one hop from it. Nothing here checks (config_validate.h did) or does I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "app/config.h"
#include "app/model_args.h"
#include "checkpoint/checkpointer.h"
#include "data/token_source.h"
#include "fp8/float8_linear.h"
#include "model/activation_checkpoint.h"
#include "model/config.h"
#include "model/optim/adamw_optimizer.h"
#include "model/optim/muon_config.h"
#include "model/optim/lr_scheduler.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dims.h"
#include "parallel/parallelize.h"

namespace titan::app {

// parallelism degrees on a world of `world_size` ranks; InputError naming the degree at fault.
parallel::ParallelDims parallel_dims(const JobConfig& config, int64_t world_size);

// parallelism.comm_backend, auto resolved by training.device, and comm_timeout_s.
parallel::CommOptions comm_options(const JobConfig& config);

// activation_checkpoint.*.
model::ActivationCheckpointPolicy activation_checkpoint_policy(const JobConfig& config);

// float8.* as the FP8 conversion takes them.
fp8::Float8Options float8_options(const JobConfig& config);

// What parallelize() applies on `device` (this rank's): placement and precision
// (training.mixed_precision_param, auto resolved by the device), FSDP, async TP, FP8.
parallel::ParallelizeOptions parallelize_options(const JobConfig& config, Device device);

// optimizer.* and lr_scheduler.* (with training.steps).
model::AdamWConfig adamw_config(const JobConfig& config);
model::MuonConfig muon_config(const JobConfig& config);
model::LrScheduler lr_scheduler(const JobConfig& config);

// checkpoint.* (the folder under job.dump_folder).
checkpoint::CheckpointOptions checkpoint_options(const JobConfig& config);

// The tokenizer of text data and the key it came from: data.tokenizer_path, else
// model.hf_assets_path (torchtitan's folder of the model's Hugging Face files), else byte.
struct TokenizerChoice {
  std::string spec;  // "byte", a tokenizer.json or its folder
  std::string key;
};
TokenizerChoice tokenizer_choice(const JobConfig& config);

// data.* and validation.dataset_path (whose format is always auto).
data::TokenSourceSpec training_data(const JobConfig& config);
data::TokenSourceSpec validation_data(const JobConfig& config);

// The training mixture: data.sources, each read with data.format and named in messages as
// data.sources[i].path; or data.path alone, one unnamed source of weight 1.
struct NamedSourceSpec {
  std::string name;  // "" for data.path or validation.dataset_path alone
  data::TokenSourceSpec spec;
  double weight = 1;
};
std::vector<NamedSourceSpec> training_sources(const JobConfig& config);
// The held-out sets: validation.sources, or validation.dataset_path alone (unnamed).
std::vector<NamedSourceSpec> validation_sets(const JobConfig& config);

}  // namespace titan::app
