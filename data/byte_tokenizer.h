// Byte-level tokenizer: every UTF-8 byte is its own token (ids 0–255), plus BOS (256) and EOS
// (257). Lossless on any text and needs no vocabulary file; any model with vocab_size >= 258
// can train on it (the debug model has 2048).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

struct ByteTokenizer {
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int64_t kVocabSize = 258;

  // BOS, the bytes of `text`, EOS.
  static std::vector<int32_t> encode_document(std::string_view text);
  // Bytes back to text; BOS and EOS are dropped, ids above 255 other than those are an Error.
  static std::string decode(const std::vector<int32_t>& ids);
};

}  // namespace titan::data
