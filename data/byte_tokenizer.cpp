#include "data/byte_tokenizer.h"

#include "core/check.h"

namespace titan::data {

std::vector<int32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char byte : text) ids.push_back(byte);
  return ids;
}

std::string ByteTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  text.reserve(ids.size());
  for (int32_t id : ids) {
    if (id == kBos || id == kEos) continue;
    if (id < 0 || id >= 256) {
      input_error("byte tokenizer: id ", id,
                  " is not a byte (0..255), BOS (256) or EOS (257); decode ids of this tokenizer");
    }
    text.push_back(static_cast<char>(id));
  }
  return text;
}

}  // namespace titan::data
