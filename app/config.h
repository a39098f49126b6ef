// The job configuration: sections as torchtitan's (job, model, optimizer, lr_scheduler,
// training, parallelism, float8, activation_checkpoint, checkpoint, data, validation, metrics,
// profiling), each key
// settable in a YAML file and overridable on the command line as --section.key value.
//
// One table (config_keys) describes every key — section, name, type, default, help — and
// drives everything else: YAML loading, command-line overrides, --help, the reference in
// docs/config.md (a test keeps it in sync), and the error messages, which always name the key,
// the value seen and the fix.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "fp8/recipe.h"
#include "parallel/device_mesh.h"

namespace titan::app {

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
    std::string hf_assets_path;  // a folder with tokenizer.json (torchtitan's key); empty: none
  } model;

  struct Optimizer {
    std::string name = "AdamW";
    double lr = 8e-4;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.1;
  } optimizer;

  struct LrScheduler {
    int64_t warmup_steps = 200;
    std::optional<double> decay_ratio;  // null: decay over every step after warmup
    std::string decay_type = "linear";
    double min_lr_factor = 0.0;
  } lr_scheduler;

  struct Training {
    int64_t steps = 10000;
    int64_t seed = 0;
    int64_t local_batch_size = 8;
    int64_t global_batch_size = -1;  // -1: local_batch_size × data-parallel degree
    int64_t seq_len = 2048;
    std::string device = "cpu";
    std::string mixed_precision_param = "auto";  // bfloat16 on CUDA, float32 on the CPU
    double max_norm = 1.0;
    int64_t skip_nonfinite_steps = 0;  // NaN/Inf steps skipped before the run stops (exit 3)
  } training;

  struct Parallelism {
    int64_t dp_replicate = 1;
    int64_t dp_shard = -1;
    int64_t tp = 1;
    bool reshard_after_forward = true;
    std::string comm_backend = "auto";  // auto: nccl on a CUDA device, mpi on the CPU
    double comm_timeout_s = 600;
    bool enable_async_tensor_parallel = false;  // ring TP steps overlapped with their GEMMs
  } parallelism;

  struct Float8 {
    bool enabled = false;
    fp8::RecipeKind recipe = fp8::RecipeKind::Tensorwise;  // parsed once, from its name
    std::vector<std::string> filter_fqns = {"output"};
    bool auto_filter_small_kn = false;
    bool enable_fsdp_float8_all_gather = false;
    bool precompute_float8_dynamic_scale_for_fsdp = false;
  } float8;

  struct ActivationCheckpoint {
    std::string mode = "none";
    std::string selective_ac_option = "2";
  } activation_checkpoint;

  struct Checkpoint {
    bool enable = false;
    std::string folder = "checkpoint";
    int64_t interval = 500;
    int64_t load_step = -1;  // -1: the latest step found
    std::string async_mode = "disabled";  // disabled, async, async_with_pinned_mem
    int64_t keep_latest_k = 10;           // 0: keep every checkpoint
    // Where a run with no checkpoint of its own starts from (torchtitan's keys): a titan_train
    // step folder, or with initial_load_in_hf a Hugging Face Llama 3 folder.
    std::string initial_load_path;
    bool initial_load_in_hf = false;
    bool initial_load_model_only = true;
    bool last_save_in_hf = false;            // also write the final step as a HF folder
    std::string export_dtype = "float32";  // float32 or bfloat16, for HF exports
  } checkpoint;

  struct Data {
    std::string path = "corpus/kjv.txt";
    std::string format = "auto";
    std::string tokenizer_path;  // byte, or a tokenizer.json (or its folder); empty: see resolve
  } data;

  // torchtitan's validation section (its `dataset` names a Hugging Face dataset; here the
  // held-out data is always a path).
  struct Validation {
    bool enable = false;
    std::string dataset_path;       // required when enabled
    int64_t local_batch_size = -1;  // -1: training.local_batch_size
    int64_t seq_len = -1;           // -1: training.seq_len
    int64_t freq = 10;              // after step 1 and every freq-th step
    int64_t steps = -1;             // -1: every whole batch the held-out data holds
  } validation;

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
};

using ConfigValueRef = std::variant<int64_t*, double*, bool*, std::string*,
                                    std::vector<std::string>*, std::optional<double>*,
                                    fp8::RecipeKind*>;

struct ConfigKey {
  std::string section;  // "training"
  std::string name;     // "steps"
  std::string help;
  ConfigValueRef value;

  std::string path() const { return section + "." + name; }  // "training.steps"
  std::string type_name() const;                             // "int", "float", "bool", …
  std::string value_text() const;                            // the current value, as YAML
};

// The config's sections, in the order they are documented.
const std::vector<std::string>& config_sections();

// Every key of `config`, bound to its fields.
std::vector<ConfigKey> config_keys(JobConfig& config);

// Sets `key` from text ("true", "8e-4", "a,b,c", "null"); InputError naming the key, the text,
// where it came from and the expected type.
void set_from_text(const ConfigKey& key, const std::string& text, const std::string& source);

// Reads a YAML config file into `config`; InputError for a missing file, a parse error, an
// unknown section or key (with the closest known key), or a value of the wrong type.
void load_yaml(JobConfig& config, const std::string& path);

// Semantic checks that need no other input (positive sizes, known names, ranges).
void validate(const JobConfig& config);

// parallelism.comm_backend and comm_timeout_s as DeviceMesh::root takes them, "auto" resolved
// by training.device (nccl on a CUDA device, mpi on the CPU). The config must be valid.
parallel::CommOptions comm_options(const JobConfig& config);

// The effective config as YAML, every key, sections in order.
std::string to_yaml(JobConfig& config);

// A markdown reference of every section and key (docs/config.md).
std::string config_reference_markdown();

// The known key closest to `unknown` by edit distance, or "" when nothing is close.
std::string closest_key(const std::string& unknown, const std::vector<std::string>& known);

}  // namespace titan::app
