// The job configuration: sections as torchtitan's (job, model, optimizer, lr_scheduler,
// training, parallelism, float8, lora, activation_checkpoint, checkpoint, data, validation; eval,
// metrics, profiling; then experimental), each key settable in a YAML file and overridable on the command
// line as --section.key value.
//
// Each field's initialiser is its default, written nowhere else. The rest of a key — its help,
// its allowed values, its single-key check — is its row in the key table (config_keys.h), which
// drives YAML loading and printing (config_yaml.h), command-line overrides and --help (cli.h),
// validation (config_validate.h) and docs/config.md (config_reference.h). An enum-like key holds
// the type of the layer that uses it, parsed from its name once, when the config is read, and
// never compared as text after. layer_options.h turns a config into each layer's options.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/async_mode.h"
#include "core/device.h"
#include "core/dtype.h"
#include "data/token_source.h"
#include "fp8/recipe.h"
#include "model/activation_checkpoint.h"
#include "model/lora_config.h"
#include "model/ops/attention/attention_backend.h"
#include "model/optim/lr_scheduler.h"
#include "model/optim/muon_config.h"
#include "model/optim/optimizer_state_dtype.h"
#include "model/optim/param_groups.h"
#include "parallel/context_parallel.h"
#include "parallel/device_mesh.h"
#include "parallel/mixed_precision.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline_gradient_reduction.h"

namespace titan::app {

// One entry of data.sources or validation.sources: a named path, as data.path takes it, and
// (training sources only) its weight in the mixture.
struct SourceEntry {
  std::string name;
  std::string path;
  double weight = 1;
};

struct JobConfig {
  struct Job {
    std::string description = "titan_train run";
    std::string dump_folder = "./outputs";  // checkpoints and other outputs go under it
  } job;

  struct Model {
    std::string name = "llama3";
    std::string flavor = "debugmodel";
    // Overrides of the flavor's dims; 0 keeps the flavor's value.
    int64_t dim = 0;
    int64_t n_layers = 0;
    int64_t n_heads = 0;
    int64_t n_kv_heads = 0;
    int64_t ffn_dim = 0;
    int64_t vocab_size = 0;
    double norm_eps = 1e-5;
    double rope_theta = 500000.0;
    bool rope_scaling = true;
    bool tie_word_embeddings = false;  // or the flavor's (Llama 3.2 is tied)
    std::string hf_assets_path;  // a folder with tokenizer.json (torchtitan's key); empty: none
    model::AttentionBackend attention_backend = model::AttentionBackend::Auto;
    model::AttentionMaskKind attention_mask = model::AttentionMaskKind::Causal;
  } model;

  struct Optimizer {
    std::string name = "AdamW";  // or "Muon": Muon on the hidden matrices, AdamW on the rest
    double lr = 8e-4;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;
    model::OptimizerStateDtype state_dtype = model::OptimizerStateDtype::Float32;
    // Per-parameter lr scale and weight decay, first regex match wins (model/optim/param_groups.h).
    std::vector<model::ParamGroupRule> groups;
    double muon_momentum = 0.95;
    bool muon_nesterov = true;
    int64_t muon_ns_steps = 5;
    model::MuonScale muon_scale = model::MuonScale::MatchAdamW;
  } optimizer;

  struct LrScheduler {
    int64_t warmup_steps = 200;
    std::optional<double> decay_ratio;  // null: decay over every step after warmup
    model::DecayType decay_type = model::DecayType::Linear;
    double min_lr_factor = 0.0;
  } lr_scheduler;

  struct Training {
    int64_t steps = 10000;
    int64_t seed = 0;
    int64_t local_batch_size = 8;
    int64_t global_batch_size = -1;  // -1: local_batch_size × data-parallel degree
    int64_t seq_len = 2048;
    Device device = Device::cpu();  // "cuda" alone: index Device::kUnchosen
    parallel::ParamPrecision mixed_precision_param = parallel::ParamPrecision::Auto;
    double max_norm = 1.0;
    int64_t skip_nonfinite_steps = 0;  // NaN/Inf steps skipped before the run stops (exit 3)
  } training;

  struct Parallelism {
    int64_t pipeline_parallel_degree = 1;
    int64_t dp_replicate = 1;
    int64_t dp_shard = -1;
    int64_t context_parallel_degree = 1;
    parallel::CpRotateMethod context_parallel_comm = parallel::CpRotateMethod::Ring;
    int64_t tp = 1;
    parallel::pipeline::ScheduleKind pipeline_parallel_schedule =
        parallel::pipeline::ScheduleKind::ONE_F_ONE_B;
    int64_t pipeline_parallel_microbatch_size = 1;
    int64_t pipeline_parallel_layers_per_stage = -1;  // -1: the schedule's stages per rank
    int64_t pipeline_parallel_first_stage_less_layers = 1;
    int64_t pipeline_parallel_last_stage_less_layers = 1;
    parallel::PipelineGradientReduction pipeline_parallel_gradient_reduction =
        parallel::PipelineGradientReduction::Microbatch;
    bool reshard_after_forward = true;
    parallel::CommBackend comm_backend = parallel::CommBackend::Auto;
    double comm_timeout_s = 600;
    bool enable_async_tensor_parallel = false;  // ring TP steps overlapped with their GEMMs
  } parallelism;

