// Byte-level BPE as Hugging Face's `BPE` model runs it: the vocabulary and merges of a
// tokenizer.json, applied to one pre-tokenized word at a time.
//
// The file spells tokens in GPT-2's byte-level alphabet (each byte drawn as a printable code
// point: space as "Ġ", newline as "Ċ"); here every token is turned back into its bytes once, at
// load, so a word is merged as bytes and never re-spelled. The merge loop is HF's (`Word::
// merge_all`): repeatedly merge the adjacent pair of lowest rank, the leftmost one on a tie, one
// occurrence at a time. Words already merged are remembered in a per-thread cache, which is what
// makes encoding fast: most words of a corpus have been seen before.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace titan::data {

// GPT-2's bytes_to_unicode: the code point that stands for byte `b` in a byte-level token.
char32_t byte_level_char(uint8_t b);
// The byte a code point of the byte-level alphabet stands for, or nothing for any other.
std::optional<uint8_t> byte_level_byte(char32_t c);
// The bytes a token spelled in the byte-level alphabet stands for ("Ġthe" → " the"); nothing
// if a character of it is outside the alphabet. `spelled` must be valid UTF-8.
std::optional<std::string> byte_level_bytes(std::string_view spelled);
// What HF's ByteLevel decoder makes of one token: its bytes, or its own UTF-8 when a character
// is outside the alphabet ("<|begin_of_text|>" is ASCII of the alphabet and stays itself;
// "[PA D]" holds a space, which the alphabet spells "Ġ", so it passes through as is).
std::string byte_level_decode(std::string_view spelled);

struct BpeOptions {
  // HF's `ignore_merges` (Llama 3: true): a word that is itself a token is that token, without
  // running the merges (which could split it differently).
  bool ignore_merges = false;
  // HF's `unk_token`: emitted for a byte whose character is not in the vocabulary; without one
  // such bytes are dropped, as HF drops them. `fuse_unk` makes a run of them one.
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
};

class ByteLevelBpe {
 public:
  // `vocab`: (token as spelled in the file, id); `merges`: pairs of tokens as spelled in the file,
  // in rank order. `where` starts every error message ("data.tokenizer_path: 'x/tokenizer.json'").
  // InputError for an id out of range or given twice, a token given twice, a merge of a token
  // not in the vocabulary or whose result is not in it, an unk_token not in the vocabulary.
  ByteLevelBpe(const std::vector<std::pair<std::string, int64_t>>& vocab,
               const std::vector<std::pair<std::string, std::string>>& merges,
               const BpeOptions& options, const std::string& where);
  ~ByteLevelBpe();
  ByteLevelBpe(const ByteLevelBpe&) = delete;
  ByteLevelBpe& operator=(const ByteLevelBpe&) = delete;

  // Appends the ids of one word (bytes, as the pre-tokenizer cut them) to `ids`. Thread-safe.
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;

  // One above the largest id of the vocabulary.
  int64_t id_limit() const;
  // How many tokens the vocabulary holds (HF numbers added tokens from here).
  size_t token_count() const;
  // The id of a token as spelled in the file ("Ġthe"), if it is in the vocabulary.
  std::optional<int32_t> token_id(std::string_view spelled) const;
  // The bytes token `id` stands for, or nothing if no token has that id. A token spelled with
  // characters outside the byte-level alphabet (no merge can make it) stands for its UTF-8, as
  // HF's ByteLevel decoder has it.
  const std::string* token_bytes(int32_t id) const;
  size_t merge_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace titan::data
