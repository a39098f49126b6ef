// The keys of a Hugging Face config.json that transformers 4 and 5 spell differently, read in
// either layout:
//
//   transformers 4 (and Meta's folders)       transformers 5
//   "rope_theta": 500000.0                    "rope_parameters": {"rope_theta": 500000.0,
//   "rope_scaling": null | {"rope_type":        "rope_type": "default" | "llama3", <llama3's
//       "llama3", <llama3's factors>}              factors>}
//   "torch_dtype": "bfloat16"                 "dtype": "bfloat16"
//
// A reader that knows only one layout takes a folder saved in the other for another model
// without a word (LlamaConfig's default rope_theta is 10000, Llama 3's 500000). So: either
// layout is read; a folder holding both is read only when they say the same, since transformers
// 4 and 5 would each take their own; a RoPE titan_train does not implement ("linear",
// "dynamic", "yarn", "longrope", ...) is refused; a folder with neither gets LlamaConfig's
// default, and a note saying so for the caller to log. Each refusal is one InputError line
// naming the key and the value.
//
// hf_config_json (hf_files.h) writes transformers 4's layout: transformers 5 still reads it
// (it moves rope_scaling and rope_theta into rope_parameters when it loads a config), while
// transformers 4 ignores rope_parameters, so it is the one layout both read the same way.
#pragma once

#include <string>

#include "core/json_reader.h"
#include "model/config.h"

namespace titan::checkpoint {

// LlamaConfig's rope_theta when config.json names none (transformers 4 and 5 alike).
inline constexpr double kLlamaConfigDefaultRopeTheta = 10000.0;

struct HfRope {
  double theta = kLlamaConfigDefaultRopeTheta;
  model::RopeScaling scaling;  // enabled false: rope_type "default"
  // "" when config.json names RoPE in either layout; otherwise what was assumed, for a log.
  std::string assumed;
};

// RoPE from `root`, the config.json object `json` reads.
HfRope read_hf_rope(const JsonReader& json, JsonObject root);

// "dtype" or "torch_dtype" ("float32", "bfloat16", …), whichever config.json has; "" for
// neither. Refused: a value that is not a string, and the two keys disagreeing.
std::string read_hf_dtype(const JsonReader& json, JsonObject root);

}  // namespace titan::checkpoint
