// The pre-tokenized binary format (".bin"): a 64-byte header, then the tokens.
//
//   offset  size  field
//   0       8     magic "TTTOKENS"
//   8       4     version = 1                      (uint32, little-endian, as every field)
//   12      4     token_bytes: 2 (uint16) or 4 (uint32)
//   16      8     token_count
//   24      8     vocab_size: every token id is below it
//   32      32    zero
//   64      …     token_count tokens of token_bytes each, little-endian
//
// uint16 holds vocabularies up to 65536 (GPT-2's 50257), uint32 anything larger (Llama 3's
// 128256). Documents are simply concatenated; put the tokenizer's BOS/EOS between them.
// `titan_tokenize` writes this format from text; any tokenizer can, with the layout above.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/token_source.h"

namespace titan::data {

struct TokenFileHeader {
  uint32_t token_bytes = 0;
  uint64_t token_count = 0;
  uint64_t vocab_size = 0;
};

// Writes `tokens` to `path`; token_bytes 2 or 4 (every token must fit).
void write_token_file(const std::string& path, const std::vector<int32_t>& tokens,
                      int64_t vocab_size, int token_bytes);

// Writes a token file as its tokens arrive, so that a shard of 100M tokens never sits in memory
// (titan_tokenize); finish() fills in the header's count.
class TokenFileWriter {
 public:
  // Creates or truncates `path`; InputError when it cannot.
  TokenFileWriter(std::string path, int64_t vocab_size, int token_bytes);
  ~TokenFileWriter();  // an unfinished file is closed as it is: its header counts no token
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  void append(std::span<const int32_t> tokens);  // Error for a token outside the vocab
  void finish();  // InputError when the file cannot be written (a full disk)
  int64_t token_count() const { return count_; }

 private:
  void write(const unsigned char* bytes, size_t size);

  std::string path_;
  int64_t vocab_size_;
  int token_bytes_;
  std::FILE* file_ = nullptr;
  int64_t count_ = 0;
  std::vector<unsigned char> buffer_;  // tokens encoded for one fwrite
};

// Memory-maps a token file; InputError naming `key` (the config key that named the file) when it
// is missing or not this format.
std::unique_ptr<TokenSource> open_token_file(const std::string& path,
                                             const std::string& key = "data.path");

}  // namespace titan::data
