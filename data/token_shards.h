// Many token files read as one stream: a folder or a glob of `.bin` shards (token_file.h), as
// `titan_tokenize --shard-tokens N` writes them.
//
// Order. The shards are sorted by path, compared byte by byte, so that zero-padded numbers sort
// numerically (shard_00000.bin, shard_00001.bin, …, shard_00042.bin); the stream is their
// concatenation: its token t is token t − start(k) of the shard k holding it, start(k) being the
// tokens of the shards before k. Windows (loader.h) may straddle two shards.
//
// Growth. Adding shards that sort after every existing one (the next numbers) only appends
// tokens: every token, and so every training window, of the old stream keeps its position.
// docs/data.md says what that means for a resumed run's sample order.
//
// Each shard is memory-mapped and its header checked when the stream opens, so a bad shard is
// refused before training, not when the loader first reaches it. The stream's vocab_bound is
// the largest any shard declares, so the model's vocab check covers every shard.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/token_source.h"

namespace titan::data {

// True when `path` names shards rather than one file: an existing folder, or a pattern holding
// a glob character (* ? [) that is not itself an existing file.
bool names_token_shards(const std::string& path);

// The shard files `path` names, in stream order: a folder's regular files ending in `.bin` (not
// its subfolders), or the regular files a glob matches. InputError naming `key`, the path and
// the fix when there are none, or the folder cannot be read.
std::vector<std::string> list_token_shards(const std::string& path, const std::string& key);

class TokenShards final : public TokenSource {
 public:
  // Opens every file (token_file.h); an InputError names `key`, the shard and its place.
  TokenShards(std::string pattern, const std::vector<std::string>& paths, const std::string& key);

  int64_t size() const override { return starts_.back(); }
  void read(int64_t start, int64_t count, int32_t* dst) const override;
  int64_t vocab_bound() const override { return vocab_bound_; }
  int64_t packed_window() const override { return shards_.front()->packed_window(); }
  // "shards/*.bin (43 shards shard_00000.bin … shard_00042.bin, 1204000000 tokens, vocab 128256)"
  std::string describe() const override;

  int64_t shard_count() const { return static_cast<int64_t>(shards_.size()); }
  const std::string& shard_path(int64_t k) const { return paths_.at(k); }
  int64_t shard_start(int64_t k) const { return starts_.at(k); }  // its first stream token

 private:
  std::string pattern_;
  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<TokenSource>> shards_;
  std::vector<int64_t> starts_;  // [shards + 1]: starts_[k] is shard k's first token; back() = size
  int64_t vocab_bound_ = 0;
};

// list_token_shards, then TokenShards.
std::unique_ptr<TokenSource> open_token_shards(const std::string& path, const std::string& key);

}  // namespace titan::data
