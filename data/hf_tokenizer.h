// Hugging Face byte-level BPE from a tokenizer.json (Llama 3's, GPT-2's), token for token what
// HF's own `tokenizers` library gives (docs/tokenizer.md; test/data/test_hf_tokenizer.cpp holds
// the reference test against it).
//
// encode(text), as HF's `encode(text, add_special_tokens=False)`:
//   1. invalid UTF-8 becomes U+FFFD, one per maximal invalid subsequence (what a UTF-8 reader
//      with replacement, such as JavaScript's TextDecoder or Python's errors="replace", makes
//      of the bytes before HF ever sees them);
//   2. added tokens (special or not) are cut out where their text appears, leftmost and then
//      longest first, as HF's AddedVocabulary does: "<|end_of_text|>" inside a text is that
//      token, not its characters;
//   3. the pre-tokenizer cuts the rest into words (data/pretokenizer.h);
//   4. byte-level BPE merges each word (data/bpe.h).
// BOS and EOS are not part of encode(); encode_document adds them (bos_id, eos_id).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace titan::data {

class HfTokenizer final : public Tokenizer {
 public:
  // `path`: a tokenizer.json, or a folder holding one. InputError naming `key`, the file and the
  // JSON key at fault for anything it cannot read faithfully.
  static std::unique_ptr<HfTokenizer> load(const std::string& path, const std::string& key);
  ~HfTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  // Each id's bytes, as HF's ByteLevel decoder makes them; an added token as its text. The
  // result is exactly the bytes (HF then replaces invalid UTF-8, which a slice of the ids of
  // one character can leave; here the caller decides). InputError for an id no token has.
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> bos_id() const override;
  std::optional<int32_t> eos_id() const override;
  std::string describe() const override;

  // The id of an added token by its text ("<|end_of_text|>") or of a vocabulary token as the
  // file spells it ("Ġthe").
  std::optional<int32_t> token_id(std::string_view token) const;
  // The words encode() merges, in order, as bytes (after step 3 above); added tokens appear as
  // their text. For tests and for looking at what the pre-tokenizer does.
  std::vector<std::string> words(std::string_view text) const;
  const std::string& file() const;

 private:
  struct Impl;
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// load_tokenizer's entry for everything but "byte".
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path, const std::string& key);

}  // namespace titan::data
