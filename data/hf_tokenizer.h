// Hugging Face byte-level BPE, loaded from a tokenizer.json (Llama 3's, GPT-2's): not built yet.
#pragma once

#include <memory>
#include <string>

#include "data/tokenizer.h"

namespace titan::data {

// A tokenizer.json, or a folder holding one. InputError naming `key` and the file.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path, const std::string& key);

}  // namespace titan::data
