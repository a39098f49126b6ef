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
//
// Version 2, conversations with a loss mask (titan_tokenize --chat, data/chat.h): uint32 tokens,
// bit 31 of each set where the token is no target the loss covers (kUntrainedBit), and
//   32      8     window: the conversations are packed into blocks of this many tokens, whole,
//                 so that training windows of window + 1 tokens from token i·window hold them
//                 as they were packed (training.seq_len must equal it)
//   40      8     flags: bit 0 set (the loss mask)
// `titan_tokenize` writes this format from text; any tokenizer can, with the layout above.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "data/token_source.h"

namespace titan::data {

struct TokenFileHeader {
  uint32_t token_bytes = 0;
  uint64_t token_count = 0;
  uint64_t vocab_size = 0;
  uint64_t window = 0;  // version 2: the packed block; 0 for version 1
};

// The id of a token as a file of conversations stores it, and whether the loss reaches it.
inline int32_t token_id(int32_t stored) { return stored & 0x7FFFFFFF; }
inline bool is_trained(int32_t stored) { return stored >= 0; }

// The target the loss skips (any negative one does: model/ops/cross_entropy.h).
inline constexpr int32_t kUntrainedTarget = -1;

// A batch of windows [B, S + 1] as stored → the model's inputs [B, S] (ids) and targets [B, S]
// (ids, or kUntrainedTarget where the loss mask says so), and how many targets are trained.
// Plain streams have no mask: their targets are all trained.
struct WindowTokens {
  Tensor inputs, targets;
  int64_t trained = 0;
};
WindowTokens split_window(const Tensor& window, int64_t seq_len);

inline constexpr uint32_t kUntrainedBit = 0x80000000u;
inline constexpr uint32_t kMaskedTokenFileVersion = 2;

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

// Writes a version-2 file: ids[i] with kUntrainedBit where trained[i] is 0, windows of `window`.
void write_masked_token_file(const std::string& path, const std::vector<int32_t>& ids,
                             const std::vector<uint8_t>& trained, int64_t vocab_size,
                             int64_t window);

// Memory-maps a token file; InputError naming `key` (the config key that named the file) when it
// is missing or not this format.
std::unique_ptr<TokenSource> open_token_file(const std::string& path,
                                             const std::string& key = "data.path");

}  // namespace titan::data
