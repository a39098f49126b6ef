#include "data/byte_tokenizer.h"

#include "core/check.h"

namespace titan::data {

std::vector<int32_t> ByteTokenizer::encode_document(std::string_view text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 2);
  ids.push_back(kBos);
  for (unsigned char byte : text) ids.push_back(byte);
  ids.push_back(kEos);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id == kBos || id == kEos) continue;
    TT_CHECK(id >= 0 && id < 256, "byte tokenizer: id ", id, " is not a byte, BOS or EOS");
    text.push_back(static_cast<char>(id));
  }
  return text;
}

}  // namespace titan::data
