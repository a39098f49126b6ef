#include "data/hf_tokenizer.h"

#include "core/check.h"

namespace titan::data {

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path, const std::string& key) {
  input_error(key, ": '", path, "': Hugging Face tokenizers are not built yet; use byte");
}

}  // namespace titan::data
