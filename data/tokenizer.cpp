#include "data/tokenizer.h"

#include "data/byte_tokenizer.h"
#include "data/hf_tokenizer.h"

namespace titan::data {

std::vector<int32_t> Tokenizer::encode_document(std::string_view text) const {
  std::vector<int32_t> ids;
  std::vector<int32_t> body = encode(text);
  ids.reserve(body.size() + 2);
  if (const std::optional<int32_t> bos = bos_id()) ids.push_back(*bos);
  ids.insert(ids.end(), body.begin(), body.end());
  if (const std::optional<int32_t> eos = eos_id()) ids.push_back(*eos);
  return ids;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const std::string& key) {
  if (spec.empty() || spec == "byte") return std::make_unique<ByteTokenizer>();
  return load_hf_tokenizer(spec, key);
}

}  // namespace titan::data
