#include "checkpoint/hf_files.h"

#include <fcntl.h>
#include <simdjson.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "core/check.h"
#include "core/json_text.h"

namespace titan::checkpoint {

namespace dom = simdjson::dom;
namespace fs = std::filesystem;

namespace {

// config.json and the index are small; anything larger is not one.
constexpr uint64_t kMaxJsonBytes = 64ull << 20;

simdjson::padded_string read_json_file(const std::string& path, const char* what) {
  std::error_code ec;
  const uint64_t bytes = fs::file_size(path, ec);
  if (ec) input_error(what, " '", path, "': cannot read (", ec.message(), ")");
  if (bytes > kMaxJsonBytes) {
    input_error(what, " '", path, "': ", bytes, " bytes, over the ", kMaxJsonBytes,
                "-byte limit for this file; is it the right file?");
  }
  simdjson::padded_string text;
  if (simdjson::padded_string::load(path).get(text) != simdjson::SUCCESS) {
    input_error(what, " '", path, "': cannot read");
  }
  return text;
}

dom::object parse_object(dom::parser& parser, const simdjson::padded_string& text,
                         const std::string& path, const char* what) {
  dom::element root;
  if (simdjson::error_code error = parser.parse(text).get(root)) {
    input_error(what, " '", path, "': not valid JSON (", simdjson::error_message(error), ")");
  }
  dom::object object;
  if (root.get(object) != simdjson::SUCCESS) input_error(what, " '", path, "': not a JSON object");
  return object;
}

std::optional<dom::element> member(dom::object object, std::string_view key) {
  dom::element value;
  if (object.at_key(key).get(value) != simdjson::SUCCESS || value.is_null()) return std::nullopt;
  return value;
}

std::string number_text(double value) {
  char buffer[64];
  // Shortest round-trip digits, positional where that reads naturally (500000.0, not 5e+05).
  const double magnitude = std::abs(value);
  const auto result =
      magnitude >= 1e-4 && magnitude < 1e15
          ? std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::fixed)
          : std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  // JSON has no bare "inf"; an integral double stays a float literal ("500000.0").
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return text;
}

bool same_double(double a, double b) { return a == b || std::abs(a - b) <= 1e-12 * std::abs(b); }

}  // namespace

