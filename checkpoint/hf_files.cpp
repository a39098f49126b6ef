#include "checkpoint/hf_files.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "checkpoint/hf_config_layouts.h"
#include "core/check.h"
#include "core/file_io.h"
#include "core/json_reader.h"
#include "core/json_text.h"

namespace titan::checkpoint {

namespace fs = std::filesystem;

namespace {

// config.json and the index are small; anything larger is not one.
constexpr uint64_t kMaxJsonBytes = 64ull << 20;

// Messages name the file as "<what> '<path>'"; HF writes an optional key as null or leaves it
// out, and both mean absent.
JsonReader hf_json_reader(const std::string& path, const char* what) {
  JsonReader::Style style;
  style.null_is_absent = true;
  return JsonReader(std::string(what) + " '" + path + "'", style);
}

// Reads and parses the JSON object in `path` into `document`.
JsonObject read_json_object(JsonDocument& document, const JsonReader& json,
                            const std::string& path) {
  std::error_code ec;
  const uint64_t bytes = fs::file_size(path, ec);
  if (ec) json.fail_file("cannot read (", ec.message(), ")");
  if (bytes > kMaxJsonBytes) {
    json.fail_file(bytes, " bytes, over the ", kMaxJsonBytes,
                   "-byte limit for this file; is it the right file?");
  }
  if (!document.load(path)) json.fail_file("cannot read");
  if (!document.parse()) json.fail_file("not valid JSON (", document.error(), ")");
  const std::optional<JsonObject> object = document.root().get_object();
  if (!object) json.fail_file("not a JSON object");
  return *object;
}

bool same_double(double a, double b) { return a == b || std::abs(a - b) <= 1e-12 * std::abs(b); }

}  // namespace

HfConfig read_hf_config(const std::string& path) {
  const JsonReader json = hf_json_reader(path, "config.json");
  JsonDocument document;
  const JsonObject root = read_json_object(document, json, path);
  auto integer = [&](std::string_view key, std::optional<int64_t> otherwise = std::nullopt) {
    const std::optional<JsonValue> value = json.member(root, key);
    if (!value) {
      if (otherwise) return *otherwise;
      json.fail(key, "missing; a Llama config.json has it");
    }
    const std::optional<int64_t> out = value->get_int64();
    if (!out || *out <= 0) json.fail(key, "expected a positive integer");
    return *out;
  };
  auto real = [&](JsonObject object, std::string_view key, std::optional<double> otherwise,
                  std::string_view where) {
    const std::optional<JsonValue> value = json.member(object, key);
    if (!value) {
      if (otherwise) return *otherwise;
      json.fail(where, "missing");
    }
    const std::optional<double> out = value->get_double();
    if (!out || !std::isfinite(*out) || *out <= 0) json.fail(where, "expected a positive number");
    return *out;
  };

  if (const std::optional<JsonValue> type = json.member(root, "model_type")) {
    if (type->get_string() != std::optional<std::string_view>("llama")) {
      json.fail("model_type", "is not \"llama\"; titan_train reads Llama checkpoints only");
    }
  }
  HfConfig config;
  model::ModelArgs& a = config.args;
  a.dim = integer("hidden_size");
  a.n_layers = integer("num_hidden_layers");
  a.n_heads = integer("num_attention_heads");
  a.n_kv_heads = integer("num_key_value_heads", a.n_heads);
  a.ffn_dim = integer("intermediate_size");
  a.vocab_size = integer("vocab_size");
  a.norm_eps = real(root, "rms_norm_eps", std::nullopt, "rms_norm_eps");
  if (a.dim % a.n_heads != 0) {
    json.fail("hidden_size", a.dim, " is not a multiple of num_attention_heads ", a.n_heads);
  }
  const int64_t head_dim = integer("head_dim", a.dim / a.n_heads);
  if (head_dim != a.dim / a.n_heads) {
    json.fail("head_dim", head_dim, " is not hidden_size / num_attention_heads = ",
              a.dim / a.n_heads, "; titan_train derives the head dim");
  }
  const HfRope rope = read_hf_rope(json, root);
  a.rope_theta = rope.theta;
  a.rope_scaling = rope.scaling;
  if (!rope.assumed.empty()) config.assumed = "config.json '" + path + "' " + rope.assumed;
  config.dtype = read_hf_dtype(json, root);
  if (const std::optional<JsonValue> tie = json.member(root, "tie_word_embeddings")) {
    const std::optional<bool> tied = tie->get_bool();
    if (!tied) json.fail("tie_word_embeddings", "expected true or false");
    config.tie_word_embeddings = *tied;
    a.tie_word_embeddings = *tied;
  }
  return config;
}

void check_hf_config(const HfConfig& config, const model::ModelArgs& args,
                     const std::string& path, const std::string& model_section) {
  // Every difference in the one line (a bad input is one line): "; " between them.
  std::ostringstream differences;
  int mismatches = 0;
  auto compare = [&](const char* hf_key, auto hf_value, const char* our_key, auto our_value,
                     bool same) {
    if (same) return;
    differences << (mismatches++ == 0 ? "" : "; ") << hf_key << " is " << hf_value
                << " but the model's " << our_key << " is " << our_value;
  };
  const model::ModelArgs& c = config.args;
  compare("hidden_size", c.dim, "dim", args.dim, c.dim == args.dim);
  compare("num_hidden_layers", c.n_layers, "n_layers", args.n_layers, c.n_layers == args.n_layers);
  compare("num_attention_heads", c.n_heads, "n_heads", args.n_heads, c.n_heads == args.n_heads);
  compare("num_key_value_heads", c.n_kv_heads, "n_kv_heads", args.n_kv_heads,
          c.n_kv_heads == args.n_kv_heads);
  compare("intermediate_size", c.ffn_dim, "ffn_dim", args.ffn_dim, c.ffn_dim == args.ffn_dim);
  compare("vocab_size", c.vocab_size, "vocab_size", args.vocab_size,
          c.vocab_size == args.vocab_size);
  compare("rms_norm_eps", json_number(c.norm_eps), "norm_eps", json_number(args.norm_eps),
          same_double(c.norm_eps, args.norm_eps));
  compare("rope_theta", json_number(c.rope_theta), "rope_theta", json_number(args.rope_theta),
          same_double(c.rope_theta, args.rope_theta));
  compare("tie_word_embeddings", config.tie_word_embeddings ? "true" : "false",
          "tie_word_embeddings", args.tie_word_embeddings ? "true" : "false",
          config.tie_word_embeddings == args.tie_word_embeddings);
  const model::RopeScaling& cs = c.rope_scaling;
  const model::RopeScaling& as = args.rope_scaling;
  compare("rope_scaling", cs.enabled ? "llama3" : "null", "rope_scaling",
          as.enabled ? "llama3 (enabled)" : "disabled", cs.enabled == as.enabled);
  if (cs.enabled && as.enabled) {
    compare("rope_scaling.factor", json_number(cs.factor), "rope_scaling.factor",
            json_number(as.factor), same_double(cs.factor, as.factor));
    compare("rope_scaling.low_freq_factor", json_number(cs.low_freq_factor),
            "rope_scaling.low_freq_factor", json_number(as.low_freq_factor),
            same_double(cs.low_freq_factor, as.low_freq_factor));
    compare("rope_scaling.high_freq_factor", json_number(cs.high_freq_factor),
            "rope_scaling.high_freq_factor", json_number(as.high_freq_factor),
            same_double(cs.high_freq_factor, as.high_freq_factor));
    compare("rope_scaling.original_max_position_embeddings", json_number(cs.original_max_position),
            "rope_scaling.original_max_position", json_number(as.original_max_position),
            same_double(cs.original_max_position, as.original_max_position));
  }
  if (mismatches > 0) {
    input_error("config.json '", path, "' does not match the model (", mismatches,
                mismatches == 1 ? " difference: " : " differences: ", differences.str(), ")",
                model_section.empty()
                    ? "; load it with the model it was saved for"
                    : "; pick the " + model_section + ".flavor / " + model_section +
                          ".* keys of this checkpoint");
  }
}

int64_t hf_max_position_embeddings(const model::ModelArgs& args) {
  return args.rope_scaling.enabled ? 131072 : 8192;
}

std::string hf_config_json(const model::ModelArgs& args, DType dtype) {
  TT_CHECK(dtype == DType::F32 || dtype == DType::BF16, "hf_config_json: dtype ",
           dtype_name(dtype));
  const model::RopeScaling& s = args.rope_scaling;
  std::ostringstream j;
  j << "{\n"
    << "  \"architectures\": [\"LlamaForCausalLM\"],\n"
    << "  \"model_type\": \"llama\",\n"
    << "  \"torch_dtype\": \"" << (dtype == DType::F32 ? "float32" : "bfloat16") << "\",\n"
    << "  \"hidden_size\": " << args.dim << ",\n"
    << "  \"intermediate_size\": " << args.ffn_dim << ",\n"
    << "  \"num_hidden_layers\": " << args.n_layers << ",\n"
    << "  \"num_attention_heads\": " << args.n_heads << ",\n"
    << "  \"num_key_value_heads\": " << args.n_kv_heads << ",\n"
    << "  \"head_dim\": " << args.head_dim() << ",\n"
    << "  \"vocab_size\": " << args.vocab_size << ",\n"
    << "  \"rms_norm_eps\": " << json_number(args.norm_eps) << ",\n"
    << "  \"rope_theta\": " << json_number(args.rope_theta) << ",\n";
  if (s.enabled) {
    j << "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": " << json_number(s.factor)
      << ", \"low_freq_factor\": " << json_number(s.low_freq_factor)
      << ", \"high_freq_factor\": " << json_number(s.high_freq_factor)
      << ", \"original_max_position_embeddings\": " << static_cast<int64_t>(s.original_max_position)
      << "},\n"
      << "  \"max_position_embeddings\": " << hf_max_position_embeddings(args) << ",\n";
  } else {
    j << "  \"rope_scaling\": null,\n"
      << "  \"max_position_embeddings\": " << hf_max_position_embeddings(args) << ",\n";
  }
  j << "  \"hidden_act\": \"silu\",\n"
    << "  \"attention_bias\": false,\n"
    << "  \"attention_dropout\": 0.0,\n"
    << "  \"mlp_bias\": false,\n"
    << "  \"initializer_range\": 0.02,\n"
    << "  \"pretraining_tp\": 1,\n"
    << "  \"tie_word_embeddings\": " << (args.tie_word_embeddings ? "true" : "false") << ",\n"
    << "  \"use_cache\": true,\n"
    << "  \"bos_token_id\": 128000,\n"
    << "  \"eos_token_id\": 128001\n"
    << "}\n";
  return j.str();
}

std::map<std::string, std::string> read_hf_index(const std::string& path) {
  const JsonReader json = hf_json_reader(path, "index");
  JsonDocument document;
  const JsonObject root = read_json_object(document, json, path);
  const std::optional<JsonValue> map_value = root.find("weight_map");
  const std::optional<JsonObject> map = map_value ? map_value->get_object() : std::nullopt;
  if (!map) json.fail_file("no \"weight_map\" object (tensor name to shard file)");
  std::map<std::string, std::string> weight_map;
  for (const JsonMember entry : *map) {
    const std::optional<std::string_view> file = entry.value.get_string();
    if (!file) json.fail_file("weight_map[\"", entry.key, "\"] is not a file name string");
    if (!is_plain_file_name(*file)) {
      json.fail_file("weight_map[\"", entry.key, "\"] names shard '", *file,
                     "', which is not a plain file name in the folder (no '/', no '..')");
    }
    weight_map.emplace(std::string(entry.key), std::string(*file));  // keys are unique (parse())
  }
  return weight_map;
}

std::string hf_index_json(const std::map<std::string, std::string>& weight_map,
                          uint64_t total_size) {
  std::string j = "{\n  \"metadata\": {\"total_size\": " + std::to_string(total_size) +
                  "},\n  \"weight_map\": ";
  append_json_lines(j, weight_map, 4,
                    [](std::string& out, const std::string& file) { append_json_string(out, file); });
  j += "\n}\n";
  return j;
}

std::string hf_shard_name(int64_t k, int64_t parts) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05lld-of-%05lld.safetensors",
                static_cast<long long>(k), static_cast<long long>(parts));
  return name;
}

