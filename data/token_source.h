// Where training tokens come from: one long stream of token ids, read by position.
//
// Three sources exist: a text file through a tokenizer (data/tokenizer.h; the whole file is one
// document, BOS … EOS as the tokenizer has them); a pre-tokenized binary file (token_file.h), memory-mapped so that
// corpora larger than RAM work; and a folder or glob of such files read as one stream in path
// order (token_shards.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/tokenizer.h"

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

// format: "text", "bin", or "auto" (".bin" files are binary, anything else text). A path naming
// an existing folder, or a glob pattern (* ? [) that is not an existing file, is a stream of .bin
// shards (token_shards.h) under auto or bin. A missing or unreadable file, an empty folder or
// glob, a bad shard: an InputError naming `key` (the config key the path came from: data.path,
// validation.dataset_path), the file and the fix. A text file is tokenized with `tokenizer`
// (null: the byte tokenizer); token files carry their ids already.
std::unique_ptr<TokenSource> open_token_source(const std::string& path, const std::string& format,
                                               const std::string& key = "data.path",
                                               const Tokenizer* tokenizer = nullptr);

}  // namespace titan::data