HfConfig read_hf_config(const std::string& path) {
  const simdjson::padded_string text = read_json_file(path, "config.json");
  dom::parser parser;
  const dom::object root = parse_object(parser, text, path, "config.json");
  auto fail = [&](std::string_view key, auto&&... what) {
    input_error("config.json '", path, "': ", key, ": ", std::forward<decltype(what)>(what)...);
  };
  auto integer = [&](std::string_view key, std::optional<int64_t> otherwise = std::nullopt) {
    std::optional<dom::element> value = member(root, key);
    if (!value) {
      if (otherwise) return *otherwise;
      fail(key, "missing; a Llama config.json has it");
    }
    int64_t out = 0;
    if (value->get(out) != simdjson::SUCCESS || out <= 0) fail(key, "expected a positive integer");
    return out;
  };
  auto real = [&](dom::object object, std::string_view key, std::optional<double> otherwise,
                  std::string_view where) {
    std::optional<dom::element> value = member(object, key);
    if (!value) {
      if (otherwise) return *otherwise;
      fail(where, "missing");
    }
    double out = 0;
    if (value->get(out) != simdjson::SUCCESS || !std::isfinite(out) || out <= 0) {
      fail(where, "expected a positive number");
    }
    return out;
  };

  if (std::optional<dom::element> type = member(root, "model_type")) {
    std::string_view name;
    if (type->get(name) != simdjson::SUCCESS || name != "llama") {
      fail("model_type", "is not \"llama\"; titan_train reads Llama checkpoints only");
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
  a.rope_theta = real(root, "rope_theta", 10000.0, "rope_theta");  // LlamaConfig's default
  if (a.dim % a.n_heads != 0) {
    fail("hidden_size", a.dim, " is not a multiple of num_attention_heads ", a.n_heads);
  }
  const int64_t head_dim = integer("head_dim", a.dim / a.n_heads);
  if (head_dim != a.dim / a.n_heads) {
    fail("head_dim", head_dim, " is not hidden_size / num_attention_heads = ", a.dim / a.n_heads,
         "; titan_train derives the head dim");
  }
  a.rope_scaling.enabled = false;
  if (std::optional<dom::element> scaling = member(root, "rope_scaling")) {
    dom::object s;
    if (scaling->get(s) != simdjson::SUCCESS) fail("rope_scaling", "expected an object or null");
    std::optional<dom::element> kind = member(s, "rope_type");
    if (!kind) kind = member(s, "type");
    std::string_view kind_name;
    if (!kind || kind->get(kind_name) != simdjson::SUCCESS || kind_name != "llama3") {
      fail("rope_scaling.rope_type", "titan_train implements \"llama3\" frequency scaling only");
    }
    a.rope_scaling.enabled = true;
    a.rope_scaling.factor = real(s, "factor", std::nullopt, "rope_scaling.factor");
    a.rope_scaling.low_freq_factor =
        real(s, "low_freq_factor", std::nullopt, "rope_scaling.low_freq_factor");
    a.rope_scaling.high_freq_factor =
        real(s, "high_freq_factor", std::nullopt, "rope_scaling.high_freq_factor");
    a.rope_scaling.original_max_position = real(s, "original_max_position_embeddings",
                                                std::nullopt,
                                                "rope_scaling.original_max_position_embeddings");
  }
  if (std::optional<dom::element> tie = member(root, "tie_word_embeddings")) {
    if (tie->get(config.tie_word_embeddings) != simdjson::SUCCESS) {
      fail("tie_word_embeddings", "expected true or false");
    }
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
  compare("rms_norm_eps", number_text(c.norm_eps), "norm_eps", number_text(args.norm_eps),
          same_double(c.norm_eps, args.norm_eps));
  compare("rope_theta", number_text(c.rope_theta), "rope_theta", number_text(args.rope_theta),
          same_double(c.rope_theta, args.rope_theta));
  const model::RopeScaling& cs = c.rope_scaling;
  const model::RopeScaling& as = args.rope_scaling;
  compare("rope_scaling", cs.enabled ? "llama3" : "null", "rope_scaling",
          as.enabled ? "llama3 (enabled)" : "disabled", cs.enabled == as.enabled);
  if (cs.enabled && as.enabled) {
    compare("rope_scaling.factor", number_text(cs.factor), "rope_scaling.factor",
            number_text(as.factor), same_double(cs.factor, as.factor));
    compare("rope_scaling.low_freq_factor", number_text(cs.low_freq_factor),
            "rope_scaling.low_freq_factor", number_text(as.low_freq_factor),
            same_double(cs.low_freq_factor, as.low_freq_factor));
    compare("rope_scaling.high_freq_factor", number_text(cs.high_freq_factor),
            "rope_scaling.high_freq_factor", number_text(as.high_freq_factor),
            same_double(cs.high_freq_factor, as.high_freq_factor));
    compare("rope_scaling.original_max_position_embeddings",
            number_text(cs.original_max_position), "rope_scaling.original_max_position",
            number_text(as.original_max_position),
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
    << "  \"rms_norm_eps\": " << number_text(args.norm_eps) << ",\n"
    << "  \"rope_theta\": " << number_text(args.rope_theta) << ",\n";
  if (s.enabled) {
    j << "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": " << number_text(s.factor)
      << ", \"low_freq_factor\": " << number_text(s.low_freq_factor)
      << ", \"high_freq_factor\": " << number_text(s.high_freq_factor)
      << ", \"original_max_position_embeddings\": "
      << static_cast<int64_t>(s.original_max_position) << "},\n"
      << "  \"max_position_embeddings\": 131072,\n";
  } else {
    j << "  \"rope_scaling\": null,\n"
      << "  \"max_position_embeddings\": 8192,\n";
  }
  j << "  \"hidden_act\": \"silu\",\n"
    << "  \"attention_bias\": false,\n"
    << "  \"attention_dropout\": 0.0,\n"
    << "  \"mlp_bias\": false,\n"
    << "  \"initializer_range\": 0.02,\n"
    << "  \"pretraining_tp\": 1,\n"
    << "  \"tie_word_embeddings\": false,\n"
    << "  \"use_cache\": true,\n"
    << "  \"bos_token_id\": 128000,\n"
    << "  \"eos_token_id\": 128001\n"
    << "}\n";
  return j.str();
}

std::map<std::string, std::string> read_hf_index(const std::string& path) {
  const simdjson::padded_string text = read_json_file(path, "index");
  dom::parser parser;
  const dom::object root = parse_object(parser, text, path, "index");
  dom::object map;
  if (root["weight_map"].get(map) != simdjson::SUCCESS) {
    input_error("index '", path, "': no \"weight_map\" object (tensor name to shard file)");
  }
  std::map<std::string, std::string> weight_map;
  for (dom::key_value_pair entry : map) {
    std::string_view file;
    if (entry.value.get(file) != simdjson::SUCCESS) {
      input_error("index '", path, "': weight_map[\"", entry.key, "\"] is not a file name string");
    }
    if (file.empty() || file == "." || file.find('/') != std::string_view::npos ||
        file.find('\\') != std::string_view::npos || file.find("..") != std::string_view::npos ||
        file.find('\0') != std::string_view::npos) {
      input_error("index '", path, "': weight_map[\"", entry.key, "\"] names shard '", file,
                  "', which is not a plain file name in the folder (no '/', no '..')");
    }
    if (!weight_map.emplace(std::string(entry.key), std::string(file)).second) {
      input_error("index '", path, "': tensor '", entry.key, "' is listed twice");
    }
  }
  return weight_map;
}

std::string hf_index_json(const std::map<std::string, std::string>& weight_map,
                          uint64_t total_size) {
  std::string j = "{\n  \"metadata\": {\"total_size\": " + std::to_string(total_size) +
                  "},\n  \"weight_map\": {";
  bool first = true;
  for (const auto& [tensor, file] : weight_map) {
    j += first ? "\n    " : ",\n    ";
    first = false;
    append_json_string(j, tensor);
    j += ": ";
    append_json_string(j, file);
  }
  j += "\n  }\n}\n";
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
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) input_error("cannot write '", path, "': ", std::strerror(errno));
  const char* data = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t put = ::write(fd, data, left);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      ::close(fd);
      input_error("writing '", path, "' failed: ", std::strerror(errno), " (disk full?)");
    }
    data += put;
    left -= static_cast<size_t>(put);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    input_error("writing '", path, "' failed at fsync/close: ", std::strerror(errno));
  }
}

}  // namespace titan::checkpoint
