// The two JSON files of a Hugging Face Llama folder, and the folder's tensors by name.
//
//   config.json                    the model's dims (transformers' LlamaConfig)
//   model.safetensors              the weights, in one file, or
//   model-0000K-of-0000M.safetensors + model.safetensors.index.json  ({"weight_map": {tensor:
//                                  file}}), sharded
//
// Every reader treats the files as hostile (docs/architecture.md#decision-12): a size cap before
// reading, core's JSON reader (simdjson), each field checked, shard names that are plain file
// names (no '/', no ".."), every shard present; one InputError line naming the file and
// the problem. The one exception is the config check: every mismatch with the model gets its
// own line, all in one error, so a user fixes them in one go.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "model/config.h"

namespace titan::checkpoint {

inline constexpr char kHfConfigFile[] = "config.json";
inline constexpr char kHfIndexFile[] = "model.safetensors.index.json";
inline constexpr char kHfSingleFile[] = "model.safetensors";

// The max_position_embeddings a Hugging Face export of `args` declares (Llama 3.1's 131072 with
// its RoPE scaling, Llama 3's 8192 without): the sequence limit titan_generate reads from a
// titan_train checkpoint, and the one eval.tasks scores under.
int64_t hf_max_position_embeddings(const model::ModelArgs& args);

// What config.json says about the model (the fields titan_train's ModelArgs holds).
struct HfConfig {
  model::ModelArgs args;  // flavor empty
  bool tie_word_embeddings = false;
  std::string dtype;  // "dtype" or "torch_dtype" ("bfloat16", …); "" when it has neither
  // What was assumed for a key the file leaves out that changes the model (RoPE in neither
  // layout: LlamaConfig's default), as a sentence naming the file, for the caller to log; "".
  std::string assumed;
};

// Parses config.json, in transformers 4's layout or 5's (hf_config_layouts.h); InputError
// naming the file and the key for a missing or mistyped field, a model_type other than
// "llama", a RoPE titan_train does not implement, or the two layouts disagreeing.
HfConfig read_hf_config(const std::string& path);

// InputError listing, one line each, every dim in which `config` differs from `args` (HF's key
// names, both values), naming the file; nothing when they agree. `model_section` is the caller's
// name for the options that chose `args` (titan_train: "model"), for the fix; empty: none.
void check_hf_config(const HfConfig& config, const model::ModelArgs& args, const std::string& path,
                     const std::string& model_section = "");

// config.json for `args` that transformers' LlamaForCausalLM loads, 4 and 5 alike: in
// transformers 4's layout (hf_config_layouts.h says why), LlamaForCausalLM, llama, torch_dtype
// (float32 or bfloat16), untied embeddings, Llama 3's BOS/EOS ids, rope_theta, and
// rope_scaling "llama3" when the model scales its frequencies (null otherwise).
std::string hf_config_json(const model::ModelArgs& args, DType dtype);

// model.safetensors.index.json: tensor → shard file. InputError naming the file for bad JSON, a
// missing weight_map, a non-string entry or a shard name that is not a plain file name.
std::map<std::string, std::string> read_hf_index(const std::string& path);
std::string hf_index_json(const std::map<std::string, std::string>& weight_map,
                          uint64_t total_size);

// "model-00002-of-00004.safetensors" (K counted from 1, as transformers names them).
std::string hf_shard_name(int64_t k, int64_t parts);

// A HF folder's tensors: through its index when it has one, else its model.safetensors. Every
// shard the index names must exist (and parse); file_of() checks the shard holds the tensor.
class HfWeights {
 public:
  // `folder_key`: the caller's name for the option that named the folder, for the messages.
  explicit HfWeights(const std::string& folder, const std::string& folder_key = "hf_folder");
  bool contains(const std::string& name) const { return where_.count(name) > 0; }
  const SafetensorsFile& file_of(const std::string& name) const;
  const std::string& describe() const { return describe_; }  // the index or the file

 private:
  std::string describe_;
  std::map<std::string, std::shared_ptr<SafetensorsFile>> where_;
};

// Writes `content` to `path` and fsyncs it.
void write_file_synced(const std::string& path, const std::string& content);

}  // namespace titan::checkpoint
