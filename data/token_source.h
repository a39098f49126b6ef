// Where training tokens come from: one long stream of token ids, read by position.
//
// Two sources exist: a text file through the byte-level tokenizer (the whole file is one
// document, BOS … EOS), and a pre-tokenized binary file (token_file.h), memory-mapped so that
// corpora larger than RAM work.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace titan::data {

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t size() const = 0;  // tokens in the stream
  // Copies tokens [start, start + count) to dst.
  virtual void read(int64_t start, int64_t count, int32_t* dst) const = 0;
  // Every token id is below this bound (the tokenizer's vocab size).
  virtual int64_t vocab_bound() const = 0;
  virtual std::string describe() const = 0;  // "corpus/kjv.txt (text, byte tokenizer, 4.3M tokens)"
};

// format: "text", "bin", or "auto" (".bin" files are binary, anything else text). A missing or
// unreadable file is an InputError naming data.path and the fix.
std::unique_ptr<TokenSource> open_token_source(const std::string& path, const std::string& format);

}  // namespace titan::data
