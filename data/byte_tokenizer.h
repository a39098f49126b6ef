// Byte-level tokenizer: every UTF-8 byte is its own token (ids 0–255), plus BOS (256) and EOS
// (257). Lossless on any text and needs no vocabulary file; any model with vocab_size >= 258
// can train on it (the debug model has 2048).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace titan::data {

class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kBos = 256;
  static constexpr int32_t kEos = 257;
  static constexpr int64_t kVocabSize = 258;

  // Every byte of `text`, as is.
  std::vector<int32_t> encode(std::string_view text) const override;
  // Bytes back to text; BOS and EOS are dropped (they have no text here). InputError for an id
  // that is not a byte, BOS or EOS.
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return kVocabSize; }
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::optional<int32_t> eos_id() const override { return kEos; }
  std::string describe() const override { return "byte tokenizer"; }
};

}  // namespace titan::data
