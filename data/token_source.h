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

#include "core/enum_names.h"
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
  // A stream of conversations packed for training (titan_tokenize --chat, token_file.h version
  // 2): the block length its windows must have (training.seq_len), and its tokens carry
  // kUntrainedBit (token_file.h) where no loss reaches them. 0: a plain stream, every token a
  // target.
  virtual int64_t packed_window() const { return 0; }
  virtual std::string describe() const = 0;  // "corpus/kjv.txt (text, byte tokenizer, 4.3M tokens)"
};

// How a path is read: "text" through a tokenizer, "bin" as token files, or "auto": by what the
// path names (resolve_token_format).
enum class TokenFormat { Auto, Text, Bin };
inline constexpr EnumName<TokenFormat> kTokenFormatList[] = {
    {TokenFormat::Auto, "auto"}, {TokenFormat::Text, "text"}, {TokenFormat::Bin, "bin"}};
inline constexpr EnumNames<TokenFormat> kTokenFormats{"format", kTokenFormatList};

// A token stream as the caller's options name it. The keys are the caller's names for those
// options (titan_train: data.path and data.format, or validation.dataset_path): every error
// names the one at fault.
struct TokenSourceSpec {
  std::string path;
  TokenFormat format = TokenFormat::Auto;
  std::string path_key;
  std::string format_key;
};

// The one reading of "auto": a path naming an existing folder, or a glob pattern (* ? [) that
// is not an existing file, is a stream of .bin shards (token_shards.h); a file is binary when
// it ends in .bin, else text. An explicit format is kept.
TokenFormat resolve_token_format(const std::string& path, TokenFormat format);

// A missing or unreadable file, an empty folder or glob, a bad shard, shards read as text: an
// InputError naming the spec's key at fault, the file and the fix. A text file is tokenized
// with `tokenizer` (null: the byte tokenizer); token files carry their ids already.
std::unique_ptr<TokenSource> open_token_source(const TokenSourceSpec& spec,
                                               const Tokenizer* tokenizer = nullptr);

}  // namespace titan::data
