// The token stream cut into shards: OUTPUT_DIR/<prefix>_00000.bin, _00001.bin, … each a token
// file (data/token_file.h) of exactly `shard_tokens` tokens but the last.
//
// The stream is cut where a shard is full, in the middle of a document if need be (as llm.c's
// fineweb shards and Megatron's sample index do): the loader reads the shards back as one stream,
// so a document's two halves are consecutive again, and every shard but the last has the same
// size. The shards are written as <name>.tmp and renamed into place only by commit(), after the
// whole corpus has been read: a run that fails leaves no shard of its own, and the shards of an
// earlier run stay whole until a successful one replaces them. commit() also removes the earlier
// run's shards past the new last one, so that OUTPUT_DIR/<prefix>_*.bin is this run's stream.
//
// The single-file form writes the whole stream to one token file instead (OUTPUT ending in
// .bin), through the same temporary name and rename.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/token_file.h"

namespace titan::tokenize {

class ShardWriter {
 public:
  // Creates `dir` if missing and checks a file can be written in it: InputError naming the
  // folder otherwise, before any input is read.
  ShardWriter(std::string dir, std::string prefix, int64_t shard_tokens, int64_t vocab_size);
  // The single-file form: everything into `path`; its folder is created if missing.
  ShardWriter(std::string path, int64_t vocab_size);
  ~ShardWriter();  // without commit(): removes every temporary file

  void append(std::span<const int32_t> tokens);
  // Finishes the last shard, renames every shard into place, removes stale shards; returns
  // the number of stale shards removed.
  int64_t commit();

  int64_t shards() const { return static_cast<int64_t>(finished_.size()) + (current_ ? 1 : 0); }
  int64_t tokens() const { return tokens_; }
  int token_bytes() const { return token_bytes_; }
  // "out/shard_NNNNN.bin", or the single file's path
  std::string pattern() const;

 private:
  void prepare_folder() const;
  std::string shard_path(int64_t index) const;

  std::string dir_, prefix_;
  std::string single_path_;  // the single-file form's path; empty for shards
  int64_t shard_tokens_, vocab_size_;
  int token_bytes_;
  std::unique_ptr<data::TokenFileWriter> current_;
  std::vector<std::string> finished_;  // temporary paths of the full shards
  int64_t tokens_ = 0;
  bool committed_ = false;
};

}  // namespace titan::tokenize