  struct Float8 {
    bool enabled = false;
    fp8::RecipeKind recipe = fp8::RecipeKind::Tensorwise;
    std::vector<std::string> filter_fqns = {"output"};
    bool auto_filter_small_kn = false;
    bool enable_fsdp_float8_all_gather = false;
    bool precompute_float8_dynamic_scale_for_fsdp = false;
  } float8;

  // Low-rank adapters (model/lora_config.h); rank 0: off.
  model::LoraConfig lora;

  struct ActivationCheckpoint {
    model::ActivationCheckpointMode mode = model::ActivationCheckpointMode::None;
    std::string selective_ac_option = "2";
  } activation_checkpoint;

  struct Checkpoint {
    bool enable = false;
    std::string folder = "checkpoint";
    int64_t interval = 500;
    int64_t load_step = -1;  // -1: the latest step found
    checkpoint::AsyncMode async_mode = checkpoint::AsyncMode::Disabled;
    int64_t keep_latest_k = 10;  // 0: keep every checkpoint
    // Where a run with no checkpoint of its own starts from (torchtitan's keys): a titan_train
    // step folder, or with initial_load_in_hf a Hugging Face Llama 3 folder.
    std::string initial_load_path;
    bool initial_load_in_hf = false;
    bool initial_load_model_only = true;
    bool last_save_in_hf = false;     // also write the final step as a HF folder
    DType export_dtype = DType::F32;  // of HF exports: float32 or bfloat16
  } checkpoint;

  struct Data {
    std::string path = "corpus/kjv.txt";
    data::TokenFormat format = data::TokenFormat::Auto;
    std::string tokenizer_path;  // byte, or a tokenizer.json (or its folder); empty: see resolve
    // A mixture (data/mixture.h) in place of data.path; empty: data.path alone.
    std::vector<SourceEntry> sources;
  } data;

  // torchtitan's validation section (its `dataset` names a Hugging Face dataset; here the
  // held-out data is always a path).
  struct Validation {
    bool enable = false;
    std::string dataset_path;          // required when enabled, unless sources are given
    std::vector<SourceEntry> sources;  // several held-out sets, each its own val_loss/<name>
    int64_t local_batch_size = -1;  // -1: training.local_batch_size
    int64_t seq_len = -1;           // -1: training.seq_len
    int64_t freq = 10;              // after step 1 and every freq-th step
    int64_t steps = -1;             // -1: every whole batch the held-out data holds

    // local_batch_size and seq_len with -1 resolved against the training section.
    int64_t resolved_local_batch_size(const Training& training) const {
      return local_batch_size == -1 ? training.local_batch_size : local_batch_size;
    }
    int64_t resolved_seq_len(const Training& training) const {
      return seq_len == -1 ? training.seq_len : seq_len;
    }
  } validation;

  // Multiple-choice tasks scored during training as lm-evaluation-harness scores them
  // (data/task_scoring.h, docs/evaluation.md); no tasks: off.
  struct Eval {
    std::vector<std::string> tasks;  // FILE or FORMAT:FILE, as titan_generate --tasks
    int64_t freq = 10;               // after step 1 and every freq-th step
    int64_t limit = -1;              // items per task; -1: every one
    int64_t batch_size = 8;          // rows per forward per data-parallel rank
    int64_t num_fewshot = 0;
    int64_t fewshot_seed = 1234;
    bool bos = true;          // BOS before every context
    std::string task_scores;  // each item's per-choice sums, JSON lines; empty: off
  } eval;

  struct Metrics {
    int64_t log_freq = 10;
    std::string jsonl;  // empty: no JSON lines file
    bool enable_tensorboard = false;
    std::string save_tb_folder = "tb";  // under job.dump_folder
    bool save_for_all_ranks = false;    // TensorBoard files from every rank, not only rank 0
  } metrics;

  struct Profiling {
    bool enable_profiling = false;
    std::string save_traces_folder = "profile_traces";  // under job.dump_folder
    int64_t profile_freq = 10;
    int64_t profiler_warmup = 3;
    int64_t profiler_active = 1;
    bool enable_memory_snapshot = false;
    std::string save_memory_snapshot_folder = "memory_snapshot";  // under job.dump_folder
  } profiling;

  // Paths not yet proven on hardware, each named to be taken (core/unverified_gpu_paths.h).
  struct Experimental {
    std::vector<std::string> unverified_gpu_paths;  // names, or "all"; none by default
  } experimental;
};

}  // namespace titan::app
