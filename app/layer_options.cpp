#include "app/layer_options.h"

#include <filesystem>

#include "parallel/mixed_precision.h"

namespace titan::app {

parallel::ParallelDims parallel_dims(const JobConfig& config, int64_t world_size) {
  const JobConfig::Parallelism& p = config.parallelism;
  parallel::MeshDegrees degrees;
  degrees.pp = p.pipeline_parallel_degree;
  degrees.dp_replicate = p.dp_replicate;
  degrees.dp_shard = p.dp_shard;
  degrees.cp = p.context_parallel_degree;
  degrees.tp = p.tp;
  return parallel::ParallelDims::resolve(degrees, world_size);
}

parallel::CommOptions comm_options(const JobConfig& config) {
  return {parallel::resolve_comm_backend(config.parallelism.comm_backend, config.training.device),
          config.parallelism.comm_timeout_s};
}

model::ActivationCheckpointPolicy activation_checkpoint_policy(const JobConfig& config) {
  return model::ActivationCheckpointPolicy::make(config.activation_checkpoint.mode,
                                                 config.activation_checkpoint.selective_ac_option,
                                                 "activation_checkpoint.selective_ac_option");
}

fp8::Float8Options float8_options(const JobConfig& config) {
  const JobConfig::Float8& f = config.float8;
  fp8::Float8Options options;
  options.enabled = f.enabled;
  options.recipe = f.recipe;
  options.filter_fqns = f.filter_fqns;
  options.auto_filter_small_kn = f.auto_filter_small_kn;
  return options;
}

parallel::ParallelizeOptions parallelize_options(const JobConfig& config, Device device) {
  const parallel::ParamPrecision precision =
      parallel::resolve_param_precision(config.training.mixed_precision_param, device);
  parallel::ParallelizeOptions options;
  // On CUDA bf16 compute and all-gather over fp32 master weights (the config refuses float32
  // there). On the CPU parameters stay f32, and bfloat16 rounds the linears' GEMM operands.
  options.placement = {device, device.is_cuda() ? DType::BF16 : DType::F32};
  options.bf16_gemm_operands = device.is_cpu() && precision == parallel::ParamPrecision::BFloat16;
  options.reshard_after_forward = config.parallelism.reshard_after_forward;
  options.async_tensor_parallel = config.parallelism.enable_async_tensor_parallel;
  options.cp_method = config.parallelism.context_parallel_comm;
  options.float8 = float8_options(config);
  options.float8_all_gather = config.float8.enable_fsdp_float8_all_gather;
  options.precompute_float8_scales = config.float8.precompute_float8_dynamic_scale_for_fsdp;
  options.pipeline_gradient_reduction = config.parallelism.pipeline_parallel_gradient_reduction;
  return options;
}

model::AdamWConfig adamw_config(const JobConfig& config) {
  const JobConfig::Optimizer& o = config.optimizer;
  return {o.beta1, o.beta2, o.eps, o.weight_decay, o.state_dtype};
}

model::MuonConfig muon_config(const JobConfig& config) {
  const JobConfig::Optimizer& o = config.optimizer;
  return {o.muon_momentum, o.muon_nesterov, static_cast<int>(o.muon_ns_steps), o.muon_scale};
}

model::LrScheduler lr_scheduler(const JobConfig& config) {
  const JobConfig::LrScheduler& s = config.lr_scheduler;
  return model::LrScheduler(config.optimizer.lr, config.training.steps, s.warmup_steps,
                            s.decay_ratio, s.decay_type, s.min_lr_factor);
}

checkpoint::CheckpointOptions checkpoint_options(const JobConfig& config) {
  checkpoint::CheckpointOptions options;
  options.folder =
      (std::filesystem::path(config.job.dump_folder) / config.checkpoint.folder).string();
  options.async_mode = config.checkpoint.async_mode;
  options.keep_latest_k = config.checkpoint.keep_latest_k;
  return options;
}

TokenizerChoice tokenizer_choice(const JobConfig& config) {
  if (!config.data.tokenizer_path.empty()) {
    return {config.data.tokenizer_path, "data.tokenizer_path"};
  }
  if (!config.model.hf_assets_path.empty()) {
    return {config.model.hf_assets_path, "model.hf_assets_path"};
  }
  return {"byte", "data.tokenizer_path"};
}

data::TokenSourceSpec training_data(const JobConfig& config) {
  return {config.data.path, config.data.format, "data.path", "data.format"};
}

data::TokenSourceSpec validation_data(const JobConfig& config) {
  // The held-out data's format follows what its path names (data.format is the training
  // data's), so no format key is ever named.
  return {config.validation.dataset_path, data::TokenFormat::Auto, "validation.dataset_path", ""};
}

std::vector<NamedSourceSpec> training_sources(const JobConfig& config) {
  if (config.data.sources.empty()) return {{"", training_data(config), 1.0}};
  std::vector<NamedSourceSpec> sources;
  for (size_t i = 0; i < config.data.sources.size(); ++i) {
    const SourceEntry& e = config.data.sources[i];
    sources.push_back({e.name,
                       {e.path, config.data.format, "data.sources[" + std::to_string(i) + "].path",
                        "data.format"},
                       e.weight});
  }
  return sources;
}

std::vector<NamedSourceSpec> validation_sets(const JobConfig& config) {
  if (config.validation.sources.empty()) return {{"", validation_data(config), 1.0}};
  std::vector<NamedSourceSpec> sets;
  for (size_t i = 0; i < config.validation.sources.size(); ++i) {
    const SourceEntry& e = config.validation.sources[i];
    sets.push_back({e.name,
                    {e.path, data::TokenFormat::Auto,
                     "validation.sources[" + std::to_string(i) + "].path", ""},
                    1.0});
  }
  return sets;
}

}  // namespace titan::app
