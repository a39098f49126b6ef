// Text to token ids and back, behind one interface (docs/architecture.md#decision-15): the
// byte-level tokenizer (data/byte_tokenizer.h) and Hugging Face's byte-level BPE from a
// tokenizer.json (data/hf_tokenizer.h) are two implementations. Token files (data/token_file.h) are
// the boundary: titan_tokenize encodes corpora offline, in parallel, and training reads ids.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace titan::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The ids of `text`, with no BOS or EOS added. Thread-safe: titan_tokenize calls it from
  // every core at once on one tokenizer.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids back to text; special tokens come out as their text ("<|begin_of_text|>"), except
  // where an implementation says otherwise. InputError for an id at or above vocab_size().
  virtual std::string decode(std::span<const int32_t> ids) const = 0;

  // Every id is below this (what model.vocab_size must be at least).
  virtual int64_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // "Hugging Face BPE from tokenizer.json (128256 tokens)", for logs and file headers.
  virtual std::string describe() const = 0;

  // One document of a token stream: BOS (when the tokenizer has one), encode(text), EOS (when
  // it has one), as torchtitan's tokenizer.encode(text, bos=True, eos=True).
  std::vector<int32_t> encode_document(std::string_view text) const;
};

// "byte" (or empty): the byte-level tokenizer. Otherwise a Hugging Face tokenizer.json, or a
// folder holding one (torchtitan's model.hf_assets_path). InputError naming `key` (the config
// key or command-line flag it came from) and the file when it cannot be loaded.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec, const std::string& key);

}  // namespace titan::data
