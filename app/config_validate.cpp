#include "app/config_validate.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "app/config_keys.h"
#include "app/model_args.h"
#include "core/check.h"
#include "parallel/context_parallel_seq_len.h"

namespace titan::app {

namespace {

// An empty folder name is the working directory: outputs would land beside whatever is there.
void require_folder(const char* key, const std::string& folder, bool used, const char* example) {
  if (used && folder.empty()) input_error(key, ": is empty; name a folder, e.g. ", example);
}

void validate_training(const JobConfig& c) {
  if (c.training.device.is_cuda() &&
      c.training.mixed_precision_param == parallel::ParamPrecision::Float32) {
    input_error(
        "training.mixed_precision_param: 'float32' on CUDA, where the attention kernels "
        "compute in bf16; use bfloat16 or auto (fp32 master weights, moments and "
        "gradient reductions stay fp32)");
  }
}

void validate_parallelism(const JobConfig& c) {
  if (c.parallelism.enable_async_tensor_parallel && c.parallelism.tp == 1) {
    input_error(
        "parallelism.enable_async_tensor_parallel: is true but parallelism.tp is 1, so "
        "there is no tensor-parallel communication to overlap; set parallelism.tp > 1 or "
        "enable_async_tensor_parallel false");
  }
}

void validate_float8(const JobConfig& c) {
  const JobConfig::Float8& f = c.float8;
  // A tied output projection computes with the embedding's weight, which FP8 would hand to the
  // embedding as e4m3 codes under the float8 all-gather: it stays in bf16.
  if (f.enabled && model_args(c).tie_word_embeddings &&
      std::find(f.filter_fqns.begin(), f.filter_fqns.end(), "output") == f.filter_fqns.end()) {
    input_error("float8.filter_fqns: leaves out 'output', but the model's embeddings are tied "
                "(model.tie_word_embeddings, the Llama 3.2 flavors) and the output's weight is the "
                "embedding's; keep 'output' in float8.filter_fqns");
  }
  if (f.precompute_float8_dynamic_scale_for_fsdp && !f.enable_fsdp_float8_all_gather) {
    input_error(
        "float8.precompute_float8_dynamic_scale_for_fsdp: true precomputes the scales of "
        "the FSDP float8 all-gather, which is off; set "
        "float8.enable_fsdp_float8_all_gather: true as well, or this to false");
  }
  // Each shard is encoded with the whole weight's one scale, known before the gather.
  if (f.enabled && f.enable_fsdp_float8_all_gather && f.recipe != fp8::RecipeKind::Tensorwise) {
    input_error(
        "float8.enable_fsdp_float8_all_gather: needs float8.recipe tensorwise (one scale "
        "per weight, known before the gather), got '",
        fp8::recipe_name(f.recipe), "'; use tensorwise or turn the float8 all-gather off");
  }
}

void validate_activation_checkpoint(const JobConfig& c) {
  // selective_ac_option is read by mode selective only.
  model::ActivationCheckpointPolicy::make(c.activation_checkpoint.mode,
                                          c.activation_checkpoint.selective_ac_option,
                                          "activation_checkpoint.selective_ac_option");
}

void validate_checkpoint(const JobConfig& c) {
  const JobConfig::Checkpoint& ck = c.checkpoint;
  require_folder("checkpoint.folder", ck.folder, ck.enable, "checkpoint");
  if (ck.initial_load_in_hf && ck.initial_load_path.empty()) {
    input_error(
        "checkpoint.initial_load_in_hf: is true but checkpoint.initial_load_path is "
        "empty; name the Hugging Face Llama 3 folder to start from");
  }
  if (ck.initial_load_in_hf && !ck.initial_load_model_only) {
    input_error(
        "checkpoint.initial_load_model_only: is false but a Hugging Face folder holds "
        "weights only (checkpoint.initial_load_in_hf is true); set it true");
  }
}

void validate_data(const JobConfig& c) {
  // data.path has a default, so only a path other than it is known to have been set.
  if (!c.data.sources.empty() && !c.data.path.empty() && c.data.path != JobConfig{}.data.path) {
    input_error("data.path: '", c.data.path,
                "' is set beside data.sources, which replaces it; name that data as one more "
                "source of data.sources, or remove data.sources");
  }
}

void validate_validation(const JobConfig& c) {
  if (!c.validation.sources.empty() && !c.validation.dataset_path.empty()) {
    input_error("validation.dataset_path: '", c.validation.dataset_path,
                "' is set beside validation.sources, which replaces it; name it as one more "
                "entry of validation.sources, or remove validation.sources");
  }
  if (c.validation.enable && c.validation.dataset_path.empty() && c.validation.sources.empty()) {
    input_error(
        "validation.dataset_path: is empty but validation.enable is true; name the "
        "held-out data (a text file, a .bin token file, a folder or a glob of .bin "
        "shards) or several as validation.sources, or set validation.enable false");
  }
}

void validate_lora(const JobConfig& c) { model::validate_lora(c.lora, "lora"); }

void validate_metrics(const JobConfig& c) {
  require_folder("metrics.save_tb_folder", c.metrics.save_tb_folder, c.metrics.enable_tensorboard,
                 "tb");
}

void validate_profiling(const JobConfig& c) {
  const JobConfig::Profiling& p = c.profiling;
  if (p.profiler_warmup + p.profiler_active > p.profile_freq) {
    input_error("profiling.profiler_warmup: ", p.profiler_warmup, " + profiler_active ",
                p.profiler_active, " steps do not fit in profile_freq ", p.profile_freq,
                "; raise profile_freq to at least ", p.profiler_warmup + p.profiler_active,
                " or lower the other two");
  }
  require_folder("profiling.save_traces_folder", p.save_traces_folder, p.enable_profiling,
                 "profile_traces");
  require_folder("profiling.save_memory_snapshot_folder", p.save_memory_snapshot_folder,
                 p.enable_memory_snapshot, "memory_snapshot");
}

struct SectionRules {
  std::string_view section;
  void (*validate)(const JobConfig&);
};
constexpr SectionRules kSectionRules[] = {
    {"training", validate_training},     {"parallelism", validate_parallelism},
    {"float8", validate_float8},         {"activation_checkpoint", validate_activation_checkpoint},
    {"checkpoint", validate_checkpoint}, {"data", validate_data},
    {"validation", validate_validation}, {"metrics", validate_metrics},
    {"profiling", validate_profiling},   {"lora", validate_lora},
};

// Tokens per batch (per cp rank: S/cp of each sequence) that tp must split into sequence
// shards: `key` names the batch size. Runs after the seq_len check of cp.
void require_tp_split(const char* key, int64_t batch, int64_t seq_len, int64_t cp, int64_t tp,
                      const char* what, const char* fix_keys) {
  int64_t tokens = 0;
  // A product past int64 is refused once the data-parallel degree is known (the trainer).
  if (tp < 1 || cp < 1 || __builtin_mul_overflow(batch, seq_len / cp, &tokens)) return;
  if (tokens % tp == 0) return;
  if (cp == 1) {
    input_error(key, ": ", batch, " × seq_len ", seq_len, " = ", tokens, " tokens per ", what,
                " do not split into tp ", tp, " sequence shards; make ", fix_keys,
                " a multiple of ", tp);
  }
  input_error(key, ": ", batch, " × seq_len ", seq_len, " / context_parallel_degree ", cp, " = ",
              tokens, " tokens per ", what, " on a cp rank do not split into tp ", tp,
              " sequence shards; make ", fix_keys, " a multiple of ", tp * cp);
}

// Context parallelism cuts every sequence into 2·cp equal chunks (the head-tail split).
void require_cp_split(const JobConfig& c) {
  const int64_t cp = c.parallelism.context_parallel_degree;
  if (cp <= 1) return;  // 1: no split; below 1: the mesh refuses the degree
  parallel::check_cp_seq_len(c.training.seq_len, cp, "training.seq_len");
  if (c.validation.enable && c.validation.seq_len != -1) {
    parallel::check_cp_seq_len(c.validation.seq_len, cp, "validation.seq_len");
  }
}

// model.attention_backend: cudnn insists on cuDNN, and hopper on the Hopper kernel, which this
// build or the CPU may not have. Whether either takes the model's shape is the trainer's check
// (it needs the mesh); whether the build has sm_90a code and the GPU is a Hopper, the GPU run's.
void validate_attention_backend(const JobConfig& c) {
  const model::AttentionBackend backend = c.model.attention_backend;
  if (backend != model::AttentionBackend::Cudnn && backend != model::AttentionBackend::Hopper) {
    return;
  }
  const bool cudnn = backend == model::AttentionBackend::Cudnn;
  const std::string name(model::kAttentionBackends.name(backend));
  if (c.model.attention_mask == model::AttentionMaskKind::BlockCausal) {
    input_error("model.attention_backend: ", name, " with model.attention_mask block_causal: ",
                cudnn ? model::kCudnnBlockCausalRefusal : model::kHopperBlockCausalRefusal,
                "; use auto or native");
  }
  if (cudnn && !model::cudnn_attention_compiled()) {
    input_error(
        "model.attention_backend: cudnn, but this build has no cuDNN backend (CMake found "
        "no cuDNN 9 headers, or TITAN_CUDNN was off); use auto or native, or rebuild with "
        "cuDNN 9 (scripts/setup.sh, docs/cuda.md)");
  }
  if (!cudnn && !model::cuda_attention_compiled()) {
    input_error(
        "model.attention_backend: hopper, but this build has no CUDA backend (TITAN_CUDA was off); "
        "use auto or native, or rebuild with CUDA for sm_90a (docs/cuda.md)");
  }
  if (!c.training.device.is_cuda()) {
    input_error("model.attention_backend: ", name,
                " runs attention on a GPU, but training.device is '", c.training.device.str(),
                "'; use auto or native on the CPU, or train on cuda");
  }
}

void validate_across_sections(const JobConfig& c) {
  if (c.parallelism.comm_backend == parallel::CommBackend::Nccl && c.training.device.is_cpu()) {
    input_error("parallelism.comm_backend: nccl moves CUDA tensors, but training.device is '",
                c.training.device.str(),
                "'; use comm_backend mpi (or auto) on the CPU, or train on cuda");
  }
  const bool writes_outputs = c.checkpoint.enable || c.metrics.enable_tensorboard ||
                              c.profiling.enable_profiling || c.profiling.enable_memory_snapshot;
  require_folder("job.dump_folder", c.job.dump_folder, writes_outputs, "./outputs");
  if (c.profiling.enable_profiling && c.profiling.profile_freq > c.training.steps) {
    input_error("profiling.profile_freq: ", c.profiling.profile_freq, " is beyond the run's ",
                c.training.steps,
                " training.steps, so no step would be traced; set profile_freq to at most ",
                c.training.steps);
  }
  validate_attention_backend(c);
  require_cp_split(c);
  const int64_t tp = c.parallelism.tp, cp = c.parallelism.context_parallel_degree;
  require_tp_split("training.local_batch_size", c.training.local_batch_size, c.training.seq_len, cp,
                   tp, "micro-batch", "local_batch_size × seq_len");
  if (c.validation.enable) {
    require_tp_split("validation.local_batch_size",
                     c.validation.resolved_local_batch_size(c.training),
                     c.validation.resolved_seq_len(c.training), cp, tp, "validation batch",
                     "validation.local_batch_size × validation.seq_len");
  }
}

}  // namespace

void validate(const JobConfig& config) {
  JobConfig bound = config;  // the key table binds a config it could write; checks only read
  const std::vector<ConfigKey> keys = config_keys(bound);
  for (const std::string& section : config_sections()) {
    for (const ConfigKey& key : keys) {
      if (key.section == section && key.check) key.check();
    }
    for (const SectionRules& rules : kSectionRules) {
      if (rules.section == section) rules.validate(config);
    }
  }
  validate_across_sections(config);
}

}  // namespace titan::app
