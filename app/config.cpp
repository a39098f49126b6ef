#include "app/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "app/yaml_document.h"
#include "core/check.h"
#include "core/device.h"
#include "model/activation_checkpoint.h"
#include "model/config.h"
#include "model/optim/lr_scheduler.h"

namespace titan::app {

const std::vector<std::string>& config_sections() {
  static const std::vector<std::string> sections = {
      "job",        "model",       "optimizer",  "lr_scheduler",
      "training",   "parallelism", "float8",     "activation_checkpoint",
      "checkpoint", "data",        "validation", "metrics",
      "profiling"};
  return sections;
}

std::vector<ConfigKey> config_keys(JobConfig& c) {
  return {
      {"job", "description", "Free text shown at start-up.", &c.job.description},
      {"job", "dump_folder", "Folder for the job's outputs; checkpoints go under it.",
       &c.job.dump_folder},

      {"model", "name", "Model family. Only llama3.", &c.model.name},
      {"model", "flavor", "Named size: debugmodel, llama3_8b, llama3_70b, llama3_405b.",
       &c.model.flavor},
      {"model", "dim", "Override of the model dim D; 0 keeps the flavor's.", &c.model.dim},
      {"model", "n_layers", "Override of the number of blocks L; 0 keeps the flavor's.",
       &c.model.n_layers},
      {"model", "n_heads",
       "Override of the attention heads H (must divide dim); 0 keeps the flavor's.",
       &c.model.n_heads},
      {"model", "n_kv_heads",
       "Override of the key/value heads Hkv (must divide n_heads); 0 keeps the flavor's.",
       &c.model.n_kv_heads},
      {"model", "ffn_dim", "Override of the SwiGLU hidden size F; 0 keeps the flavor's.",
       &c.model.ffn_dim},
      {"model", "vocab_size",
       "Override of the vocabulary size V; 0 keeps the flavor's. The data's tokenizer must fit in "
       "it.",
       &c.model.vocab_size},
      {"model", "hf_assets_path",
       "A folder holding the model's Hugging Face tokenizer.json (torchtitan's key): text data is "
       "tokenized with it unless data.tokenizer_path says otherwise.",
       &c.model.hf_assets_path},
      {"model", "norm_eps", "RMSNorm epsilon.", &c.model.norm_eps},
      {"model", "rope_theta", "RoPE base frequency.", &c.model.rope_theta},
      {"model", "rope_scaling",
       "Llama 3.1 RoPE frequency scaling (factor 8, original context 8192).",
       &c.model.rope_scaling},

      {"optimizer", "name", "Optimizer. Only AdamW.", &c.optimizer.name},
      {"optimizer", "lr", "Peak learning rate.", &c.optimizer.lr},
      {"optimizer", "beta1", "AdamW beta1.", &c.optimizer.beta1},
      {"optimizer", "beta2", "AdamW beta2.", &c.optimizer.beta2},
      {"optimizer", "eps", "AdamW epsilon.", &c.optimizer.eps},
      {"optimizer", "weight_decay",
       "Decoupled weight decay, applied to every parameter (as torchtitan).",
       &c.optimizer.weight_decay},

      {"lr_scheduler", "warmup_steps", "Steps of linear warmup from lr/(warmup+1) to lr.",
       &c.lr_scheduler.warmup_steps},
      {"lr_scheduler", "decay_ratio",
       "Fraction of all steps spent decaying at the end; the steps between warmup and decay hold "
       "lr. null: decay over every step after warmup.",
       &c.lr_scheduler.decay_ratio},
      {"lr_scheduler", "decay_type", "Decay shape: linear, sqrt or cosine.",
       &c.lr_scheduler.decay_type},
      {"lr_scheduler", "min_lr_factor", "Floor of the decay, as a fraction of lr.",
       &c.lr_scheduler.min_lr_factor},

      {"training", "steps", "Optimizer steps to train.", &c.training.steps},
      {"training", "seed", "Seed of parameter initialisation and data order.", &c.training.seed},
      {"training", "local_batch_size", "Sequences per data-parallel rank per micro-step.",
       &c.training.local_batch_size},
      {"training", "global_batch_size",
       "Sequences per optimizer step over all data-parallel ranks; a multiple of local_batch_size "
       "× dp, larger means gradient accumulation. -1: local_batch_size × dp.",
       &c.training.global_batch_size},
      {"training", "seq_len", "Tokens per sequence S.", &c.training.seq_len},
      {"training", "device", "cpu, or cuda / cuda:N (needs the CUDA backend and a GPU).",
       &c.training.device},
      {"training", "mixed_precision_param",
       "auto, float32 or bfloat16. On CUDA bfloat16 (what auto means there): bf16 parameters "
       "for compute and all-gather over fp32 master weights, moments and gradient reductions "
       "(torchtitan's FSDP2 default). On the CPU the linears' GEMM operands only (an emulation: "
       "rounded to bf16, fp32 accumulation; auto means float32 there).",
       &c.training.mixed_precision_param},
      {"training", "max_norm", "Clip the global gradient norm to this; 0 disables clipping.",
       &c.training.max_norm},
      {"training", "skip_nonfinite_steps",
       "Steps whose loss or gradient norm is NaN or Inf that the run may skip (the optimizer "
       "step not taken, the weights and AdamW state unchanged, no checkpoint of that step "
       "written), each with a warning, before it stops with exit code 3. 0: stop at the first.",
       &c.training.skip_nonfinite_steps},

      {"parallelism", "dp_replicate", "Data-parallel replicas (DDP / HSDP).",
       &c.parallelism.dp_replicate},
      {"parallelism", "dp_shard", "FSDP shards; -1 takes the rest of the world size.",
       &c.parallelism.dp_shard},
      {"parallelism", "tp", "Tensor-parallel degree (innermost mesh dim).", &c.parallelism.tp},
      {"parallelism", "reshard_after_forward",
       "FSDP: free each block's gathered parameters after its forward and gather them again "
       "for backward (less memory, one more all-gather per block).",
       &c.parallelism.reshard_after_forward},
      {"parallelism", "comm_backend",
       "What moves tensors between ranks: nccl (CUDA tensors through NCCL on a communication "
       "stream, CPU tensors through MPI; needs training.device cuda), mpi (every tensor through "
       "MPI, CUDA tensors staged through host memory: slow, but ranks may share a GPU), or auto "
       "(nccl when training.device is cuda, mpi when it is cpu).",
       &c.parallelism.comm_backend},
      {"parallelism", "comm_timeout_s",
       "Seconds a rank may wait for a collective (MPI: blocked on it, set-up's blocking calls "
       "included; NCCL: since its post) before the backend's watchdog aborts the job, naming "
       "it, its mesh dims and the ranks that had not arrived; also the longest MPI_Finalize "
       "may wait at the exit.",
       &c.parallelism.comm_timeout_s},
      {"parallelism", "enable_async_tensor_parallel",
       "Async TP: every tensor-parallel all-gather and reduce-scatter of the linears, forward "
       "and backward, runs as tp ring steps overlapped with the GEMM chunks they feed or follow "
       "(the same values as synchronous TP). Needs tp > 1.",
       &c.parallelism.enable_async_tensor_parallel},

      {"float8", "enabled", "Train the selected linears in FP8.", &c.float8.enabled},
      {"float8", "recipe", "Scaling recipe: tensorwise, rowwise, rowwise_with_gw_hp, blockwise.",
       &c.float8.recipe},
      {"float8", "filter_fqns",
       "Linears kept in high precision: any linear whose name contains one of these strings; a "
       "comma-separated list on the command line.",
       &c.float8.filter_fqns},
      {"float8", "auto_filter_small_kn",
       "Keep in high precision, with a warning each, the linears whose FP8 GEMM dims after tp "
       "are not multiples of 16 or too small for FP8 to pay off (instead of an error).",
       &c.float8.auto_filter_small_kn},
      {"float8", "enable_fsdp_float8_all_gather",
       "Tensorwise: FSDP all-gathers the FP8 linears' weights as e4m3 bytes, each shard encoded "
       "with the whole weight's scale.",
       &c.float8.enable_fsdp_float8_all_gather},
      {"float8", "precompute_float8_dynamic_scale_for_fsdp",
       "With the float8 all-gather: compute every weight's scale after the optimizer step in "
       "one batched all-reduce, instead of one per gathered block.",
       &c.float8.precompute_float8_dynamic_scale_for_fsdp},

      {"activation_checkpoint", "mode", "none, full, selective or op.",
       &c.activation_checkpoint.mode},
      {"activation_checkpoint", "selective_ac_option",
       "With mode selective: checkpoint every N-th block, or 'op' for op-level recompute.",
       &c.activation_checkpoint.selective_ac_option},

      {"checkpoint", "enable", "Save checkpoints, and resume from the latest one found.",
       &c.checkpoint.enable},
      {"checkpoint", "folder", "Checkpoint folder, under job.dump_folder.", &c.checkpoint.folder},
      {"checkpoint", "interval", "Save every this many steps (and after the last step).",
       &c.checkpoint.interval},
      {"checkpoint", "load_step", "Step to resume from; -1: the latest saved.",
       &c.checkpoint.load_step},
      {"checkpoint", "async_mode",
       "disabled (a save blocks training until written), async (state staged to host memory, "
       "written by a background thread while training goes on) or async_with_pinned_mem (the "
       "same, staged into pinned memory on CUDA).",
       &c.checkpoint.async_mode},
      {"checkpoint", "keep_latest_k",
       "Keep this many newest complete checkpoints and delete older ones; 0 keeps all.",
       &c.checkpoint.keep_latest_k},
      {"checkpoint", "initial_load_path",
       "When checkpoint.folder holds no checkpoint yet: start from this step folder of another "
       "run (or, with initial_load_in_hf, a Hugging Face Llama 3 folder).",
       &c.checkpoint.initial_load_path},
      {"checkpoint", "initial_load_in_hf",
       "initial_load_path is a Hugging Face Llama 3 folder (config.json and model*.safetensors).",
       &c.checkpoint.initial_load_in_hf},
      {"checkpoint", "initial_load_model_only",
       "From initial_load_path take the weights only: optimizer state, step and data position "
       "start fresh.",
       &c.checkpoint.initial_load_model_only},
      {"checkpoint", "last_save_in_hf",
       "Also write the last step as a Hugging Face Llama 3 folder, hf-step-<N> beside the step "
       "folders.",
       &c.checkpoint.last_save_in_hf},
      {"checkpoint", "export_dtype", "float32 or bfloat16: the dtype of Hugging Face exports.",
       &c.checkpoint.export_dtype},

      {"data", "path",
       "Training data: a text file (through data.tokenizer_path), a .bin token file, or a folder "
       "or glob (e.g. shards/*.bin) of .bin shards read as one stream in path order.",
       &c.data.path},
      {"data", "format", "auto (by extension: .bin is binary), text or bin.", &c.data.format},
      {"data", "tokenizer_path",
       "The tokenizer of text data: byte, or a Hugging Face tokenizer.json or its folder; empty: "
       "model.hf_assets_path when set, else byte. Token files need none.",
       &c.data.tokenizer_path},

      {"validation", "enable",
       "After step 1 and every validation.freq-th step, compute the mean token loss of "
       "validation.steps batches of held-out data, forward only, and report it as val_loss.",
       &c.validation.enable},
      {"validation", "dataset_path",
       "Held-out data, as data.path takes it (format by extension): a text file, a .bin token "
       "file, a folder of .bin shards or a glob of them. Read in order from its start, so every "
       "evaluation sees the same batches.",
       &c.validation.dataset_path},
      {"validation", "local_batch_size",
       "Sequences per data-parallel rank per validation batch; -1: training.local_batch_size.",
       &c.validation.local_batch_size},
      {"validation", "seq_len", "Tokens per validation sequence; -1: training.seq_len.",
       &c.validation.seq_len},
      {"validation", "freq", "Validate after step 1 and every freq-th step.", &c.validation.freq},
      {"validation", "steps",
       "Batches per evaluation; -1: every whole batch the held-out data holds. More batches "
       "than it holds start again from its first window.",
       &c.validation.steps},

      {"metrics", "log_freq",
       "Log a metrics line every this many steps (and the first and last step).",
       &c.metrics.log_freq},
      {"metrics", "jsonl",
       "Also write each metrics line as a JSON object to this file; empty: off.", &c.metrics.jsonl},
      {"metrics", "enable_tensorboard",
       "Also write each metrics line as TensorBoard scalars (event files), and the config as text.",
       &c.metrics.enable_tensorboard},
      {"metrics", "save_tb_folder",
       "TensorBoard folder, under job.dump_folder; each run writes into a subfolder named by its "
       "start time.",
       &c.metrics.save_tb_folder},
      {"metrics", "save_for_all_ranks",
       "TensorBoard event files from every rank (rank_N subfolders), not only rank 0.",
       &c.metrics.save_for_all_ranks},

      {"profiling", "enable_profiling",
       "Write a Chrome trace (Perfetto, chrome://tracing) of chosen steps, one file per rank.",
       &c.profiling.enable_profiling},
      {"profiling", "save_traces_folder",
       "Trace folder, under job.dump_folder: iteration_N/rankR_trace.json.",
       &c.profiling.save_traces_folder},
      {"profiling", "profile_freq",
       "Trace the last profiler_active steps of every profile_freq steps.",
       &c.profiling.profile_freq},
      {"profiling", "profiler_warmup",
       "Steps before the traced ones left untraced so the trace starts warm (torchtitan's key; "
       "warmup + active must fit in profile_freq).",
       &c.profiling.profiler_warmup},
      {"profiling", "profiler_active", "Steps traced in each profile_freq window.",
       &c.profiling.profiler_active},
      {"profiling", "enable_memory_snapshot",
       "Write each rank's memory by category (parameters, gradients, activations per block, ...) "
       "at its peak step, and on running out of memory.",
       &c.profiling.enable_memory_snapshot},
      {"profiling", "save_memory_snapshot_folder",
       "Memory snapshot folder, under job.dump_folder: iteration_N/rankR_memory_snapshot.json.",
       &c.profiling.save_memory_snapshot_folder},
  };
}

std::string ConfigKey::type_name() const {
  struct Visitor {
    std::string operator()(int64_t*) const { return "int"; }
    std::string operator()(double*) const { return "float"; }
    std::string operator()(bool*) const { return "bool"; }
    std::string operator()(std::string*) const { return "string"; }
    std::string operator()(std::vector<std::string>*) const { return "list of strings"; }
    std::string operator()(std::optional<double>*) const { return "float or null"; }
    std::string operator()(fp8::RecipeKind*) const { return "string"; }  // a recipe's name
  };
  return std::visit(Visitor{}, value);
}

namespace {

std::string format_double(double v) {
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

// A string as a YAML scalar that reads back as the same string: plain only when it is made of
// characters that mean nothing to YAML anywhere in a scalar, and is not a word YAML reads as
// another type; otherwise double-quoted with YAML's escapes (a quote, a backslash, a control
// character or a NUL inside, a leading "- " or "? ", would otherwise end or bend the scalar, and
// --print-config's output would no longer load back; fuzz_config_yaml checks it).
std::string quote_if_needed(const std::string& s) {
  auto safe = [](char c) {
    // (strchr finds a NUL too: it is the terminator of the set.)
    return std::isalnum(static_cast<unsigned char>(c)) ||
           (c != '\0' && std::strchr("._/+=-", c) != nullptr);
  };
  std::string lower;
  for (const char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const char* const words[] = {"null", "true", "false", "yes", "no", "on", "off", "y", "n"};
  const bool plain =
      !s.empty() && s.front() != '-' && std::all_of(s.begin(), s.end(), safe) &&
      std::none_of(std::begin(words), std::end(words), [&](const char* w) { return lower == w; });
  if (plain) return s;
  std::string quoted = "\"";
  for (const char c : s) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (byte < 0x20 || byte == 0x7f) {
      char escape[5];
      std::snprintf(escape, sizeof escape, "\\x%02x", byte);
      quoted += escape;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

}  // namespace

std::string ConfigKey::value_text() const {
  struct Visitor {
    std::string operator()(int64_t* v) const { return std::to_string(*v); }
    std::string operator()(double* v) const { return format_double(*v); }
    std::string operator()(bool* v) const { return *v ? "true" : "false"; }
    std::string operator()(std::string* v) const { return quote_if_needed(*v); }
    std::string operator()(std::vector<std::string>* v) const {
      std::string text = "[";
      for (size_t i = 0; i < v->size(); ++i) text += (i ? ", " : "") + quote_if_needed((*v)[i]);
      return text + "]";
    }
    std::string operator()(std::optional<double>* v) const {
      return v->has_value() ? format_double(**v) : "null";
    }
    std::string operator()(fp8::RecipeKind* v) const { return std::string(fp8::recipe_name(*v)); }
  };
  return std::visit(Visitor{}, value);
}

namespace {

[[noreturn]] void type_error(const ConfigKey& key, const std::string& text,
                             const std::string& source, const char* expected) {
  input_error(key.path(), ": expected ", expected, ", got '", text, "' (", source, ")");
}

bool parse_int(const std::string& text, int64_t* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

bool parse_double(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(*out);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

}  // namespace

void set_from_text(const ConfigKey& key, const std::string& text, const std::string& source) {
  struct Visitor {
    const ConfigKey& key;
    const std::string& text;
    const std::string& source;
    void operator()(int64_t* v) const {
      if (!parse_int(text, v)) type_error(key, text, source, "an integer");
    }
    void operator()(double* v) const {
      if (!parse_double(text, v)) type_error(key, text, source, "a number");
    }
    void operator()(bool* v) const {
      if (text == "true" || text == "True" || text == "yes" || text == "on" || text == "1") {
        *v = true;
      } else if (text == "false" || text == "False" || text == "no" || text == "off" ||
                 text == "0") {
        *v = false;
      } else {
        type_error(key, text, source, "true or false");
      }
    }
    void operator()(std::string* v) const { *v = text; }
    void operator()(std::vector<std::string>* v) const {
      std::string inner = text;
      if (inner.size() >= 2 && inner.front() == '[' && inner.back() == ']') {
        inner = inner.substr(1, inner.size() - 2);
      }
      *v = split_list(inner);
    }
    void operator()(std::optional<double>* v) const {
      if (text == "null" || text == "none" || text == "None" || text == "~" || text.empty()) {
        v->reset();
        return;
      }
      double d = 0;
      if (!parse_double(text, &d)) type_error(key, text, source, "a number or null");
      *v = d;
    }
    // InputError naming float8.recipe and the recipes there are.
    void operator()(fp8::RecipeKind* v) const { *v = fp8::parse_recipe(text); }
  };
  std::visit(Visitor{key, text, source}, key.value);
}

std::string closest_key(const std::string& unknown, const std::vector<std::string>& known) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
        diagonal = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_distance = std::max<size_t>(3, unknown.size() / 3) + 1;
  for (const std::string& candidate : known) {
    size_t d = distance(unknown, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

void load_yaml(JobConfig& config, const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    input_error("--config: '", path, "' ",
                std::filesystem::is_directory(path, ec) ? "is a folder, not a file"
                : std::filesystem::exists(path, ec)     ? "is not a regular file"
                                                        : "does not exist",
                "; pass a YAML config such as configs/debug_model.yaml");
  }
  // A config is a few kilobytes; a bigger file is the wrong file (a checkpoint, a corpus).
  constexpr std::uintmax_t kMaxConfigBytes = 16u << 20;
  const std::uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec || bytes > kMaxConfigBytes) {
    input_error("--config: '", path, "' ",
                ec ? "cannot be sized (" + ec.message() + ")"
                   : "is " + std::to_string(bytes) + " bytes",
                "; a config is a small YAML file (at most ", kMaxConfigBytes,
                " bytes), such as configs/debug_model.yaml");
  }
  std::ifstream file(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (!file.good() && !file.eof()) {
    input_error("--config: cannot read '", path, "'; check its permissions");
  }
  YamlDocument document;
  try {
    document = read_yaml_document(text);
  } catch (const YAML::Exception& e) {
    input_error("--config: cannot parse '", path, "' at line ", e.mark.line + 1, ": ", e.msg,
                "; fix the YAML syntax there");
  }
  // yaml-cpp's LoadFile reads the first document only: the keys after a "---" would be
  // dropped without a word.
  if (document.second_document_line != 0) {
    input_error("--config: '", path, "' holds a second YAML document (line ",
                document.second_document_line,
                "), which titan_train would ignore; one config is one document: remove the "
                "'---' and merge its sections into the first");
  }
  if (document.root.IsNull()) return;  // an empty file keeps every default
  const YAML::Node& root = document.root;
  if (!root.IsMap()) {
    input_error("--config: '", path, "' must be a map of sections (job:, model:, training:, …)");
  }
  std::vector<ConfigKey> keys = config_keys(config);
  std::vector<std::string> key_paths;
  for (const ConfigKey& key : keys) key_paths.push_back(key.path());

  // YAML forbids a key twice in one map; yaml-cpp keeps both, and one would silently win.
  std::map<std::string, int> seen;  // section or section.key → its line
  auto once = [&](const std::string& name, const YAML::Node& node) {
    const int line = node.Mark().line + 1;
    const auto [it, fresh] = seen.emplace(name, line);
    if (!fresh) {
      input_error(path, ": '", name, "' is given twice (lines ", it->second, " and ", line,
                  "); keep one");
    }
  };
  for (const auto& section : root) {
    if (!section.first.IsScalar()) {
      input_error(path, ": line ", section.first.Mark().line + 1,
                  ": a section name must be a word (job:, model:, …), not a list or a map");
    }
    const std::string section_name = section.first.Scalar();
    once(section_name, section.first);
    const auto& known = config_sections();
    if (std::find(known.begin(), known.end(), section_name) == known.end()) {
      std::string hint = closest_key(section_name, known);
      input_error(path, ": unknown section '", section_name, "'",
                  hint.empty() ? "" : "; did you mean '" + hint + "'?",
                  " (titan_train --help lists every section and key)");
    }
    if (section.second.IsNull()) continue;
    if (!section.second.IsMap()) {
      input_error(path, ": section '", section_name, "' must be a map of keys, line ",
                  section.second.Mark().line + 1);
    }
    for (const auto& entry : section.second) {
      if (!entry.first.IsScalar()) {
        input_error(path, ": line ", entry.first.Mark().line + 1, ": a key of section '",
                    section_name, "' must be a word, not a list or a map");
      }
      const std::string name = section_name + "." + entry.first.Scalar();
      once(name, entry.first);
      auto key = std::find_if(keys.begin(), keys.end(),
                              [&](const ConfigKey& k) { return k.path() == name; });
      if (key == keys.end()) {
        std::string hint = closest_key(name, key_paths);
        input_error(path, ": unknown key '", name, "'",
                    hint.empty() ? "" : "; did you mean '" + hint + "'?",
                    " (titan_train --help lists every key)");
      }
      const std::string source = path + " line " + std::to_string(entry.second.Mark().line + 1);
      const YAML::Node& value = entry.second;
      if (value.IsSequence()) {
        if (!std::holds_alternative<std::vector<std::string>*>(key->value)) {
          input_error(name, ": expected ", key->type_name(), ", got a list (", source, ")");
        }
        auto* list = std::get<std::vector<std::string>*>(key->value);
        list->clear();
        for (const auto& item : value) {
          if (!item.IsScalar()) input_error(name, ": list items must be strings (", source, ")");
          list->push_back(item.Scalar());
        }
      } else if (value.IsMap()) {
        input_error(name, ": expected ", key->type_name(), ", got a map (", source, ")");
      } else if (value.IsNull()) {
        if (auto* optional = std::get_if<std::optional<double>*>(&key->value)) {
          (*optional)->reset();
        } else if (auto* text = std::get_if<std::string*>(&key->value)) {
          (*text)->clear();
        } else {
          input_error(name, ": expected ", key->type_name(), ", got null (", source, ")");
        }
      } else {
        set_from_text(*key, value.Scalar(), source);
      }
    }
  }
}

void validate(const JobConfig& c) {
  auto positive = [](const char* key, int64_t v, const char* fix) {
    if (v <= 0) input_error(key, ": must be positive, got ", v, "; ", fix);
  };
  auto non_empty_when = [](const char* key, const std::string& v, bool used, const char* example) {
    if (used && v.empty()) input_error(key, ": is empty; name a folder, e.g. ", example);
  };
  auto at_least_zero = [](const char* key, int64_t v) {
    if (v < 0) input_error(key, ": must be 0 (the flavor's value) or positive, got ", v);
  };
  if (c.model.name != "llama3") {
    input_error("model.name: unknown model '", c.model.name, "'; titan_train trains llama3");
  }
  model::model_flavor(c.model.flavor);  // throws naming model.flavor
  at_least_zero("model.dim", c.model.dim);
  at_least_zero("model.n_layers", c.model.n_layers);
  at_least_zero("model.n_heads", c.model.n_heads);
  at_least_zero("model.n_kv_heads", c.model.n_kv_heads);
  at_least_zero("model.ffn_dim", c.model.ffn_dim);
  at_least_zero("model.vocab_size", c.model.vocab_size);

  if (c.optimizer.name != "AdamW") {
    input_error("optimizer.name: unknown optimizer '", c.optimizer.name, "'; use AdamW");
  }
  if (!(c.optimizer.lr > 0))
    input_error("optimizer.lr: must be positive, got ", c.optimizer.lr, "; e.g. 8e-4");
  if (!(c.optimizer.beta1 >= 0 && c.optimizer.beta1 < 1)) {
    input_error("optimizer.beta1: must be in [0, 1), got ", c.optimizer.beta1, "; e.g. 0.9");
  }
  if (!(c.optimizer.beta2 >= 0 && c.optimizer.beta2 < 1)) {
    input_error("optimizer.beta2: must be in [0, 1), got ", c.optimizer.beta2, "; e.g. 0.95");
  }
  if (!(c.optimizer.eps > 0))
    input_error("optimizer.eps: must be positive, got ", c.optimizer.eps, "; e.g. 1e-8");
  if (c.optimizer.weight_decay < 0) {
    input_error("optimizer.weight_decay: must be 0 or positive, got ", c.optimizer.weight_decay);
  }

  if (c.lr_scheduler.warmup_steps < 0) {
    input_error("lr_scheduler.warmup_steps: must be 0 or positive, got ",
                c.lr_scheduler.warmup_steps);
  }
  if (c.lr_scheduler.decay_ratio &&
      !(*c.lr_scheduler.decay_ratio >= 0 && *c.lr_scheduler.decay_ratio <= 1)) {
    input_error("lr_scheduler.decay_ratio: must be in [0, 1] or null, got ",
                *c.lr_scheduler.decay_ratio);
  }
  model::parse_decay_type(c.lr_scheduler.decay_type);
  if (!(c.lr_scheduler.min_lr_factor >= 0 && c.lr_scheduler.min_lr_factor <= 1)) {
    input_error("lr_scheduler.min_lr_factor: must be in [0, 1], got ",
                c.lr_scheduler.min_lr_factor);
  }

  positive("training.steps", c.training.steps, "set the number of optimizer steps, e.g. 200");
  positive("training.local_batch_size", c.training.local_batch_size, "e.g. 8 sequences per rank");
  positive("training.seq_len", c.training.seq_len, "e.g. 2048 tokens");
  if (c.training.global_batch_size != -1 && c.training.global_batch_size <= 0) {
    input_error("training.global_batch_size: must be positive or -1 (local_batch_size × dp), got ",
                c.training.global_batch_size);
  }
  if (c.training.seed < 0)
    input_error("training.seed: must be 0 or positive, got ", c.training.seed);
  if (c.training.max_norm < 0) {
    input_error("training.max_norm: must be 0 (no clipping) or positive, got ",
                c.training.max_norm);
  }
  if (c.training.skip_nonfinite_steps < 0) {
    input_error(
        "training.skip_nonfinite_steps: must be 0 (stop at the first NaN/Inf step) or "
        "the number of such steps to skip, got ",
        c.training.skip_nonfinite_steps);
  }
  Device device;
  try {
    device = parse_device(c.training.device);
  } catch (const InputError& e) {
    input_error("training.device: ", e.what());  // the key, then what parse_device says
  }
  const std::string& precision = c.training.mixed_precision_param;
  if (precision != "auto" && precision != "float32" && precision != "bfloat16") {
    input_error("training.mixed_precision_param: unknown precision '", precision,
                "'; use auto, float32 or bfloat16");
  }
  if (device.is_cuda() && precision == "float32") {
    input_error(
        "training.mixed_precision_param: 'float32' on CUDA, where the attention kernels "
        "compute in bf16; use bfloat16 or auto (fp32 master weights, moments and "
        "gradient reductions stay fp32)");
  }

  const std::string& backend = c.parallelism.comm_backend;
  if (backend != "auto" && backend != "nccl" && backend != "mpi") {
    input_error("parallelism.comm_backend: unknown backend '", backend, "'; use auto, nccl or mpi");
  }
  if (backend == "nccl" && device.is_cpu()) {
    input_error("parallelism.comm_backend: nccl moves CUDA tensors, but training.device is '",
                c.training.device,
                "'; use comm_backend mpi (or auto) on the CPU, or train on cuda");
  }
  if (c.parallelism.enable_async_tensor_parallel && c.parallelism.tp == 1) {
    input_error(
        "parallelism.enable_async_tensor_parallel: is true but parallelism.tp is 1, so "
        "there is no tensor-parallel communication to overlap; set parallelism.tp > 1 or "
        "enable_async_tensor_parallel false");
  }
  if (!(c.parallelism.comm_timeout_s > 0) || !std::isfinite(c.parallelism.comm_timeout_s)) {
    input_error("parallelism.comm_timeout_s: must be a positive number of seconds, got ",
                c.parallelism.comm_timeout_s,
                "; e.g. 600 (seconds before a stuck collective aborts the job)");
  }

  model::ActivationCheckpointPolicy::parse(c.activation_checkpoint.mode,
                                           c.activation_checkpoint.selective_ac_option);
  positive("checkpoint.interval", c.checkpoint.interval, "save every N steps, e.g. 500");
  if (c.checkpoint.load_step < -1) {
    input_error("checkpoint.load_step: must be -1 (latest) or a saved step, got ",
                c.checkpoint.load_step);
  }
  const JobConfig::Checkpoint& ck = c.checkpoint;
  // An empty folder is the working directory: checkpoints would land beside whatever is there.
  non_empty_when("checkpoint.folder", ck.folder, ck.enable, "checkpoint");
  non_empty_when("job.dump_folder", c.job.dump_folder,
                 ck.enable || c.metrics.enable_tensorboard || c.profiling.enable_profiling ||
                     c.profiling.enable_memory_snapshot,
                 "./outputs");
  if (ck.async_mode != "disabled" && ck.async_mode != "async" &&
      ck.async_mode != "async_with_pinned_mem") {
    input_error("checkpoint.async_mode: unknown mode '", ck.async_mode,
                "'; use disabled, async or async_with_pinned_mem");
  }
  if (ck.keep_latest_k < 0) {
    input_error("checkpoint.keep_latest_k: must be 0 (keep all) or positive, got ",
                ck.keep_latest_k, "; e.g. 10");
  }
  if (ck.export_dtype != "float32" && ck.export_dtype != "bfloat16") {
    input_error("checkpoint.export_dtype: unknown dtype '", ck.export_dtype,
                "'; use float32 or bfloat16");
  }
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
  if (c.data.format != "auto" && c.data.format != "text" && c.data.format != "bin") {
    input_error("data.format: unknown format '", c.data.format, "'; use auto, text or bin");
  }
  const JobConfig::Validation& v = c.validation;
  if (v.enable && v.dataset_path.empty()) {
    input_error(
        "validation.dataset_path: is empty but validation.enable is true; name the "
        "held-out data (a text file, a .bin token file, a folder or a glob of .bin "
        "shards), or set validation.enable false");
  }
  positive("validation.freq", v.freq, "validate every N steps, e.g. 10");
  if (v.steps != -1 && v.steps <= 0) {
    input_error("validation.steps: must be positive or -1 (all the held-out data), got ", v.steps);
  }
  if (v.local_batch_size != -1 && v.local_batch_size <= 0) {
    input_error(
        "validation.local_batch_size: must be positive or -1 (training.local_batch_size), "
        "got ",
        v.local_batch_size);
  }
  if (v.seq_len != -1 && v.seq_len <= 0) {
    input_error("validation.seq_len: must be positive or -1 (training.seq_len), got ", v.seq_len);
  }
  positive("metrics.log_freq", c.metrics.log_freq, "log every N steps, e.g. 10");
  non_empty_when("metrics.save_tb_folder", c.metrics.save_tb_folder, c.metrics.enable_tensorboard,
                 "tb");
  const JobConfig::Profiling& p = c.profiling;
  positive("profiling.profile_freq", p.profile_freq, "trace every N steps, e.g. 10");
  positive("profiling.profiler_active", p.profiler_active, "trace 1 step per window, e.g. 1");
  if (p.profiler_warmup < 0) {
    input_error("profiling.profiler_warmup: must be 0 or positive, got ", p.profiler_warmup);
  }
  if (p.profiler_warmup + p.profiler_active > p.profile_freq) {
    input_error("profiling.profiler_warmup: ", p.profiler_warmup, " + profiler_active ",
                p.profiler_active, " steps do not fit in profile_freq ", p.profile_freq,
                "; raise profile_freq to at least ", p.profiler_warmup + p.profiler_active,
                " or lower the other two");
  }
  if (p.enable_profiling && p.profile_freq > c.training.steps) {
    input_error("profiling.profile_freq: ", p.profile_freq, " is beyond the run's ",
                c.training.steps,
                " training.steps, so no step would be traced; set profile_freq "
                "to at most ",
                c.training.steps);
  }
  non_empty_when("profiling.save_traces_folder", p.save_traces_folder, p.enable_profiling,
                 "profile_traces");
  non_empty_when("profiling.save_memory_snapshot_folder", p.save_memory_snapshot_folder,
                 p.enable_memory_snapshot, "memory_snapshot");
}

parallel::CommOptions comm_options(const JobConfig& config) {
  const std::string& backend = config.parallelism.comm_backend;
  const bool nccl =
      backend == "nccl" || (backend == "auto" && parse_device(config.training.device).is_cuda());
  return {nccl ? parallel::CommBackend::Nccl : parallel::CommBackend::Mpi,
          config.parallelism.comm_timeout_s};
}

std::string to_yaml(JobConfig& config) {
  std::string text;
  std::string section;
  for (const ConfigKey& key : config_keys(config)) {
    if (key.section != section) {
      section = key.section;
      text += section + ":\n";
    }
    text += "  " + key.name + ": " + key.value_text() + "\n";
  }
  return text;
}

std::string config_reference_markdown() {
  JobConfig defaults;
  std::string md =
      "# Configuration reference\n\n"
      "Generated by `titan_train --config-reference`; `test_app` fails when this file and the\n"
      "binary disagree. Every key can be set in the YAML file given with `--config` and\n"
      "overridden on the command line as `--section.key value` (lists as `a,b,c`).\n"
      "\n## Command-line flags\n\n"
      "| flag | meaning |\n|---|---|\n"
      "| `--config FILE` | the YAML config to start from (without it, every key has its default) "
      "|\n"
      "| `--section.key VALUE` | override one key; the command line wins over the file |\n"
      "| `--print-config` | print the effective config as YAML, after overrides and checks, and "
      "exit |\n"
      "| `--list-devices` | list the CUDA devices this process can use, or say why there are none "
      "|\n"
      "| `--config-reference` | print this reference and exit |\n"
      "| `-h`, `--help` | every flag and key, by section |\n";
  std::string section;
  for (const ConfigKey& key : config_keys(defaults)) {
    if (key.section != section) {
      section = key.section;
      md += "\n## " + section + "\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
    }
    md += "| `" + key.path() + "` | " + key.type_name() + " | `" + key.value_text() + "` | " +
          key.help + " |\n";
  }
  return md;
}

}  // namespace titan::app