HfWeights::HfWeights(const std::string& folder, const std::string& folder_key) {
  const fs::path dir(folder);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    input_error(folder_key, ": '", folder,
                "' is not a folder; point it at a Hugging Face Llama folder (config.json, "
                "model*.safetensors)");
  }
  const fs::path index = dir / kHfIndexFile;
  if (fs::exists(index, ec)) {
    describe_ = index.string();
    std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
    for (const auto& [tensor, file] : read_hf_index(describe_)) {
      std::shared_ptr<SafetensorsFile>& shard = shards[file];
      if (!shard) {
        if (!fs::is_regular_file(dir / file, ec)) {
          input_error("index '", describe_, "' names shard '", file, "' (for ", tensor,
                      "), which is missing from the folder; the download is incomplete");
        }
        shard = std::make_shared<SafetensorsFile>((dir / file).string());
      }
      where_[tensor] = shard;
    }
    return;
  }
  describe_ = (dir / kHfSingleFile).string();
  if (!fs::exists(describe_, ec)) {
    input_error(folder_key, ": '", folder, "' has neither ", kHfIndexFile,
                " nor ", kHfSingleFile, "; is it a Hugging Face model folder?");
  }
  auto file = std::make_shared<SafetensorsFile>(describe_);
  for (const std::string& name : file->names()) where_[name] = file;
}

const SafetensorsFile& HfWeights::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) input_error("'", describe_, "' has no tensor ", name);
  if (!it->second->contains(name)) {
    input_error("index '", describe_, "' puts ", name, " in '", it->second->path(),
                "', which has no such tensor");
  }
  return *it->second;
}

void write_file_synced(const std::string& path, const std::string& content) {
  const char* failed = titan::write_file_synced(path, content);
  if (failed == nullptr) return;
  const std::string_view step = failed;
  if (step == "create") input_error("cannot write '", path, "': ", std::strerror(errno));
  if (step == "write") {
    input_error("writing '", path, "' failed: ", std::strerror(errno), " (disk full?)");
  }
  input_error("writing '", path, "' failed at fsync/close: ", std::strerror(errno));
}

}  // namespace titan::checkpoint
